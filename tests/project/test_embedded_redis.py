"""The embedded Redis of `make run`: a checkout starts, reuses and stops only
the server it started itself, never whatever else answers on its port
(another checkout's, or any other Redis)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from bench.ports import free_port
from project import embedded_redis

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "project.embedded_redis", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def ours(tmp_path):
    """This checkout's data folder; whatever it started is gone afterwards."""
    data_dir = tmp_path / "checkout-a" / "var" / "redis"
    yield data_dir
    pid_file = data_dir / "redis.pid"
    if pid_file.exists():  # a test that failed half-way must not leave a server behind
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@pytest.fixture
def foreign(tmp_path):
    """A Redis on a port of its own that someone else started (another checkout)."""
    port = free_port()
    proc = embedded_redis.spawn(tmp_path / "checkout-b" / "var" / "redis", port, persist=False)
    yield port
    proc.kill()
    proc.wait()


def test_start_refuses_a_server_it_did_not_start_and_stop_leaves_it_alone(ours, foreign):
    with pytest.raises(embedded_redis.NotOurServer) as refused:
        embedded_redis.start(ours, foreign)
    assert f"port {foreign}" in str(refused.value) and "checkout-b" in str(refused.value)
    with pytest.raises(embedded_redis.NotOurServer):
        embedded_redis.stop(ours, foreign)
    assert embedded_redis.ping(f"redis://127.0.0.1:{foreign}/0")  # still serving its owner


def test_the_command_line_says_why_and_fails(ours, foreign):
    for action in ("start", "stop"):
        result = cli(action, str(ours), str(foreign))
        assert result.returncode == 1 and "not this checkout's" in result.stderr, result
    assert embedded_redis.ping(f"redis://127.0.0.1:{foreign}/0")


def test_a_checkout_reuses_its_own_server_and_stops_it(ours):
    port = free_port()
    url = embedded_redis.start(ours, port)
    run_id = redis.Redis.from_url(url).info("server")["run_id"]
    assert embedded_redis.start(ours, port) == url  # idempotent: the same server, not a second one
    assert redis.Redis.from_url(url).info("server")["run_id"] == run_id
    embedded_redis.stop(ours, port)
    assert not embedded_redis.ping(url)
    embedded_redis.stop(ours, port)  # nothing there: nothing to do
