"""Multipart uploads: one object assembled from parts that may come from
different processes on different hosts (a resumed export), invisible until
completed.

S3: the store's own multipart upload (parts of at least 5 MiB except the
last, at most 10,000). FileSystemStorage: the same contract emulated with
one file per part under MEDIA_ROOT/.multipart/<upload id>/, concatenated
into place with one rename on completion.

Uploading a part number again replaces that part (both backends), which is
what lets a resumed attempt redo the part its predecessor died in.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from media.store import (
    _bucket,
    _cache_control,
    _client,
    _local_path,
    content_type_for,
    store_call,
    uses_object_storage,
)

_STAGING = ".multipart"


class UploadGone(Exception):
    """The multipart upload no longer exists (completed or aborted)."""


@dataclass(frozen=True)
class Part:
    number: int
    etag: str
    size: int

    def as_json(self) -> dict:
        return asdict(self)


def staging_root() -> Path:
    """FileSystemStorage: the folder of every upload's staging folder."""
    return _local_path(_STAGING)


def _staging(upload_id: str) -> Path:
    if not upload_id.isalnum():
        raise UploadGone(upload_id)
    return staging_root() / upload_id


def _s3_gone(exc: Exception) -> bool:
    from botocore.exceptions import ClientError

    return isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in {"NoSuchUpload", "404"}


@store_call
def multipart_begin(key: str, *, tag: str = "") -> str:
    """Start assembling `key`; returns the upload id. `tag` (letters)
    starts the id on disk, where a staging folder does not know its key:
    it tells whose uploads a sweep of stale folders may remove."""
    if uses_object_storage():
        return _client().create_multipart_upload(
            Bucket=_bucket(), Key=key, ContentType=content_type_for(key), CacheControl=_cache_control(key),
        )["UploadId"]
    upload_id = tag + uuid.uuid4().hex
    _staging(upload_id).mkdir(parents=True)
    return upload_id


@store_call
def multipart_put(key: str, upload_id: str, number: int, local: Path) -> Part:
    """Upload part `number` from a local file; raises UploadGone when the
    upload was completed or aborted meanwhile."""
    size = local.stat().st_size
    if uses_object_storage():
        try:
            with open(local, "rb") as fh:
                etag = _client().upload_part(Bucket=_bucket(), Key=key, UploadId=upload_id, PartNumber=number,
                                             Body=fh, ContentLength=size)["ETag"]
        except Exception as exc:
            if _s3_gone(exc):
                raise UploadGone(upload_id) from exc
            raise
        return Part(number, etag, size)
    staging = _staging(upload_id)
    if not staging.is_dir():
        raise UploadGone(upload_id)
    digest = hashlib.md5(usedforsecurity=False)
    with open(local, "rb") as src, tempfile.NamedTemporaryFile(dir=staging, delete=False) as dst:
        while block := src.read(1 << 20):
            digest.update(block)
            dst.write(block)
    os.replace(dst.name, staging / f"{number:05d}")
    return Part(number, f'"{digest.hexdigest()}"', size)


@store_call
def multipart_complete(key: str, upload_id: str, parts: list[Part]) -> None:
    """Make `key` the concatenation of `parts` (in order), atomically."""
    if uses_object_storage():
        try:
            _client().complete_multipart_upload(
                Bucket=_bucket(), Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]})
        except Exception as exc:
            if _s3_gone(exc):
                raise UploadGone(upload_id) from exc
            raise
        return
    staging = _staging(upload_id)
    if not staging.is_dir():
        raise UploadGone(upload_id)
    final = _local_path(key)
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=final.parent, delete=False) as dst:
        for part in parts:
            source = staging / f"{part.number:05d}"
            if source.stat().st_size != part.size:
                raise UploadGone(f"{upload_id}: part {part.number} is not the one recorded")
            with open(source, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(dst.name, final)
    shutil.rmtree(staging, ignore_errors=True)


@store_call
def multipart_abort(key: str, upload_id: str) -> None:
    """Drop an upload and its parts (nothing happens when it is gone)."""
    if uses_object_storage():
        try:
            _client().abort_multipart_upload(Bucket=_bucket(), Key=key, UploadId=upload_id)
        except Exception as exc:
            if not _s3_gone(exc):
                raise
        return
    if upload_id.isalnum():
        shutil.rmtree(_staging(upload_id), ignore_errors=True)
