"""What every process a worker starts for a user's file gets: hard resource
limits, and death with the process that started it.

A Celery prefork child can die at any moment (the OOM killer, its hard time
limit, a supervisor's SIGKILL); its job then runs again elsewhere. What it
started must not outlive it: ffmpeg runs in its own session, so a kill of
the worker's process group does not reach it, and its only watchdog is a
thread of the dead worker. An encoding ffmpeg happens to stop a few seconds
after its progress pipe loses its reader, but one stuck before it prints
anything (opening a huge or slow input) would run on. PR_SET_PDEATHSIG has
the kernel SIGKILL the child when its parent dies; Linux only, like the
rest of these limits.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal

_PR_SET_PDEATHSIG = 1
# Loaded once in the parent: a child between fork and exec should not dlopen.
_libc = ctypes.CDLL(None, use_errno=True)


def _ask_for_sigkill_when_parent_dies() -> None:
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def die_with_parent(parent_pid: int) -> None:
    """In a child started by `parent_pid` (the thread of it that forked,
    strictly: the kernel watches that thread, so the caller must wait for the
    child in the thread that started it): be SIGKILLed when it dies.

    The parent may already have died between the fork and this call; then
    the child was handed to another parent and no signal will ever come, so
    look once the request is in place, and die now if the parent changed."""
    _ask_for_sigkill_when_parent_dies()
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def set_limits(*, address_space_bytes: int, cpu_seconds: int) -> None:
    """Hard limits (a child cannot raise them again): memory that a runaway
    decoder cannot pass, CPU time, and no core dumps of user content."""
    resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    # The soft limit sends SIGXCPU; the hard one, a few seconds later, SIGKILL.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
