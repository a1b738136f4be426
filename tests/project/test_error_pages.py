"""`make run` never shows Django's technical error pages: DEBUG is off
unless DJANGO_DEBUG=1 asks for it, a bug answers the site's own 500 page
(no settings, no paths, no traceback) and an unknown address its 404 page,
while the static files are still served. Checked on the real web process
(bin/web) with make run's environment, as its Procfile starts it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench.harness import web_command
from bench.ports import free_port
from tests.promise import wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def make_run_env(var: Path) -> dict[str, str]:
    """What bin/run gives its processes by default: nothing of this test
    run's (its database, var folder, mail backend, DJANGO_ switches)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "FAIRLANE_", "FAIR_", "EMAIL_")) and k != "DATABASE_URL"}
    return {**env, "FAIRLANE_VAR_DIR": str(var), "PATH": f"{BIN}:{env.get('PATH', '')}"}


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize(("switch", "debug"), [({}, "False"), ({"DJANGO_DEBUG": "1"}, "True")])
def test_debug_is_off_unless_asked_for(tmp_path, switch, debug):
    out = manage({**make_run_env(tmp_path), **switch}, "shell", "-c",
                 "from django.conf import settings; print(settings.DEBUG)")
    assert out.strip().splitlines()[-1] == debug


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """The web process serving tests/project/raising_site.py with make
    run's environment, its static files collected first as bin/run does."""
    var = tmp_path_factory.mktemp("make-run-var")
    env = make_run_env(var)
    manage(env, "collectstatic", "--noinput", "-v0")
    port = free_port()
    log = var / "web.log"
    argv, web_env = web_command(f"127.0.0.1:{port}", app="tests.project.raising_site:application")
    proc = subprocess.Popen(argv, cwd=ROOT, env={**env, **web_env}, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            urllib.request.urlopen(url + "/static/uploads/pages.js", timeout=2)
        except OSError:
            return False
        return True

    try:
        wait_for(up, 60, "the web process to answer", every=0.2)
        yield url, log, var
    finally:
        proc.terminate()
        proc.wait(30)


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_a_bug_answers_the_sites_500_page_and_nothing_of_the_server(web):
    url, log, var = web
    status, content_type, body = get(url + "/test-bug/")
    assert status == 500 and content_type.startswith("text/html")
    assert "Something went wrong on our side" in body and 'class="brand"' in body  # the site's page, its header
    secret_key = (var / "secret_key").read_text().strip()
    for leak in (secret_key[:16], str(ROOT), "Traceback", "RuntimeError", "DJANGO_SETTINGS_MODULE", "settings",
                 "a bug whose message"):
        assert leak not in body, f"the 500 page shows {leak!r}"
    # ... and the bug itself is in the log, for whoever runs it.
    assert "a bug whose message names" in log.read_text()


def test_a_bug_under_the_api_answers_in_the_apis_shape(web):
    url, _, var = web
    status, content_type, body = get(url + "/api/test-bug/")
    assert status == 500 and content_type == "application/json"
    assert json.loads(body)["error"]["code"] == "internal_error" and str(ROOT) not in body


def test_an_unknown_address_answers_the_sites_404_page(web):
    url, _, _ = web
    status, content_type, body = get(url + "/no/such/page/")
    assert status == 404 and content_type.startswith("text/html")
    assert "Nothing here" in body and 'class="brand"' in body
    assert "URLconf" not in body and "project.urls" not in body and "test-bug" not in body


@pytest.mark.parametrize("path", ["/static/uploads/pages.js", "/static/admin/css/base.css",
                                  "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css"])
def test_static_files_are_served_with_debug_off(web, path):
    url, _, _ = web
    status, _, body = get(url + path)
    assert status == 200 and body
