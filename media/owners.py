"""Which process a worker's temporary file or folder belongs to.

A process killed outright (SIGKILL, the OOM killer, a power cut of its
container) cleans nothing up. So whatever a worker leaves on disk while it
works (an attempt's scratch folder, a partial download into the input
cache) carries its owner in its name: the pid and that process's start time
(clock ticks since boot, from /proc), and a sweep removes what belongs to a
process that is gone. The start time guards against a recycled pid keeping
a dead process's leftovers forever.
"""
from __future__ import annotations

import os
from pathlib import Path


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc), or None
    when there is no such process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_tag() -> str:
    """`<pid>-<start time>` of the calling process, for a name it leaves."""
    pid = os.getpid()
    return f"{pid}-{start_time(pid) or 0}"


def owner_alive(pid: int, start: int) -> bool:
    """Whether the process that made a name with this pid and start time lives."""
    return start_time(pid) == start


def pid_alive(pid: int) -> bool:
    """Whether any process has this pid: for names that carry no start time."""
    return start_time(pid) is not None
