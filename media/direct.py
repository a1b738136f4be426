"""Direct uploads: a client sends each part of a file to a URL signed for
exactly that part, so the bytes never pass through a web host that keeps
them.

An upload is a multipart upload (media/multipart.py): once it is completed,
or aborted, its upload id is gone and a part URL signed earlier writes
nothing any more, so a finished upload takes no more bytes. With object
storage a file of one part is one PutObject instead (no call to the store to
begin or to complete it: most uploads are small), signed with
`If-None-Match: *`, so the object is written once and never overwritten.

- S3: the store's own presigned UploadPart URLs, made on the public
  endpoint (the name browsers reach) and signed with the part's
  Content-Length, which the store checks with the signature: a body of any
  other size is refused (SignatureDoesNotMatch), so nothing past what a URL
  allows is ever stored. The bucket's CORS rules let the pages' origins PUT
  (`configure_cors`).
- FileSystemStorage (the zero-setup default, one host): the same contract
  on a URL of ours (`/store/incoming/<token>`, media/incoming.py), a signed
  token naming the key, the upload, the part, its size and its expiry; the
  web tier streams the body into the part's file of the upload's staging
  folder, outside any database transaction, and refuses a body of another
  size.

The store, not the caller, says which parts arrived (`stored_parts`:
ListParts, or the staging folder), and completion assembles them in the
store (CompleteMultipartUpload, or one concatenation on disk).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from django.core import signing
from django.urls import reverse

from media.multipart import (Part, UploadGone, _s3_gone, _staging, multipart_abort, multipart_begin,
                             multipart_complete, staging_root)
from media.presign import Presigner
from media.store import _bucket, _client, delete, list_prefix, store_call, uses_object_storage

# The incoming token's signing salt: a token made for anything else never validates here.
_SALT = "fairlane.media.incoming"
# SigV4 presigned URLs live at most 7 days.
MAX_URL_S = 7 * 24 * 3600


@dataclass(frozen=True)
class Incoming:
    """What an incoming URL allows: `size` bytes as part `number` of the
    multipart upload `upload_id` of `key`, until `expires` (epoch seconds)."""

    key: str
    upload_id: str
    number: int
    size: int
    expires: int


def begin(key: str, *, single: bool, tag: str) -> str:
    """Start an upload of `key`: its multipart upload id, or "" for a file
    of one part sent with one PUT (object storage only). `tag`: see
    multipart_begin."""
    if single and uses_object_storage():
        return ""
    return multipart_begin(key, tag=tag)


# The header a single PUT carries (and is signed with): the object is created once, never overwritten.
ONCE = {"If-None-Match": "*"}


# The presigner of the client part URLs were last signed with (media/presign.py):
# made again when the client is (a test that changes STORAGES, a fork).
_fast: tuple[object, Presigner | None] = (None, None)


def _presigner(client) -> Presigner | None:
    global _fast
    if _fast[0] is not client:
        _fast = (client, Presigner.for_client(client))
    return _fast[1]


def part_url(key: str, upload_id: str, number: int, size: int, *, expires_at: datetime) -> tuple[str, dict]:
    """A URL that takes exactly `size` bytes (PUT) as part `number`, until
    `expires_at`, and the headers the PUT must carry. Relative (the web's
    own path) with FileSystemStorage."""
    expires_s = max(1, min(MAX_URL_S, int(expires_at.timestamp() - time.time())))
    if uses_object_storage():
        client = _client("public")
        fast = _presigner(client)
        if fast is not None:
            query = (("uploadId", upload_id), ("partNumber", str(number))) if upload_id else ()
            return fast.put_url(_bucket(), key, expires_s=expires_s, content_length=size, query=query,
                                if_none_match=None if upload_id else "*"), {} if upload_id else ONCE
        if not upload_id:
            return client.generate_presigned_url(
                "put_object", ExpiresIn=expires_s,
                Params={"Bucket": _bucket(), "Key": key, "ContentLength": size, "IfNoneMatch": "*"}), ONCE
        return client.generate_presigned_url(
            "upload_part", ExpiresIn=expires_s,
            Params={"Bucket": _bucket(), "Key": key, "UploadId": upload_id, "PartNumber": number,
                    "ContentLength": size}), {}
    token = signing.dumps([key, upload_id, number, size, int(time.time()) + expires_s], salt=_SALT, compress=True)
    return reverse("media-incoming", args=[token]), {}


def incoming(token: str) -> Incoming | None:
    """The part a FileSystemStorage URL allows, or None when the token is
    not ours, was altered or has expired."""
    try:
        key, upload_id, number, size, expires = signing.loads(token, salt=_SALT)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if expires < time.time():
        return None
    return Incoming(str(key), str(upload_id), int(number), int(size), int(expires))


def receive(allowed: Incoming, stream, length: int) -> Part:
    """FileSystemStorage: write the body of an incoming PUT (`length` bytes
    from `stream`, which must be exactly the size the URL allows) as its
    part. Raises UploadGone when the upload was completed or aborted,
    ValueError when the body is not the size allowed or ends early."""
    import hashlib
    import os
    import tempfile

    if length != allowed.size:
        raise ValueError(f"this URL takes exactly {allowed.size} bytes, not {length}")
    staging = _staging(allowed.upload_id)
    if not staging.is_dir():
        raise UploadGone(allowed.upload_id)
    digest = hashlib.md5(usedforsecurity=False)
    left = length
    with tempfile.NamedTemporaryFile(dir=staging, prefix=".incoming-", delete=False) as dst:
        try:
            while left > 0:
                block = stream.read(min(left, 1 << 20))
                if not block:
                    raise ValueError(f"the body ended {left} bytes short of {length}")
                digest.update(block)
                dst.write(block)
                left -= len(block)
        except BaseException:
            dst.close()
            os.unlink(dst.name)
            raise
    try:
        os.replace(dst.name, staging / f"{allowed.number:05d}")
    except FileNotFoundError:  # completed or aborted while the body streamed in
        raise UploadGone(allowed.upload_id) from None
    return Part(allowed.number, f'"{digest.hexdigest()}"', length)


@store_call
def stored_parts(key: str, upload_id: str) -> list[Part]:
    """The parts the store has for the upload, by number. Raises
    UploadGone when the upload no longer exists (completed or aborted)."""
    if not upload_id:  # a single PUT: the object itself, once it is there
        size = list_prefix(key).get(key)
        return [] if size is None else [Part(1, "", size)]
    if uses_object_storage():
        parts, marker = [], 0
        while True:
            try:
                page = _client().list_parts(Bucket=_bucket(), Key=key, UploadId=upload_id, PartNumberMarker=marker)
            except Exception as exc:
                if _s3_gone(exc):
                    raise UploadGone(upload_id) from exc
                raise
            parts += [Part(p["PartNumber"], p["ETag"], p["Size"]) for p in page.get("Parts", [])]
            if not page.get("IsTruncated"):
                return sorted(parts, key=lambda p: p.number)
            marker = page["NextPartNumberMarker"]
    staging = _staging(upload_id)
    if not staging.is_dir():
        raise UploadGone(upload_id)
    found = []
    for path in staging.iterdir():
        if path.name.isdigit():
            found.append(Part(int(path.name), "", path.stat().st_size))
    return sorted(found, key=lambda p: p.number)


def stored_sizes(prefix: str) -> dict[str, int]:
    """Every object under `prefix` and its size, in one call per 1,000:
    uploads created together share a prefix (media.upload_key's group), so
    their single PUTs are checked all at once."""
    return list_prefix(prefix)


def complete(key: str, upload_id: str, parts: list[Part]) -> None:
    """Assemble a multipart upload in the store; a single PUT is in place already."""
    if upload_id:
        multipart_complete(key, upload_id, parts)


def abort(key: str, upload_id: str) -> None:
    """Drop an upload's bytes: its parts, or the object of a single PUT."""
    if upload_id:
        multipart_abort(key, upload_id)
    else:
        delete(key)


@store_call
def stale_uploads(prefix: str, *, tag: str, started_before: datetime) -> list[tuple[str, str]]:
    """(key, upload id) of the multipart uploads under `prefix` started
    before `started_before` and never completed or aborted: orphans when no
    row knows them (S3's ListMultipartUploads; on disk, the staging folders
    whose id starts with `tag`, as multipart_begin(tag=) made them, which do
    not know their key: "")."""
    if uses_object_storage():
        found, key_marker, id_marker = [], "", ""
        while True:
            page = _client().list_multipart_uploads(Bucket=_bucket(), Prefix=prefix, KeyMarker=key_marker,
                                                    UploadIdMarker=id_marker)
            found += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])
                      if u["Initiated"].timestamp() < started_before.timestamp()]
            if not page.get("IsTruncated"):
                return found
            key_marker, id_marker = page.get("NextKeyMarker", ""), page.get("NextUploadIdMarker", "")
    root = staging_root()
    if not root.is_dir():
        return []
    return [("", folder.name) for folder in root.iterdir()
            if folder.is_dir() and folder.name.isalnum() and folder.name.startswith(tag)
            and folder.stat().st_mtime < started_before.timestamp()]


@store_call
def configure_cors(origins: list[str]) -> bool:
    """Let pages served from `origins` PUT parts into the bucket (S3), and
    GET and HEAD what they play (the player fetches HLS segments across
    origins): the rule browsers ask for before a cross-origin request. It
    replaces the bucket's rules (a store with none, like SeaweedFS, allows
    every origin until one is written). Nothing to do on disk (same
    origin). Returns whether a rule was written."""
    if not uses_object_storage() or not origins:
        return False
    _client().put_bucket_cors(Bucket=_bucket(), CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": sorted(origins), "AllowedMethods": ["GET", "HEAD", "PUT"], "AllowedHeaders": ["*"],
        "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 3600,
    }]})
    return True


def cors_origins() -> list[str]:
    """The bucket's CORS origins as the store has them (S3), for the checks."""
    if not uses_object_storage():
        return []
    try:
        rules = _client().get_bucket_cors(Bucket=_bucket())["CORSRules"]
    except Exception as exc:
        if "NoSuchCORSConfiguration" in str(exc):
            return []
        raise
    return sorted({origin for rule in rules for origin in rule.get("AllowedOrigins", [])})


__all__ = ["ONCE", "Incoming", "UploadGone", "abort", "begin", "complete", "configure_cors", "cors_origins",
           "incoming", "part_url", "receive", "stale_uploads", "stored_parts", "stored_sizes"]
