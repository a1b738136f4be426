"""A worker's private scratch space: one folder per attempt, outside
MEDIA_ROOT (FAIRLANE_SCRATCH_DIR), holding the input copy ffmpeg reads and
the files it writes before they are uploaded.

Removed on every way out of an attempt (success, failure, cancel, time
limit: the context manager's `finally`). A process killed outright cannot
clean up, so each folder's name carries its owner (media/owners.py: pid
and start time), and `scratch_sweep` (at worker start, and in the prefork
parent when a child died) removes the folders of processes that are gone,
and what such processes left in the host's input cache (`inputs/`,
media/input_cache.py: partial downloads).
"""
from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from media import input_cache
from media.owners import owner_alive, owner_tag

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?P<job>[0-9a-f-]+)-a(?P<attempt>\d+)-p(?P<pid>\d+)-(?P<start>\d+)$")


def scratch_root() -> Path:
    return Path(settings.FAIRLANE_SCRATCH_DIR)


@contextmanager
def attempt_scratch(*, job_id: str, attempt: int) -> Iterator[Path]:
    """A fresh private folder (mode 0700) for one attempt, removed on exit."""
    root = scratch_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{job_id}-a{attempt}-p{owner_tag()}"
    shutil.rmtree(path, ignore_errors=True)  # a leftover of this very process (a retried delivery)
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch_sweep() -> int:
    """Remove the scratch folders whose process is gone, and the input
    cache's leftovers of such processes; returns how many."""
    root = scratch_root()
    if not root.is_dir():
        return 0
    removed = 0
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match is None or owner_alive(int(match["pid"]), int(match["start"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    if removed:
        log.info("removed %d scratch folder(s) of attempts whose process is gone", removed)
    return removed + input_cache.sweep()
