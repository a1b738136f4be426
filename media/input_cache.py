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
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

from django.conf import settings

from media.owners import owner_alive, owner_tag, pid_alive
from media.priority import lower_priority
from media.store import fetch, fetch_into, fetch_range, size, uses_object_storage

log = logging.getLogger(__name__)
T = TypeVar("T")

# A partial fetch of an earlier version (no start time in its name)
# untouched this long belongs to a process that died, whatever its pid
# says now (a live one writes to it continually).
STALE_PARTIAL_S = 3600
# `<entry>.part-<pid>-<start>-<token>`; earlier versions: `<entry>.part-<pid>`
# and boto3's temporary name beside it, `<entry>.part-<pid>.<8 hex>`.
_PARTIAL = re.compile(r"^[0-9a-f]{64}\.part-(?P<pid>\d+)(?:-(?P<start>\d+)-[0-9a-f]+|\.[0-9a-fA-F]+)?$")
_LOCK = re.compile(r"^[0-9a-f]{64}\.lock$")
# `<entry>.note-<name>` (input_note), and what a note's name may be.
_NOTE = re.compile(r"^[0-9a-f]{64}\.note-")
_NOTE_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")
# A note outlives any job that reads it (the parts of one video run within hours).
NOTE_TTL_S = 24 * 3600
# A streamed fetch (Growing): ranges of this size, this many at once, and
# while paced at most this far past the furthest byte a reader waited for.
RANGE_BYTES = 8 * 1024 * 1024
RANGES_IN_FLIGHT = 8
PACED_AHEAD = 128 * 1024 * 1024


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


def _partial(entry: Path) -> Path:
    """A new partial file's name for `entry`, by its owner (for `sweep`)."""
    return entry.with_name(f"{entry.name}.part-{owner_tag()}-{uuid.uuid4().hex[:8]}")


def _install(entry: Path, fill: Callable[[Path], None]) -> None:
    """Make `entry` whole or not at all: `fill` writes a partial file (named
    by its owner, for `sweep`) that becomes the entry, read-only, by a
    rename."""
    partial = _partial(entry)
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


def _note_path(key: str, name: str) -> Path:
    if not _NOTE_NAME.fullmatch(name):
        raise ValueError(f"not a note name: {name!r}")
    entry = _entry(key)
    return entry.with_name(f"{entry.name}.note-{name}")


def input_note(key: str, name: str, make: Callable[[], bytes], parse: Callable[[bytes], T]) -> T:
    """`parse` of the note `name`, a fact learnt from the stored input `key`
    (a whole-file scan's result, transcoding/scan_notes.py) that this host
    keeps beside its cached copy: the object under a key never changes, so
    neither does what was learnt from it. Without a usable note (none, or
    one `parse` refuses with ValueError or TypeError), `make()` writes it,
    under the note's lock (two asking at once make it once) and whole or
    not at all (`_install`); what `make` raises is not noted. A note goes
    with its input's copy, and by `sweep` after NOTE_TTL_S (media on local
    disk has no copy to go with)."""
    note = _note_path(key, name)
    with _locked(note):
        try:
            found = parse(note.read_bytes())
            log.info("input note %s read", note.name)
            return found
        except FileNotFoundError:
            pass
        except (ValueError, TypeError) as exc:  # cut short, or from elsewhere: made again
            log.warning("input note %s unusable, made again: %r", note.name, exc)
        data = make()
        try:
            _install(note, lambda partial: partial.write_bytes(data))
            log.info("input note %s written", note.name)
        except OSError as exc:  # a full scratch disk costs the next reader the work, nothing more
            log.warning("input note %s not written: %r", note.name, exc)
        return parse(data)


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


class Growing:
    """An input on its way into this host's cache, readable while it
    arrives: the parts already written are known, and a reader waits for
    the bytes it needs. A video's first chunk is encoded from it while the
    rest of a large source is still being fetched (transcoding/streamed.py).

    The file is the cache's partial file, at the object's full size from the
    start (what has not arrived reads as zeros, so a reader must `wait`);
    once whole it becomes the cache's entry, as `fetch_input` leaves it, and
    every other attempt on this host links it from there. The entry's lock
    is held from the first byte until then: another slot asking for the key
    waits for this fetch instead of starting its own."""

    def __init__(self, key: str, size: int, *, niceness: int = 0) -> None:
        self.key, self.size, self._niceness = key, size, niceness
        self._cond = threading.Condition()
        self._have: list[tuple[int, int]] = []  # merged [start, end) ranges written
        self._error: BaseException | None = None
        self._done = False
        self._paced = True
        self._furthest = 0  # the furthest byte a reader has waited for
        self.path = _entry(key)

    # -- readers ---------------------------------------------------------------------------

    def _covered(self, start: int, end: int) -> bool:
        end = min(end, self.size)
        return self._done or start >= end or any(a <= start and end <= b for a, b in self._have)

    def wait(self, start: int, end: int, *, stop: threading.Event | None = None, lead: bool = True) -> None:
        """Return once bytes [start, end) are in the file; raise what the
        fetch failed with, or Stopped when `stop` is set first. A reader
        that does not `lead` never moves the paced fetch along (see
        `release`): it reads what the leading readers had fetched."""
        with self._cond:
            if lead and end > self._furthest:
                self._furthest = end
                self._cond.notify_all()  # the fetch may go further now
            while not self._covered(start, end):
                if self._error is not None:
                    raise self._error
                if stop is not None and stop.is_set():
                    raise Stopped(self.key)
                self._cond.wait(0.25)

    def wait_from(self, start: int, *, stop: threading.Event | None = None, lead: bool = True) -> int:
        """Wait for the byte at `start`; return where the bytes that have
        arrived from there end (at most the file's size)."""
        self.wait(start, start + 1, stop=stop, lead=lead)
        with self._cond:
            if self._done:
                return self.size
            return next(min(b, self.size) for a, b in self._have if a <= start < b)

    def wait_all(self) -> None:
        """Fetch the rest at full speed; return once it is the cache's entry."""
        self.release()
        with self._cond:
            while not self._done:
                if self._error is not None:
                    raise self._error
                self._cond.wait(0.25)

    def release(self) -> None:
        """Fetch the rest at full speed from now on. Until then the fetch
        keeps within PACED_AHEAD of its furthest reader: a video's first
        frames are encoded from the head of a source while the rest is on
        its way, and moving gigabytes meanwhile (the download's threads, the
        store's, the kernel's writeback) took the cores the encoder needed.
        Whoever started the fetch releases it, whatever happens."""
        with self._cond:
            self._paced = False
            self._cond.notify_all()

    @property
    def done(self) -> bool:
        with self._cond:
            return self._done

    def open(self) -> int:
        """A read-only descriptor of the file, valid whatever it is renamed to."""
        with self._cond:
            return os.open(self.path, os.O_RDONLY)

    def link(self, dest: Path) -> None:
        """A hard link to the file at `dest` (the attempt's scratch input)."""
        with self._cond:
            _link(self.path, dest)

    # -- the fetch -------------------------------------------------------------------------

    def _wrote(self, start: int, end: int) -> None:
        with self._cond:
            ranges = sorted([*self._have, (start, end)])
            merged = [ranges[0]]
            for a, b in ranges[1:]:
                if a <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            self._have = merged
            self._cond.notify_all()

    def _start(self, known: dict[int, bytes]) -> None:
        entry = self.path
        held = ExitStack()  # the entry's lock, held by the fetch thread until it is done
        held.enter_context(_locked(entry))
        if entry.exists():  # fetched whole before us
            os.utime(entry)
            held.close()
            self._done = True
            return
        partial = _partial(entry)
        with held:  # until the thread holds it: a failure here lets go of the lock and the partial file
            fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, self.size)
                for offset, data in known.items():
                    os.pwrite(fd, data, offset)
            except BaseException:
                os.close(fd)
                partial.unlink(missing_ok=True)
                raise
            held = held.pop_all()
        self.path = partial
        for offset, data in known.items():
            self._wrote(offset, offset + len(data))
        threading.Thread(target=self._fetch, args=(fd, held, partial, entry), name=f"fetch-{entry.name[:8]}",
                         daemon=True).start()

    def _fetch(self, fd: int, held: ExitStack, partial: Path, entry: Path) -> None:
        lower_priority(self._niceness)  # inherited by the range threads it starts
        try:
            _evict(keep=entry)
            self._download(fd)
            os.fchmod(fd, 0o444)
            with self._cond:
                os.replace(partial, entry)
                self.path, self._done = entry, True
                self._cond.notify_all()
        except BaseException as exc:
            log.warning("input cache: streamed fetch of %s failed: %s", entry.name, exc)
            with self._cond:
                self._error = exc
                self._cond.notify_all()
            partial.unlink(missing_ok=True)
        finally:
            os.close(fd)
            held.close()
        if self._error is None:
            _evict(keep=entry)

    def _download(self, fd: int) -> None:
        """Every range not yet here, in order, RANGES_IN_FLIGHT at a time,
        paced (see `release`); the first failure stops it."""
        def write(offset: int, data: bytes) -> None:
            view = memoryview(data)
            while view:
                written = os.pwrite(fd, view, offset)
                self._wrote(offset, offset + written)
                view, offset = view[written:], offset + written

        def fetch(start: int, end: int) -> None:
            if not self._covered(start, end):
                fetch_range(self.key, start, end, write)

        with ThreadPoolExecutor(RANGES_IN_FLIGHT, thread_name_prefix="fetch-range") as pool:
            running: set = set()
            for start in range(0, self.size, RANGE_BYTES):
                with self._cond:
                    while self._paced and start >= self._furthest + PACED_AHEAD:
                        self._cond.wait(0.25)
                while len(running) >= RANGES_IN_FLIGHT:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        future.result()  # the first failure ends the fetch
                running.add(pool.submit(fetch, start, min(start + RANGE_BYTES, self.size)))
            for future in running:
                future.result()


class Stopped(Exception):
    """A reader of a Growing input stopped waiting (its consumer ended)."""


def stream_input(key: str, size: int, known: dict[int, bytes], *, niceness: int = 0) -> Growing | None:
    """Start fetching `key` (`size` bytes) into this host's cache, readable
    as it arrives; `known`: bytes already read (offset: data), written
    first, so that a container's header is there at once; `niceness`: how
    much nicer than its caller the fetch runs (it must not take the cores
    from what reads it). None when there is no cache (media on local disk
    is whole already)."""
    if not _enabled():
        return None
    growing = Growing(key, size, niceness=niceness)
    growing._start(known)
    return growing


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


def _note_stale(path: Path, now: float) -> bool:
    """Whether `path` is a note older than NOTE_TTL_S."""
    if not _NOTE.match(path.name):
        return False
    try:
        return now - path.stat().st_mtime > NOTE_TTL_S
    except FileNotFoundError:
        return False


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
    partial files and lock files; and notes older than NOTE_TTL_S. Returns
    how many files went."""
    root = _root()
    if not root.is_dir():
        return 0
    now, removed = time.time(), 0
    for path in list(root.iterdir()):
        if _partial_orphaned(path, now) or _note_stale(path, now):
            path.unlink(missing_ok=True)
            removed += 1
        elif _lock_orphaned(path):
            removed += 1
    if removed:
        log.info("input cache: removed %d file(s): fetches whose process is gone, old notes", removed)
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
            for note in path.parent.glob(f"{path.name}.note-*"):
                note.unlink(missing_ok=True)
        total -= size_
        log.info("input cache: evicted %s (%d bytes)", path.name, size_)
