"""A worker's private scratch space: one folder per attempt, outside
MEDIA_ROOT (FAIRLANE_SCRATCH_DIR), holding the input copy ffmpeg reads and
the files it writes before they are uploaded.

Removed on every way out of an attempt (success, failure, cancel, time
limit: the context manager's `finally`). A process killed outright cannot
clean up, so each folder's name carries the pid and start time of the
process that made it, and `scratch_sweep` (at worker start, and in the
prefork parent when a child died) removes the folders of processes that are
gone. The start time guards against a recycled pid keeping a dead attempt's
folder forever.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?P<job>[0-9a-f-]+)-a(?P<attempt>\d+)-p(?P<pid>\d+)-(?P<start>\d+)$")


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc), or None
    when there is no such process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, start: int) -> bool:
    return _start_time(pid) == start


def scratch_root() -> Path:
    return Path(settings.FAIRLANE_SCRATCH_DIR)


@contextmanager
def attempt_scratch(*, job_id: str, attempt: int) -> Iterator[Path]:
    """A fresh private folder (mode 0700) for one attempt, removed on exit."""
    pid = os.getpid()
    root = scratch_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{job_id}-a{attempt}-p{pid}-{_start_time(pid) or 0}"
    shutil.rmtree(path, ignore_errors=True)  # a leftover of this very process (a retried delivery)
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch_sweep() -> int:
    """Remove the scratch folders whose process is gone; returns how many."""
    root = scratch_root()
    if not root.is_dir():
        return 0
    removed = 0
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match is None or _alive(int(match["pid"]), int(match["start"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    if removed:
        log.info("removed %d scratch folder(s) of attempts whose process is gone", removed)
    return removed
