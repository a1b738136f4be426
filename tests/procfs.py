"""What /proc says about a process, for tests that watch processes start
and die (a child that must die with its parent, a worker that must not
outlive its starter)."""
from __future__ import annotations

from pathlib import Path


def state(pid: int) -> str | None:
    """The process's state letter, None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[0]


def running(pid: int) -> bool:
    return state(pid) not in (None, "Z", "X")  # a zombie has stopped; only its exit status is left
