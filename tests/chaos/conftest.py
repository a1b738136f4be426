"""The fault-injection suite's cluster: real worker processes (and a real
web process) with short leases, started per scenario, killed and stopped
in every way the issue lists; and the summary table printed at the end.

Runs in its own pytest invocation (`pytest -m chaos`, from bin/test) with
an embedded Redis that persists (AOF), so that "Redis restarted" is a real
restart of the Redis this run's web side and workers use.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from bench.harness import Worker, web_command
from bench.ports import free_port
from tests.promise import wait_for
from tests.workers import test_database_url

# Short leases and intervals so that each scenario recovers in seconds; the
# production defaults are in project/settings/ (docs/reliability.md).
CHAOS_ENV = {
    "FAIRLANE_FAULT_INJECTION": "1",
    "FAIRLANE_JOB_LEASE_S": "4",
    "FAIR_RECONCILE_S": "1",
    "FAIR_RECONCILE_MIN_AGE_S": "1",
    "FAIR_RUN_LEASE_S": "8",
    "FAIRLANE_SHUTDOWN_GRACE_S": "3",
    "FAIRLANE_RETRY_BASE_DELAY_S": "0.5",
    "FAIRLANE_RETRY_MAX_DELAY_S": "2",
    "FAIRLANE_MAX_ATTEMPTS": "3",
    "FAIRLANE_EXPORT_CHUNK_FILES": "4",
    "FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK": "2",
    "PYTHONUNBUFFERED": "1",
    "LOG_FORMAT": "json",
}

RESULTS: list[dict] = []


@dataclass
class Cluster:
    """The processes of one scenario; everything is killed at the end."""

    log_dir: Path
    workers: dict[str, Worker] = field(default_factory=dict)
    web: subprocess.Popen | None = None
    web_url: str = ""

    def env(self, **extra: str) -> dict:
        return {**CHAOS_ENV, "DATABASE_URL": test_database_url(), **extra}

    def start_cpu(self, name: str, concurrency: int = 2, **extra: str) -> Worker:
        worker = Worker("cpu-transcode", pool="prefork", concurrency=concurrency, name=name, log_dir=self.log_dir,
                        suffix="chaos", loglevel="INFO", env=self.env(**extra), extra_args=())
        self.workers[name] = worker
        worker.wait_ready()
        return worker

    def start_io(self, **extra: str) -> Worker:
        worker = Worker("io-notify", pool="threads", concurrency=8, name="io", log_dir=self.log_dir,
                        suffix="chaos", loglevel="INFO", env=self.env(**extra), extra_args=())
        self.workers["io"] = worker
        worker.wait_ready()
        return worker

    def start_web(self, **extra: str) -> str:
        """The web process, as the Procfile runs it, on a free port."""
        port = free_port()
        argv, web_env = web_command(f"127.0.0.1:{port}", grace_s=5)
        self.web = subprocess.Popen(
            argv, env={**os.environ, **self.env(**extra), **web_env}, stdout=open(self.log_dir / "web.log", "wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.web_url = f"http://127.0.0.1:{port}"
        import urllib.error
        import urllib.request

        def answering() -> bool:
            try:
                urllib.request.urlopen(self.web_url + "/accounts/login/", timeout=5)
            except urllib.error.HTTPError:  # it answers: up
                pass
            return True

        wait_for(answering, 30, lambda: "the web process: " + (self.log_dir / "web.log").read_text()[-2000:],
                 every=0.2, ignoring=(OSError,))  # OSError: not listening yet
        return self.web_url

    def kill_all(self) -> None:
        procs = [w.proc for w in self.workers.values()] + ([self.web] if self.web else [])
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in procs:
            proc.wait(10)


@pytest.fixture
def cluster(redis_client, tmp_path, live_mail_dir):
    """Fresh Redis state and fresh processes for each scenario."""
    cluster = Cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture
def record():
    """Add a row to the summary table."""
    def add(**row) -> None:
        RESULTS.append(row)
    return add


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    cols = ["scenario", "jobs", "completed", "failed", "duplicates", "lost", "recovery_s", "measured"]
    rows = [[str(r.get(c, "")) for c in cols] for r in RESULTS]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    terminalreporter.section("fault injection summary")
    terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in rows:
        terminalreporter.write_line("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    out = Path(os.environ.get("FAIRLANE_CHAOS_RESULTS", Path(settings.BASE_DIR) / "var" / "chaos-summary.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(RESULTS, indent=2))
    terminalreporter.write_line(f"(also written to {out})")
