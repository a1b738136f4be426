"""Scratch folders go on every way out of an attempt, and those of a
process killed outright go at the next worker start on the host."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest
from celery.signals import worker_init

from media import attempt_scratch

CHILD = """
import os, sys, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup()
from media import attempt_scratch
with attempt_scratch(job_id=sys.argv[1], attempt=1) as path:
    (path / "input").write_bytes(b"x" * 1000)
    print(path, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def scratch(settings, tmp_path) -> Path:
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    return settings.FAIRLANE_SCRATCH_DIR


def test_a_scratch_folder_is_removed_when_its_attempt_ends_well_or_badly(scratch):
    with attempt_scratch(job_id=str(uuid.uuid4()), attempt=1) as path:
        (path / "out").mkdir()
        (path / "out" / "seg.ts").write_bytes(b"G")
        assert oct(path.stat().st_mode & 0o777) == "0o700"
    with pytest.raises(RuntimeError), attempt_scratch(job_id=str(uuid.uuid4()), attempt=2) as path:
        (path / "input").write_bytes(b"x")
        raise RuntimeError("ffmpeg failed")
    assert list(scratch.iterdir()) == []


def test_a_sigkilled_workers_scratch_is_swept_at_the_next_worker_start_and_live_ones_are_kept(scratch):
    env = {**os.environ, "FAIRLANE_SCRATCH_DIR": str(scratch)}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, job], stdout=subprocess.PIPE, text=True, env=env)
             for job in (str(uuid.uuid4()), str(uuid.uuid4()))]
    try:
        paths = [Path(p.stdout.readline().strip()) for p in procs]
        assert all(p.is_dir() for p in paths)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        assert paths[0].is_dir()  # a killed process cleans nothing
        with warnings.catch_warnings():  # Celery's Django fixup wants a real worker as the sender
            warnings.simplefilter("ignore")
            worker_init.send(sender=None)  # what a Celery worker sends as it starts
        assert not paths[0].exists() and paths[1].is_dir()
    finally:
        for p in procs:
            p.kill()
            p.wait()
