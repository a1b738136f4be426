"""A worker started by the harness (bench/harness.py: the benchmarks', the
tests' and the fault-injection suite's) does not outlive the process that
started it: one left running after a killed run would take the next run's
jobs from the same Redis."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.harness import ROOT
from tests.procfs import running
from tests.promise import wait_for

STARTER = """
import sys, time
from pathlib import Path
from bench.harness import Worker
from bench.plain_celery import FIFO_QUEUE
worker = Worker(FIFO_QUEUE, pool="solo", concurrency=1, name="orphan", log_dir=Path(sys.argv[1]),
                app="bench.plain_celery:fifo_app", include=())
print(worker.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_worker_stops_when_the_process_that_started_it_is_killed(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "FAIRLANE_VAR_DIR": str(tmp_path)})
    pid = int(starter.stdout.readline())
    try:
        # Celery itself runs (its interpreter, no longer a wrapper): the
        # parent-death signal was set before that.
        wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"python"), 60,
                 "the worker to start", every=0.05)
        starter.kill()  # as a timeout or ^C ends a run: no cleanup of its own
        starter.wait()
        wait_for(lambda: not running(pid), 60, "the worker to stop with the process that started it")
    finally:
        if running(pid):
            os.killpg(pid, signal.SIGKILL)
