"""Secrets stay where they belong: shown once to their owner, never in the
admin, never in the logs, never from the repository."""
from __future__ import annotations

import io
import logging
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.core import signing
from rest_framework.authtoken.models import Token

from bench.harness import web_command
from notify import signing as webhook_signing
from notify.models import Endpoint
from tests.project.test_settings import ROOT, manage
from tests.promise import wait_for
from tests.workers import test_database_url as worker_database_url

pytestmark = pytest.mark.django_db

# An output link's token, as uploads/delivery.py makes them.
TOKEN = signing.dumps(12345, salt="fairlane.output", compress=True)


def test_the_webhook_secret_is_not_in_the_admin(admin_client, make_user):
    secret = webhook_signing.secret_generate()
    endpoint = Endpoint.objects.create(owner=make_user("alice"), url="https://hooks.example/", events=["job.failed"],
                                       secret=secret)
    for url in ("/admin/notify/endpoint/", f"/admin/notify/endpoint/{endpoint.id}/change/"):
        resp = admin_client.get(url)
        assert resp.status_code == 200 and secret.encode() not in resp.content
    key = secret.removeprefix("whsec_").encode()
    assert key not in admin_client.get(f"/admin/notify/endpoint/{endpoint.id}/change/").content


def test_api_tokens_are_not_in_the_admin(admin_client, make_user):
    user = make_user("alice")
    pages = [admin_client.get(url) for url in ("/admin/", "/admin/authtoken/tokenproxy/",
                                                f"/admin/authtoken/tokenproxy/{user.pk}/change/",
                                                f"/admin/auth/user/{user.pk}/change/")]
    assert all(user.auth_token.key.encode() not in page.content for page in pages)


def test_staff_can_still_revoke_a_users_api_token(admin_client, make_user):
    user = make_user("alice")
    resp = admin_client.post("/admin/auth/user/", {"action": "revoke_api_tokens", "_selected_action": [user.pk]})
    assert resp.status_code == 302
    assert not Token.objects.filter(user=user).exists()


def test_the_secret_is_shown_once_in_a_response_no_cache_keeps(make_user, api_client_for, client):
    user, url = make_user("alice"), "https://93.184.216.34/fairlane"  # public: no DNS needed
    resp = api_client_for(user).post("/api/webhooks/", {"url": url, "events": ["job.failed"]}, format="json")
    assert resp.status_code == 201 and "no-store" in resp["Cache-Control"]
    client.force_login(user)
    page = client.post("/notifications/", {"action": "register", "url": url, "events": ["job.failed"]})
    assert b"whsec_" in page.content and "no-store" in page["Cache-Control"]


def test_django_logs_mask_output_link_tokens(client):
    """A link that 404s (expired, or a wrong file name) is logged by
    django.request with its path: the console handler masks the token."""
    [console] = [h for h in logging.getLogger().handlers if h.name == "console"]  # settings.LOGGING's
    stream = io.StringIO()
    old = console.setStream(stream)
    try:
        assert client.get(f"/o/{TOKEN}/nothing.mp4").status_code == 404
    finally:
        console.setStream(old)
    assert "/o/[redacted]/nothing.mp4" in stream.getvalue()
    assert TOKEN not in stream.getvalue()


def test_the_web_process_as_the_procfile_runs_it_logs_each_request_with_output_link_tokens_masked(tmp_path):
    web = next(line for line in (ROOT / "Procfile").read_text().splitlines() if line.startswith("web:"))
    assert web == "web: exec bin/web"
    from bench.ports import free_port

    port = free_port()
    log = tmp_path / "web.log"
    argv, web_env = web_command(f"127.0.0.1:{port}")
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **web_env, "DATABASE_URL": worker_database_url(),
                                                     "LOG_LEVEL": "INFO"}, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/o/{TOKEN}/master.m3u8"
        request = urllib.request.Request(url, headers={"Referer": f"http://127.0.0.1:{port}/o/{TOKEN}/a.m3u8"})

        def answered() -> bool:
            try:
                urllib.request.urlopen(request, timeout=10)
            except urllib.error.HTTPError as exc:  # 404: the output does not exist, which is fine
                assert exc.code == 404
                return True
            return False

        wait_for(answered, 60, log.read_text, every=0.2, ignoring=(OSError,))  # OSError: not listening yet
        wait_for(lambda: 'm3u8 HTTP/1.1" 404' in log.read_text(), 60, log.read_text)  # the access line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert TOKEN not in text, text
    assert '"GET /o/[redacted]/master.m3u8 HTTP/1.1" 404' in text and "/o/[redacted]/a.m3u8" in text


def read_secret_key(var_dir: Path) -> str:
    result = manage("shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)",
                    FAIRLANE_VAR_DIR=str(var_dir))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_without_a_configured_key_each_install_makes_its_own_and_keeps_it(tmp_path):
    first, again, other = (read_secret_key(tmp_path / name) for name in ("a", "a", "b"))
    assert first == again != other
    assert len(first) >= 50 and "dev-only" not in first and "insecure" not in first
    key_file = tmp_path / "a" / "secret_key"
    assert key_file.read_text().strip() == first
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_processes_starting_together_agree_on_the_generated_key(tmp_path):
    """Web, workers and beat start at once on a fresh install: whichever
    writes the key first, every process reads the same one."""
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "FAIRLANE_ENV"))}
    env.update(FAIRLANE_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="project.settings")
    procs = [subprocess.Popen([sys.executable, "-c", f"import django; django.setup()\n{code}"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    keys = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert len(keys) == 1 and len(next(iter(keys))) >= 50
