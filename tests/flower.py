"""Flower, started as the Procfile starts it (bin/flower), for the tests
that look at it (tests/e2e/test_flower.py, tests/browser/test_flower_page.py):
the `flower` fixture gives its URL once it listens to both lanes' events."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench.ports import free_port
from tests.promise import wait_for

ROOT = Path(__file__).resolve().parents[1]
AUTH = ("ops", "flower-test-password")


def get(url: str, auth: tuple[str, str] | None = None, timeout: float = 10) -> tuple[int, object]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            body = resp.read()
            is_json = resp.headers.get_content_type() == "application/json"
            return resp.status, json.loads(body) if is_json else body
    except urllib.error.HTTPError as exc:
        return exc.code, None


@pytest.fixture
def flower(workers, tmp_path):
    port = free_port()
    env = {**os.environ, "FLOWER_BASIC_AUTH": ":".join(AUTH), "FLOWER_PORT": str(port),
           "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    with open(tmp_path / "flower.log", "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen([str(ROOT / "bin" / "flower")], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def flower_log() -> str:
        return "Flower; its log:\n" + (tmp_path / "flower.log").read_text()

    def answering() -> bool:
        assert proc.poll() is None, flower_log()
        get(url, timeout=1)
        return True

    wait_for(answering, 30, flower_log, every=0.3, ignoring=(urllib.error.URLError, ConnectionError))

    # Answering HTTP is not yet listening to events: a task that ran before
    # Flower's event receiver was connected would never be in its list. The
    # workers' heartbeats are events, so both lanes alive here means it is.
    def both_lanes_alive() -> bool:
        assert proc.poll() is None, flower_log()
        status, alive = get(f"{url}/api/workers?status=1", auth=AUTH)
        lanes = {name.split("@")[0] for name, up in (alive or {}).items() if up}
        return status == 200 and {"cpu", "io"} <= lanes

    # 60 s: what the two phases had together before they had a wait each.
    wait_for(both_lanes_alive, 60, flower_log, every=0.3)
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)
