"""A worker host's cache of inputs fetched from object storage.

Why: every part of a chunked video (transcoding/chunks.py) reads the whole
source, and a 10-minute 1080p upload is about 1 GB: with 30-second chunks
the parts fetched it 19 times from the store, on the worker's own core and
the store's, for a video that two hosts share. Upload keys are random and
never reused (media/keys.py), so the object under a key never changes: a
copy fetched once serves every later attempt on this host.

How: one file per key under FAIRLANE_SCRATCH_DIR/inputs (the scratch
filesystem, so an attempt's input is a hard link, not a copy), made
read-only, fetched under a per-key lock (flock) so that two slots of one
host asking at once fetch once. `keep` adds a copy an attempt already has
(the splitting attempt's, which no part then fetches again). The cache is
bounded by FAIRLANE_INPUT_CACHE_BYTES: the least recently used files go
first. Removing a file some attempt still reads is safe: its hard link
keeps the bytes until the attempt's scratch folder goes. With
FileSystemStorage (one host) there is nothing to cache: `fetch`'s
read-only copy is already a hard link to the stored file.

Temporary files. A fetch writes into a file whose name the cache chooses,
`<entry>.part-<pid>-<start>-<token>` (its owner, media/owners.py), and
boto3 writes into that open file (media.store.fetch_into), making no
temporary file of its own. The file is created at the object's full size
before the first byte is asked for, so it counts against the bound while
it exists, and older inputs make room for it first: a 1 GB download cannot
push the cache 1 GB past its bound. A process killed mid-fetch leaves the
file (and its entry's lock file) behind; `sweep` removes both once the
owner is gone: with scratch_sweep (at worker start, and when a prefork
child died) and before every eviction. Names of earlier versions
(`.part-<pid>`, and boto3's own `.part-<pid>.<8 hex>`) carry no start
time: they go once no process has the pid, or after STALE_PARTIAL_S.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from media.owners import owner_alive, owner_tag, pid_alive
from media.store import fetch, fetch_into, size, uses_object_storage

log = logging.getLogger(__name__)

# A partial fetch of an earlier version (no start time in its name)
# untouched this long belongs to a process that died, whatever its pid
# says now (a live one writes to it continually).
STALE_PARTIAL_S = 3600
# `<entry>.part-<pid>-<start>-<token>`; earlier versions: `<entry>.part-<pid>`
# and boto3's temporary name beside it, `<entry>.part-<pid>.<8 hex>`.
_PARTIAL = re.compile(r"^[0-9a-f]{64}\.part-(?P<pid>\d+)(?:-(?P<start>\d+)-[0-9a-f]+|\.[0-9a-fA-F]+)?$")
_LOCK = re.compile(r"^[0-9a-f]{64}\.lock$")


def _root() -> Path:
    return Path(settings.FAIRLANE_SCRATCH_DIR) / "inputs"


def _enabled() -> bool:
    return uses_object_storage() and settings.FAIRLANE_INPUT_CACHE_BYTES > 0


def _entry(key: str) -> Path:
    return _root() / hashlib.sha256(key.encode()).hexdigest()


@contextmanager
def _locked(entry: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the entry's lock; with `wait` off, yield False at once when
    another holds it."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_suffix(".lock"), "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _link(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:  # another filesystem after all: a copy
        shutil.copyfile(source, dest)


def _install(entry: Path, fill: Callable[[Path], None]) -> None:
    """Make `entry` whole or not at all: `fill` writes a partial file (named
    by its owner, for `sweep`) that becomes the entry, read-only, by a
    rename."""
    partial = entry.with_name(f"{entry.name}.part-{owner_tag()}-{uuid.uuid4().hex[:8]}")
    try:
        fill(partial)
        partial.chmod(0o444)
        os.replace(partial, entry)
    finally:
        partial.unlink(missing_ok=True)


def _download(key: str, entry: Path, partial: Path) -> None:
    """Fetch `key` into `partial`, which has the object's size from the
    start: it counts against the bound, and older inputs make room for it,
    before any byte arrives."""
    with open(partial, "wb") as fh:
        fh.truncate(size(key))
        _evict(keep=entry)
        fetch_into(key, fh)


def fetch_input(key: str, dest: Path) -> bool:
    """Put the stored input `key` at `dest` (read-only), from this host's
    cache when it holds the key; returns whether the store was asked."""
    if not _enabled():
        fetch(key, dest, read_only=True)
        return True
    entry = _entry(key)
    with _locked(entry):
        fetched = not entry.exists()
        if fetched:
            _install(entry, lambda partial: _download(key, entry, partial))
        os.utime(entry)  # recently used
        _link(entry, dest)
    if fetched:
        _evict(keep=entry)
    return fetched


def keep(key: str, local: Path) -> None:
    """Add an input an attempt fetched itself (`local`, in its scratch
    folder, not written to afterwards), unless the cache has it already."""
    if not _enabled():
        return
    entry = _entry(key)
    with _locked(entry):
        if entry.exists():
            return
        _install(entry, lambda partial: _link(local, partial))
    _evict(keep=entry)


def _partial_orphaned(path: Path, now: float) -> bool:
    """Whether `path` is a partial fetch whose process is gone."""
    match = _PARTIAL.match(path.name)
    if match is None:
        return False
    if match["start"] is not None:
        return not owner_alive(int(match["pid"]), int(match["start"]))
    try:
        stale = now - path.stat().st_mtime > STALE_PARTIAL_S
    except FileNotFoundError:
        return False
    return stale or not pid_alive(int(match["pid"]))


def _lock_orphaned(path: Path) -> bool:
    """Remove the lock file `path` if its entry is not there and nobody holds
    it (a fetch that died, or never finished); whether it went. A process
    that opened the file just before it went locks a file nobody else will:
    at worst two fetches of one key run at once, each into its own partial
    file, and the rename makes one of them the entry."""
    if not _LOCK.match(path.name):
        return False
    entry = path.with_suffix("")
    with _locked(entry, wait=False) as held:
        if not held or entry.exists():
            return False
        path.unlink(missing_ok=True)
    return True


def sweep() -> int:
    """Remove what fetches whose process is gone left in the cache: their
    partial files and lock files. Returns how many files went."""
    root = _root()
    if not root.is_dir():
        return 0
    now, removed = time.time(), 0
    for path in list(root.iterdir()):
        if _partial_orphaned(path, now):
            path.unlink(missing_ok=True)
            removed += 1
        elif _lock_orphaned(path):
            removed += 1
    if removed:
        log.info("input cache: removed %d file(s) of fetches whose process is gone", removed)
    return removed


def _evict(*, keep: Path) -> None:
    """Remove the least recently used inputs until the cache, the partial
    files of fetches under way included, fits its bound (never `keep`, the
    file just added; nor an input whose lock another process holds: it is
    being used this instant, and waiting for it could deadlock two
    fetches)."""
    sweep()
    files, total = [], 0
    for path in _root().iterdir():
        try:
            st = path.stat()
        except FileNotFoundError:  # another process evicted it
            continue
        if _PARTIAL.match(path.name):
            total += st.st_size
        elif not path.suffix:  # an input, not a lock
            files.append((st.st_mtime, st.st_size, path))
            total += st.st_size
    for _, size_, path in sorted(files):
        if total <= settings.FAIRLANE_INPUT_CACHE_BYTES:
            break
        if path == keep:
            continue
        with _locked(path, wait=False) as held:
            if not held:
                continue
            path.unlink(missing_ok=True)
            path.with_suffix(".lock").unlink(missing_ok=True)
        total -= size_
        log.info("input cache: evicted %s (%d bytes)", path.name, size_)
