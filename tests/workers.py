"""Real Celery worker processes for the tests, one per lane, started the way
the Procfile starts them, against the test database and Redis."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from project.celery import app

BIN = Path(sys.executable).parent


def test_database_url() -> str:
    """The URL of the database pytest-django created, for the workers."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{db['NAME']}"))


class Workers:
    """Both lanes' workers; `stop()` shuts them down (warm, then cold)."""

    def __init__(self, log_dir: Path, *, cpu_concurrency: int = 2, io_concurrency: int = 8):
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1", "LOG_FORMAT": "json"}
        lanes = {
            "cpu": ["-Q", "cpu-transcode", "-P", "prefork", "-c", str(cpu_concurrency)],
            "io": ["-Q", "io-notify", "-P", "threads", "-c", str(io_concurrency)],
        }
        for name, args in lanes.items():
            log = open(log_dir / f"worker-{name}.log", "wb")
            self.procs[name] = subprocess.Popen(
                [str(BIN / "celery"), "-A", "project", "worker", "-n", f"{name}@test-{os.getpid()}", *args,
                 "--include", "bench.tasks",
                 "-l", "INFO", "--without-mingle", "--without-gossip"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.names = {f"{name}@test-{os.getpid()}" for name in lanes}

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} worker exited: {self.log_tail(name)}")
            replies = app.control.ping(timeout=0.5) or []
            if self.names <= {n for reply in replies for n in reply}:
                return
        raise RuntimeError("workers did not answer ping in time:\n" + "\n".join(self.log_tail(n) for n in self.procs))

    def log_tail(self, name: str, lines: int = 40) -> str:
        text = (self.log_dir / f"worker-{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
