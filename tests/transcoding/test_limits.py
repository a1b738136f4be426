"""A process a worker starts for a user's file dies with the worker.

A real parent process (as a Celery prefork child is) starts real work in a
child, then is SIGKILLed, as the OOM killer or a hard time limit would;
the child must be gone soon after, not keep encoding while the job runs
again elsewhere."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procfs import running
from tests.promise import wait_for
from transcoding.ffmpeg import FFMPEG

ROOT = Path(__file__).resolve().parents[2]

# ffmpeg encoding for an hour, and ffmpeg stuck before it prints anything
# (blocked opening its input, as on a slow read of a huge file): a stuck
# ffmpeg never notices that its progress pipe has no reader any more.
_FFMPEG_PARENT = """
import os, sys
from transcoding import ffmpeg
if sys.argv[1] == "encoding":
    args = ["-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25:duration=3600"]
else:
    os.mkfifo(sys.argv[2])  # nobody ever writes: opening it blocks
    args = ["-f", "mpegts", "-i", sys.argv[2]]
ffmpeg.run([*args, "-f", "null", "-"], duration_s=3600)
"""


def _children(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended while we looked
            pass
    return children


def _ffmpeg_run_by(pid: int) -> int | None:
    """The ffmpeg that transcoding.ffmpeg.run started (not one that merely
    checks the binary, as imageio_ffmpeg does on import)."""
    for child in _children(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if argv[0] == FFMPEG.encode() and b"-progress" in argv:
            return child
    return None


def _start(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT,
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings"}, **kwargs)


def _kill_parent_then_wait_for_the_child(parent: subprocess.Popen, child: int) -> None:
    try:
        assert running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # Generous: the kernel signals at once; only a loaded machine delays it.
        wait_for(lambda: not running(child), 30, f"process {child} to die with its parent", every=0.05)
    finally:
        if running(child):  # the test failed: do not leave an hour of encoding behind
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("doing", ["encoding", "stuck"])
def test_ffmpeg_dies_with_the_worker_process_that_started_it(tmp_path: Path, doing: str):
    parent = _start(_FFMPEG_PARENT, doing, str(tmp_path / "input.ts"))
    try:
        child = wait_for(lambda: _ffmpeg_run_by(parent.pid), 60, "ffmpeg to start", every=0.05)
        _kill_parent_then_wait_for_the_child(parent, child)
    finally:
        parent.kill()
        parent.wait()


# A decoding child (transcoding/sandbox.py) asleep for an hour: its parent is
# the worker's fork server, whose parent is the worker.
_SANDBOX_PARENT = """
import time
from transcoding import sandbox
sandbox.run(time.sleep, 3600, timeout_s=7200, memory_bytes=2**30)
"""


def _fork_server_of(pid: int) -> int | None:
    for child in _children(pid):
        try:
            if b"transcoding.sandbox_server" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except FileNotFoundError:
            continue
    return None


def test_a_decoding_child_and_its_fork_server_die_with_the_worker_process():
    parent = _start(_SANDBOX_PARENT)
    try:
        server = wait_for(lambda: _fork_server_of(parent.pid), 60, "the fork server to start", every=0.05)
        # Its forked children carry its command line; anything else it runs
        # (a short-lived `ffmpeg -version` from an import) is not the child.
        child = wait_for(lambda: _fork_server_of(server), 60, "a decoding child", every=0.05)
        try:
            _kill_parent_then_wait_for_the_child(parent, child)
            wait_for(lambda: not running(server), 30, "the fork server to die with the worker", every=0.05)
        finally:
            if running(server):
                os.kill(server, signal.SIGKILL)
    finally:
        parent.kill()
        parent.wait()


# A parent that forks a child and exits before the child asks to die with
# it: the race PR_SET_PDEATHSIG leaves open (the kernel then has no parent
# to watch, so the child must notice by itself). The child waits until it
# has been handed to another parent, so the parent is surely gone.
_PARENT_GONE_FIRST = """
import os, time
from transcoding import limits
parent = os.getpid()
child = os.fork()
if child == 0:
    while os.getppid() == parent:
        time.sleep(0.01)
    limits.die_with_parent(parent)
    time.sleep(3600)
    os._exit(0)
print(child, flush=True)
"""


def test_a_child_whose_parent_died_before_it_asked_to_die_with_it_stops_at_once():
    parent = _start(_PARENT_GONE_FIRST, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.wait()
    try:
        wait_for(lambda: not running(child), 30, f"process {child} to notice its parent is gone", every=0.05)
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)
