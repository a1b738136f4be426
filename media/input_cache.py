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
bounded by FAIRLANE_INPUT_CACHE_BYTES: after an addition the least
recently used files go first. Removing a file some attempt still reads is
safe: its hard link keeps the bytes until the attempt's scratch folder goes.
With FileSystemStorage (one host) there is nothing to cache: `fetch`'s
read-only copy is already a hard link to the stored file.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from media.scratch import scratch_root
from media.store import fetch, uses_object_storage

log = logging.getLogger(__name__)

# A partial fetch untouched this long belongs to a process that died (a
# live one writes to it continually).
STALE_PARTIAL_S = 3600


def _root() -> Path:
    return scratch_root() / "inputs"


def _enabled() -> bool:
    return uses_object_storage() and settings.FAIRLANE_INPUT_CACHE_BYTES > 0


def _entry(key: str) -> Path:
    return _root() / hashlib.sha256(key.encode()).hexdigest()


@contextmanager
def _locked(entry: Path) -> Iterator[None]:
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_suffix(".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _link(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:  # another filesystem after all: a copy
        shutil.copyfile(source, dest)


def _install(entry: Path, fill: Callable[[Path], None]) -> None:
    """Make `entry` whole or not at all: `fill` writes a partial file that
    becomes the entry, read-only, by a rename."""
    partial = entry.with_suffix(f".part-{os.getpid()}")
    try:
        fill(partial)
        partial.chmod(0o444)
        os.replace(partial, entry)
    finally:
        partial.unlink(missing_ok=True)


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
            _install(entry, lambda partial: fetch(key, partial))
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


def _evict(*, keep: Path) -> None:
    """Remove the least recently used files until the cache fits its bound
    (never `keep`, the file just added)."""
    files = []
    now = time.time()
    for path in _root().iterdir():
        try:
            st = path.stat()
        except FileNotFoundError:  # another process evicted it
            continue
        if path.suffix.startswith(".part-") and now - st.st_mtime > STALE_PARTIAL_S:
            path.unlink(missing_ok=True)  # a fetch whose process died
        if not path.suffix:  # not a lock or a partial fetch
            files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= settings.FAIRLANE_INPUT_CACHE_BYTES:
            break
        if path == keep:
            continue
        with _locked(path):
            path.unlink(missing_ok=True)
            path.with_suffix(".lock").unlink(missing_ok=True)
        total -= size
        log.info("input cache: evicted %s (%d bytes)", path.name, size)
