"""Extra real processes for the notify end-to-end tests: another io-notify
worker (the rate limit holds across processes, and a worker with its own
settings gets every message of its test on a private Redis: tests/conftest.py's
`private_redis`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from celery import Celery

from bench.harness import Worker
from tests.promise import wait_for
from tests.workers import test_database_url

__all__ = ("IoWorker",)


class IoWorker(Worker):
    """One io-notify worker process (threads pool) against the test database,
    with `env` on top of this process's environment."""

    def __init__(self, name: str, log_dir: Path, *, concurrency: int = 4, **env: str):
        self.env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1", **env}
        super().__init__("io-notify", pool="threads", concurrency=concurrency, name=name, log_dir=log_dir,
                         suffix="notify-test", loglevel="INFO", env=self.env, extra_args=())

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Ping through the worker's own broker (it may be a private Redis)."""
        control = Celery(broker=self.env["REDIS_URL"], set_as_current=False).control

        def answers() -> bool:  # the ping's own timeout spaces the tries
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")
            return any(self.name in reply for reply in control.ping(destination=[self.name], timeout=0.5) or [])

        wait_for(answers, timeout, lambda: f"{self.name} to be ready:\n{self.log_tail()}", every=0)

    def run_django(self, code: str) -> None:
        """Run `code` in a fresh Django process with this worker's settings."""
        subprocess.run([sys.executable, "-c", f"import django; django.setup()\n{code}"], env=self.env, check=True,
                       timeout=60)
