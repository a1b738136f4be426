"""Objects in the store: put, fetch, list, delete, presign.

Two backends behind one interface, chosen by STORAGES["default"]:

- FileSystemStorage: keys are files under MEDIA_ROOT. A scratch file is
  moved into place (a rename on one filesystem), not copied.
- S3Storage: keys are objects. Transfers use boto3's managed transfers
  (multipart above 8 MiB, ranged parallel downloads), so no file is ever
  held in memory; the low-level client comes from the storage's own
  connection and is made per process (`reset_clients` after a fork).

Presigned URLs come from a second storage (STORAGES["public"]) whose
endpoint is the name browsers reach: SigV4 signs the Host header, so the
URL must be signed for that name, never rewritten afterwards.
"""
from __future__ import annotations

import functools
import logging
import mimetypes
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages

log = logging.getLogger(__name__)

# Content types by suffix, for what Fairlane itself writes (mimetypes does
# not know the HLS ones everywhere).
CONTENT_TYPES = {
    ".m3u8": "application/vnd.apple.mpegurl",
    ".ts": "video/mp2t",
    ".m4s": "video/iso.segment",
    ".mp4": "video/mp4",
    ".m4a": "audio/mp4",
    ".aac": "audio/aac",
    ".webp": "image/webp",
    ".jpg": "image/jpeg",
    ".png": "image/png",
    ".zip": "application/zip",
}
# Parallel uploads of one attempt's outputs (an HLS ladder is dozens of
# segments): enough to hide per-request latency, few enough not to crowd
# the worker's CPU that the next ffmpeg needs.
UPLOAD_THREADS = 4


class StorageUnavailable(OSError):
    """The store did not answer, or asked us to slow down, even after
    botocore's own retries (settings: `client_config`). An OSError, so a job
    attempt that meets it is retried later as a transient error
    (uploads/attempts.py), and the API answers 503, never a 500."""


def _unavailable(exc: Exception) -> bool:
    """Whether a botocore error means "the store is down or busy" rather
    than "this request is wrong"."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, (ConnectionError, HTTPClientError)):  # refused, reset, timed out
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or exc.response.get("Error", {}).get("Code") in {"SlowDown", "Throttling",
                                                                                "RequestTimeout"}
    return False


def store_call(fn):
    """Decorate a function of the seam that talks to the store: an outage
    surfaces as StorageUnavailable, whatever the backend raised."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except StorageUnavailable:
            raise
        except Exception as exc:
            if _unavailable(exc):
                raise StorageUnavailable(f"object storage unavailable ({type(exc).__name__})") from exc
            raise
    return wrapper


def storage() -> Storage:
    return storages["default"]


def uses_object_storage() -> bool:
    return settings.FAIRLANE_STORAGE == "s3"


# The boto3 clients of this process, by storage alias: shared by all its
# threads (a low-level client is thread-safe). django-storages makes one per
# thread, and making one costs about a tenth of a second of CPU: a request
# that calls the store from a thread pool (a 2,000-file claim, an attempt's
# parallel output uploads) paid it for every new thread.
_shared_clients: dict[tuple[int, str], tuple[object, object]] = {}


def _client(alias: str = "default"):
    """The S3 client of this process for storage `alias` (STORAGES), made
    again when the storage is (a test that changes STORAGES)."""
    backend, key = storages[alias], (os.getpid(), alias)
    cached = _shared_clients.get(key)
    if cached is None or cached[0] is not backend:
        cached = _shared_clients[key] = (backend, backend.connection.meta.client)
    return cached[1]


def warm_clients() -> None:
    """Build this process's S3 clients now (a web worker as it boots,
    project/wsgi.py), not in its first request that touches the store:
    about a quarter of a second of CPU per process for the two, which a
    worker's first upload request paid on top of its own work."""
    if not uses_object_storage():
        return
    try:
        for alias in ("default", "public"):
            _client(alias)
    except Exception:  # the first request builds them again, and says what is wrong
        log.warning("could not build the S3 clients at start", exc_info=True)


def _bucket() -> str:
    return storage().bucket_name


def reset_clients() -> None:
    """Forget every boto3 client this process holds (called in each prefork
    child after the fork): the next use builds new ones, so no child shares
    its parent's sockets or locks."""
    from storages.backends.s3 import S3Storage

    _shared_clients.clear()
    for backend in list(getattr(storages, "_storages", {}).values()):
        if isinstance(backend, S3Storage):
            backend.__setstate__(backend.__getstate__())


def content_type_for(name: str) -> str:
    suffix = Path(name).suffix.lower()
    return CONTENT_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def _cache_control(name: str) -> str:
    # Keys are never reused, so an object never changes: cache it. Playlists
    # are served rewritten by the web (uploads/delivery.py), never directly.
    return "no-store" if name.endswith(".m3u8") else "private, max-age=86400, immutable"


def _local_path(key: str) -> Path:
    """FileSystemStorage only: the file behind a key."""
    return Path(storage().path(key))


class _ScratchFile(File):
    """A finished scratch file: FileSystemStorage moves it into place (it
    looks for temporary_file_path) instead of copying it."""

    def temporary_file_path(self) -> str:
        return self.name


@store_call
def put_file(local: Path, key: str, *, consume: bool = False, client=None) -> int:
    """Store a local file under `key`; returns its size. With `consume`
    the local file is not needed any more (FileSystemStorage may move it).
    `client`: the caller's S3 client, for calls from other threads (the
    storage's own connection is per thread, and building one per thread
    costs a session each)."""
    size = local.stat().st_size
    if uses_object_storage():
        (client or _client()).upload_file(str(local), _bucket(), key, ExtraArgs={
            "ContentType": content_type_for(key), "CacheControl": _cache_control(key)})
        return size
    with open(local, "rb") as fh:
        saved = storage().save(key, _ScratchFile(fh, name=str(local)) if consume else File(fh))
    if saved != key:  # keys are never reused: a clash is a bug, not a rename
        storage().delete(saved)
        raise FileExistsError(f"object {key} exists already")
    return size


@store_call
def put_tree(local_dir: Path, prefix: str, *, skip: dict[str, int] | None = None) -> dict[str, int]:
    """Upload every file under `local_dir` to `prefix` + its relative path
    (consuming them); returns {relative path: size}. Playlists go last, so that whoever lists
    the prefix never finds a playlist naming a segment that is not there
    yet (publishing is still the database transition's job). `skip`:
    {relative path: size} of files stored already (the segments an
    attempt streamed while it encoded, transcoding/live.py), counted but
    not uploaded again."""
    skip = skip or {}
    files = sorted(p for p in local_dir.rglob("*") if p.is_file())
    rel = {p: p.relative_to(local_dir).as_posix() for p in files}
    files = [p for p in files if rel[p] not in skip]
    first = [p for p in files if p.suffix != ".m3u8"]
    last = [p for p in files if p.suffix == ".m3u8"]
    sizes: dict[str, int] = dict(skip)
    client = _client() if uses_object_storage() else None  # thread-safe: one for every upload thread
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        for batch in (first, last):
            uploads = pool.map(lambda p: put_file(p, prefix + rel[p], consume=True, client=client), batch)
            for path, size in zip(batch, uploads):
                sizes[rel[path]] = size
    return sizes


@store_call
def put_many(pairs: list[tuple[Path, str]]) -> list[int]:
    """Store each (local file, key) in parallel, as put_tree does, without
    consuming the files (their encoder may still read them); returns the
    sizes."""
    client = _client() if uses_object_storage() else None
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        return list(pool.map(lambda pair: put_file(*pair, client=client), pairs))


@store_call
def save_upload(key: str, content: File) -> str:
    """Store an uploaded file (a request's temporary file) under `key`.
    S3Storage streams it with a managed transfer (multipart above 8 MiB)."""
    saved = storage().save(key, content)
    if saved != key:
        storage().delete(saved)
        raise FileExistsError(f"object {key} exists already")
    return saved


# An object up to this size whose size is known is fetched in one GET.
# boto3's download_file asks its size first (a HEAD), and splits only
# objects over its multipart threshold (8 MiB) into parallel ranges.
ONE_GET_BYTES = 8 * 1024**2


@store_call
def fetch(key: str, dest: Path, *, read_only: bool = False, client=None, size: int | None = None) -> None:
    """Copy an object to a local file (a worker's scratch folder). A
    `read_only` copy (an input nobody writes to) may be a hard link to the
    stored file with FileSystemStorage: free on one filesystem. `client`:
    as put_file's. `size`, when the caller knows it (an upload's, as
    accepted): an object up to ONE_GET_BYTES comes in one ranged GET of
    those bytes, one round trip instead of a HEAD and a GET (most of a
    small image's job is such round trips, and a small job's length is
    what the next user's job waits for in its slot)."""
    if uses_object_storage():
        if client is None and size is not None and 0 < size <= ONE_GET_BYTES:
            with open(dest, "wb") as out:
                fetch_range(key, 0, size, lambda _at, data: out.write(data))  # in order, as read_range
            return
        (client or _client()).download_file(_bucket(), key, str(dest))
        return
    source = _local_path(key)
    if read_only:
        try:
            os.link(source, dest)
            return
        except OSError:
            pass
    shutil.copyfile(source, dest)


@store_call
def fetch_into(key: str, fh: BinaryIO) -> None:
    """Copy an object into a file the caller opened (seekable, for writing):
    boto3 then writes the ranges in place and makes no temporary file of its
    own, so the caller alone names whatever is on disk (media/input_cache.py
    counts and sweeps it)."""
    if uses_object_storage():
        _client().download_fileobj(_bucket(), key, fh)
        return
    with open(_local_path(key), "rb") as src:
        shutil.copyfileobj(src, fh)


# Tries of one range of a streamed fetch whose answer broke off mid-body
# (botocore retries a request that failed before its body, not this).
RANGE_TRIES = 3


@store_call
def fetch_range(key: str, start: int, end: int, write: Callable[[int, bytes], None]) -> None:
    """Bytes [start, end) of an object, handed to `write(offset, data)` a
    piece at a time as they arrive (media/input_cache.Growing: a file that
    readers use while the rest is on its way). An answer that breaks off is
    asked again from where it stopped."""
    from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS

    at = start
    for _ in range(RANGE_TRIES):
        body = _client().get_object(Bucket=_bucket(), Key=key, Range=f"bytes={at}-{end - 1}")["Body"]
        try:
            for piece in body.iter_chunks(256 * 1024):
                write(at, piece)
                at += len(piece)
        except S3_RETRYABLE_DOWNLOAD_ERRORS:
            pass
        finally:
            body.close()
        if at >= end:
            return
    raise StorageUnavailable(f"object storage broke off a download {RANGE_TRIES} times")


def read_range(key: str, start: int, length: int) -> bytes:
    """`length` bytes of an object on object storage from `start`, all within
    it: a container's header, read before deciding how to fetch the rest
    (fetch_range's request, gathered)."""
    out = bytearray()
    if length > 0:
        fetch_range(key, start, start + length, lambda _at, data: out.extend(data))
    return bytes(out)


@store_call
def size(key: str) -> int:
    """An object's size in bytes (S3: a HEAD request)."""
    return storage().size(key)


@store_call
def fetch_many(pairs: list[tuple[str, Path]]) -> None:
    """Fetch many objects (a finalizer's hundreds of segments) in parallel,
    as put_tree uploads: one request at a time would spend most of the
    time waiting on the store's latency."""
    for dest in {dest.parent for _, dest in pairs}:
        dest.mkdir(parents=True, exist_ok=True)
    client = _client() if uses_object_storage() else None
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        list(pool.map(lambda pair: fetch(*pair, client=client), pairs))


@contextmanager
def open_stream(key: str) -> Iterator[BinaryIO]:
    """A forward-only reader of an object, nothing buffered beyond a chunk."""
    if uses_object_storage():
        body = store_call(_client().get_object)(Bucket=_bucket(), Key=key)["Body"]
        try:
            yield body
        finally:
            body.close()
        return
    with open(_local_path(key), "rb") as fh:
        yield fh


@store_call
def open_file(key: str) -> File:
    """An object as an open Django File (FileSystemStorage: the file
    itself, for the web to stream; S3: spooled to disk past 8 MiB)."""
    return storage().open(key, "rb")


@store_call
def read_bytes(key: str) -> bytes:
    """A small object's content (a playlist)."""
    with open_stream(key) as fh:
        return fh.read()


@store_call
def exists(key: str) -> bool:
    return storage().exists(key)


@store_call
def list_prefix(prefix: str) -> dict[str, int]:
    """{key: size} of every object under `prefix` (which ends with "/")."""
    if uses_object_storage():
        found = {}
        for page in _client().get_paginator("list_objects_v2").paginate(Bucket=_bucket(), Prefix=prefix):
            found.update({o["Key"]: o["Size"] for o in page.get("Contents", ())})
        return found
    root = _local_path(prefix)
    if not root.is_dir():
        return {}
    return {f"{prefix}{p.relative_to(root).as_posix()}": p.stat().st_size for p in root.rglob("*") if p.is_file()}


@store_call
def delete(key: str) -> None:
    storage().delete(key)


@store_call
def delete_prefix(prefix: str, *, keep: str | None = None) -> int:
    """Delete every object under `prefix`, except those under `keep`;
    returns how many."""
    if not prefix.endswith("/"):
        raise ValueError(f"a prefix ends with '/': {prefix!r}")
    keys = [k for k in list_prefix(prefix) if keep is None or not k.startswith(keep)]
    if uses_object_storage():
        for i in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            _client().delete_objects(Bucket=_bucket(), Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
        return len(keys)
    for key in keys:
        storage().delete(key)
    root = _local_path(prefix)
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()
    return len(keys)


def presigned_url(key: str, *, expires_s: int, content_type: str | None = None,
                  download_name: str | None = None) -> str | None:
    """A URL that lets whoever holds it GET the object directly from the
    store until it expires; None with FileSystemStorage (the web serves the
    file itself)."""
    if not uses_object_storage():
        return None
    params = {}
    if content_type:
        params["ResponseContentType"] = content_type
    if download_name:
        params["ResponseContentDisposition"] = f'attachment; filename="{download_name}"'
    # At most 7 days: SigV4's limit.
    return storages["public"].url(key, parameters=params, expire=max(1, min(expires_s, 7 * 24 * 3600)))
