"""Uploads straight into storage: the web tier authorises, records and
claims; it never holds the bytes.

    create    POST /api/uploads/direct/             a file's name and size (or none: a deferred length)
                                                    -> an upload, with URLs for its first parts
    parts     POST /api/uploads/direct/<id>/parts/  more part URLs (and, deferred, each part's size)
    status    GET  /api/uploads/direct/<id>/        which parts the store has (resume after a reload)
    complete  POST /api/uploads/direct/complete/    assemble them in the store
    claim     POST /api/uploads/ {"direct": [...]}  completed uploads become one batch of jobs
    abort     DELETE /api/uploads/direct/<id>/

A client PUTs each part to its URL: the store's own presigned URL with
object storage, or the web's `/store/incoming/` with files on disk
(media/direct.py). A URL takes exactly the bytes it was signed for, so what
an upload stores is bounded by what it declared: its size, or for a
deferred length the sizes its part URLs were signed for, at most
FAIRLANE_MAX_UPLOAD_BYTES. A user's uploads in progress are bounded in
number and bytes (declared or signed: what can have been written) by their
plan (max_pending_uploads, max_pending_bytes: uploads/limits.py; by default
FAIRLANE_MAX_PENDING_UPLOADS and FAIRLANE_MAX_USER_PENDING_BYTES), checked
under a lock on the user's row so that two web hosts cannot both squeeze
under them.

No database transaction waits on a client or on the store: creating and
signing take a short transaction with no I/O, the store's calls (begin,
list, complete, abort) happen outside any, and claiming moves no bytes
(the upload's key becomes its Upload's file). Every row is shared state,
so any web host takes any request of any upload. Past `expires_at` every
request about an upload answers 410; the sweep (`direct_uploads_sweep`,
beat) gives up expired uploads and aborts multipart uploads no row knows,
from any host.
"""
from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, Sum, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

import media
from media import direct as store
from project.bulk_insert import insert_many
from uploads import limits, services
from uploads.errors import ApplicationError
from uploads.models import DirectUpload, Upload

log = logging.getLogger(__name__)

# multipart_begin's tag on disk: the staging folders that are direct uploads'.
STAGING_TAG = "up"
# Calls to the store made for many uploads at once (a 2,000-file drop):
# enough to hide each call's latency, few enough to leave the web host's
# threads to other requests.
STORE_THREADS = 8
# URLs handed out with an upload when it is created (more on request): all
# of a small file's, and enough of a large one's to start at full speed.
FIRST_URLS = 8
# S3's bounds: a part is at least 5 MiB but the last, and at most 10,000 parts.
MIN_PART_BYTES, MAX_PARTS = 5 * 1024 * 1024, 10_000
LIVE = (DirectUpload.State.OPEN, DirectUpload.State.COMPLETE)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class NewFile:
    filename: str
    size: int | None  # None: a deferred length
    content_type: str = ""


@dataclass(frozen=True)
class PartUrl:
    number: int
    size: int
    url: str
    headers: dict  # what the PUT must carry (a single PUT's If-None-Match)


def part_count(upload: DirectUpload) -> int | None:
    """How many parts a declared size takes (None: deferred)."""
    return None if upload.size is None else max(1, math.ceil(upload.size / upload.part_size))


def part_size_of(upload: DirectUpload, number: int) -> int:
    """The exact size of part `number` of a declared size."""
    return min(upload.part_size, upload.size - (number - 1) * upload.part_size)


def _part_bytes() -> int:
    return max(MIN_PART_BYTES, settings.FAIRLANE_UPLOAD_PART_BYTES)


def _in_parallel(fn: Callable[[T], R], items: list[T]) -> list[R]:
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(STORE_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


# --- create ------------------------------------------------------------------------------


def direct_uploads_create(*, owner: AbstractBaseUser, files: list[NewFile]) -> list[tuple[DirectUpload, list[PartUrl]]]:
    """Start one upload per file: its row (within its owner's bounds), its
    multipart upload in the store unless it is one PUT (a declared size of
    one part), and URLs for its first parts. The files of one request share
    a key prefix, so that completing them is one listing of the store."""
    _check_new(files)
    now = timezone.now()
    part = _part_bytes()
    group = uuid.uuid4().hex
    rows = [DirectUpload(owner=owner, filename=(f.filename or "upload")[:255], content_type=(f.content_type or "")[:255],
                         size=f.size, part_size=part, key=media.upload_key(owner_id=owner.pk, group=group),
                         expires_at=now + timedelta(seconds=settings.FAIRLANE_UPLOAD_EXPIRE_S)) for f in files]
    with transaction.atomic():
        limits.owner_lock([owner.pk])
        _check_room(owner, uploads=len(rows), bytes_=sum(f.size or 0 for f in files))
        insert_many(DirectUpload, rows)
    try:
        ids = _in_parallel(lambda row: store.begin(row.key, single=part_count(row) == 1, tag=STAGING_TAG), rows)
    except Exception:
        # Nothing of them may stay: the rows (and whatever multipart uploads
        # did begin: the sweep finds those by their age, as orphans).
        DirectUpload.objects.filter(pk__in=[row.pk for row in rows]).delete()
        raise
    begun = [row for row, multipart_id in zip(rows, ids) if multipart_id]
    for row, multipart_id in zip(rows, ids):
        row.multipart_id = multipart_id
    if begun:
        DirectUpload.objects.bulk_update(begun, ["multipart_id"])
    return [(row, _sign(row, [(n, None) for n in range(1, min(FIRST_URLS, part_count(row) or 0) + 1)]))
            for row in rows]


def _check_new(files: list[NewFile]) -> None:
    if not files:
        raise ApplicationError("no_files", "Name one or more files to upload.")
    most = settings.FAIRLANE_MAX_FILES_PER_REQUEST
    if len(files) > most:
        raise ApplicationError("too_many_files", f"At most {most} files per request; send the rest in another.",
                               status_code=413, extra={"limit": most})
    largest = settings.FAIRLANE_MAX_UPLOAD_BYTES
    too_big = [f.filename for f in files if f.size is not None and f.size > largest]
    if too_big:
        raise ApplicationError("file_too_large", f"Files larger than {largest} bytes are not accepted: "
                               f"{', '.join(too_big)}.", status_code=413, extra={"files": too_big, "limit": largest})
    empty = [f.filename for f in files if f.size is not None and f.size <= 0]
    if empty:
        raise ApplicationError("empty_file", f"These files are empty: {', '.join(empty)}.", extra={"files": empty})


def _pending(owner: AbstractBaseUser) -> tuple[int, int]:
    """The owner's uploads in progress (open or complete, not expired) and
    the bytes they can hold: the declared size, or what a deferred length's
    URLs were signed for."""
    totals = DirectUpload.objects.filter(owner=owner, state__in=LIVE, expires_at__gt=timezone.now()).aggregate(
        count=Count("id"), bytes=Sum(Greatest(Coalesce("size", Value(0)), "signed_bytes")))
    return totals["count"], totals["bytes"] or 0


def _check_room(owner: AbstractBaseUser, *, uploads: int, bytes_: int) -> None:
    """`uploads` more uploads holding `bytes_` more bytes fit the owner's
    plan (under the owner's lock), or nothing is created or signed."""
    count, held = _pending(owner)
    most = limits.limits_for(user_id=owner.pk)
    limits.refuse_over(code="too_many_pending_uploads", limit=most.pending_uploads, count=count, adding=uploads,
                       message="At most {limit:,} uploads in progress at once (you have {count:,}); claim or "
                               "delete finished ones first.", pending=count)
    limits.refuse_over(code="too_many_pending_bytes", limit=most.pending_bytes, count=held, adding=bytes_,
                       message="Your uploads in progress would hold more than {limit:,} bytes; claim or delete "
                               "finished ones first.", status_code=413, pending=held)


# --- parts ---------------------------------------------------------------------------------


def _owned(owner: AbstractBaseUser, upload_id, *, lock: bool = False) -> DirectUpload:
    rows = DirectUpload.objects.filter(owner=owner, id=upload_id)
    upload = (rows.select_for_update() if lock else rows).first()
    if upload is None:
        raise ApplicationError("not_found", "No such upload.", status_code=404)
    if upload.state == DirectUpload.State.EXPIRED or upload.expires_at <= timezone.now():
        raise ApplicationError("upload_expired", "This upload has expired and takes no more bytes; start it again.",
                               status_code=410)
    return upload


def direct_upload_sign(*, owner: AbstractBaseUser, upload_id, parts: list[tuple[int, int | None]]) -> list[PartUrl]:
    """URLs for parts (number, size): a declared size fixes each part's
    size (give None); a deferred one takes the client's, at most the part
    size, a shorter part being the last, and the sum of every part signed
    bounded by FAIRLANE_MAX_UPLOAD_BYTES and the owner's budget."""
    if not parts:
        raise ApplicationError("no_parts", "Name one or more part numbers.")
    if len(parts) > MAX_PARTS:
        raise ApplicationError("too_many_parts", f"At most {MAX_PARTS} parts per request.")
    upload = _owned(owner, upload_id)
    if upload.state != DirectUpload.State.OPEN:
        raise ApplicationError("upload_complete", "This upload is complete and takes no more bytes.", status_code=409)
    if upload.size is not None:
        return _sign(upload, parts)
    with transaction.atomic():  # a deferred length: what is signed counts, under the owner's bounds
        limits.owner_lock([owner.pk])
        upload = _owned(owner, upload_id, lock=True)
        signed = {int(n): size for n, size in upload.signed.items()}
        for number, size in parts:
            if size is None or not 0 < size <= upload.part_size:
                raise ApplicationError("invalid_part_size", f"Part {number}: a deferred length's part is sent with "
                                       f"its size, 1 to {upload.part_size} bytes.")
            # Once signed, a part's size is what its URLs may write: another
            # size would leave an earlier URL able to write more than counted.
            if signed.get(number, size) != size:
                raise ApplicationError("invalid_part_size", f"Part {number} was signed for {signed[number]} bytes; "
                                       "ask for it with that size again.")
            signed[number] = size
        _check_deferred(upload, signed)
        total = sum(signed.values())
        _check_room(owner, uploads=0, bytes_=max(0, total - upload.signed_bytes))
        upload.signed, upload.signed_bytes = {str(n): size for n, size in sorted(signed.items())}, total
        upload.save(update_fields=["signed", "signed_bytes"])
    return _sign(upload, parts)


def _check_deferred(upload: DirectUpload, signed: dict[int, int]) -> None:
    """Part numbers within 1..MAX_PARTS, none after one shorter than the
    part size (that one is the last), and the total within the largest
    file accepted."""
    if any(not 1 <= n <= MAX_PARTS for n in signed):
        raise ApplicationError("invalid_part_number", f"Part numbers are 1 to {MAX_PARTS}.")
    short = [n for n, size in signed.items() if size < upload.part_size]
    if short and max(signed) > min(short):
        raise ApplicationError("invalid_part_size", f"Part {min(short)} is shorter than the part size, so it is the "
                               "last: no part may come after it.")
    largest = settings.FAIRLANE_MAX_UPLOAD_BYTES
    if sum(signed.values()) > largest:
        raise ApplicationError("file_too_large", f"Files larger than {largest} bytes are not accepted.",
                               status_code=413, extra={"limit": largest})


def _sign(upload: DirectUpload, parts: list[tuple[int, int | None]]) -> list[PartUrl]:
    count = part_count(upload)
    urls = []
    for number, size in parts:
        if count is not None:
            if not 1 <= number <= count:
                raise ApplicationError("invalid_part_number", f"This upload has parts 1 to {count}.")
            fixed = part_size_of(upload, number)
            if size not in (None, fixed):
                raise ApplicationError("invalid_part_size", f"Part {number} of this upload is {fixed} bytes: its "
                                       "declared size fixes every part's.")
            size = fixed
        url, headers = store.part_url(upload.key, upload.multipart_id, number, size, expires_at=_url_expiry(upload))
        urls.append(PartUrl(number, size, url, headers))
    return urls


def _url_expiry(upload: DirectUpload) -> datetime:
    return min(upload.expires_at, timezone.now() + timedelta(seconds=settings.FAIRLANE_UPLOAD_URL_TTL_S))


# --- status, complete, abort ------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    upload: DirectUpload
    parts: list[media.Part]  # what the store has (all of it once complete)

    @property
    def received(self) -> int:
        return self.upload.size if self.upload.state == DirectUpload.State.COMPLETE else sum(
            p.size for p in self.parts)


def direct_upload_status(*, owner: AbstractBaseUser, upload_id) -> Status:
    """Where an upload stands, as the store says: a client resuming after
    a reload sends only the parts that are missing."""
    upload = _owned(owner, upload_id)
    if upload.state == DirectUpload.State.COMPLETE:
        return Status(upload, [])
    return Status(upload, store.stored_parts(upload.key, upload.multipart_id))


def direct_uploads_complete(*, owner: AbstractBaseUser, upload_ids: list) -> list[DirectUpload]:
    """Assemble each open upload from the parts the store has (complete ones
    are left as they are): every part there at its exact size, or 409
    naming what is missing. The store's calls run in threads; the rows are
    written here, in this thread (whose connection may be a test's
    transaction)."""
    return _complete(_owned_many(owner, upload_ids))


def _complete(uploads: list[DirectUpload]) -> list[DirectUpload]:
    open_ = [u for u in uploads if u.state == DirectUpload.State.OPEN]
    refused = _complete_single_puts([u for u in open_ if not u.multipart_id])
    # Every upload the store did complete is recorded, even when another
    # of them is refused: its multipart upload is gone from the store now.
    multipart = [u for u in open_ if u.multipart_id]
    for upload, total in zip(multipart, _in_parallel(_assemble, multipart)):
        if isinstance(total, ApplicationError):
            refused = refused or total
        else:
            _mark_complete(upload, total)
    if refused is not None:
        raise refused
    return uploads


def _owned_many(owner: AbstractBaseUser, upload_ids: list,
                found: dict[str, DirectUpload] | None = None) -> list[DirectUpload]:
    """`_owned` for many, in one query (none when the caller has `found`
    them already: {id: row} of the owner's)."""
    ids = list(dict.fromkeys(str(i) for i in upload_ids))
    if found is None:
        found = {str(u.id): u for u in DirectUpload.objects.filter(owner=owner, id__in=ids)}
    if len(found) < len(ids):
        raise ApplicationError("not_found", "No such upload.", status_code=404,
                               extra={"uploads": [i for i in ids if i not in found]})
    now = timezone.now()
    if any(u.state == DirectUpload.State.EXPIRED or u.expires_at <= now for u in found.values()):
        raise ApplicationError("upload_expired", "An upload named has expired and takes no more bytes; start it "
                               "again.", status_code=410)
    return [found[i] for i in ids]


def _complete_single_puts(uploads: list[DirectUpload]) -> ApplicationError | None:
    """Single PUTs are complete once their object is there (its size is the
    one its URL was signed for, or it would not be): one listing of the
    store per group of uploads created together, and one update. Returns
    the refusal for those not there yet."""
    if not uploads:
        return None
    sizes: dict[str, int] = {}
    for prefix in {u.key.rsplit("/", 1)[0] + "/" for u in uploads}:
        sizes.update(store.stored_sizes(prefix))
    there = [u for u in uploads if sizes.get(u.key) == u.size]
    now = timezone.now()
    marked = DirectUpload.objects.filter(pk__in=[u.pk for u in there], state=DirectUpload.State.OPEN).update(
        state=DirectUpload.State.COMPLETE, completed_at=now)
    # Read again only when the update did not take them all (a round trip of every claim otherwise).
    completed = {u.pk for u in there} if marked == len(there) else set(
        DirectUpload.objects.filter(pk__in=[u.pk for u in there], state=DirectUpload.State.COMPLETE)
        .values_list("pk", flat=True))
    for upload in there:
        if upload.pk in completed:
            upload.state, upload.completed_at = DirectUpload.State.COMPLETE, now
        else:  # given up while it was being checked: its object must not stay
            media.delete(upload.key)
            return ApplicationError("upload_expired", f"{upload.filename}: this upload was given up.",
                                    status_code=410)
    missing = [u for u in uploads if sizes.get(u.key) != u.size]
    if missing:
        return ApplicationError("upload_incomplete", f"{missing[0].filename}: its part is missing "
                                f"({len(missing)} upload(s) not complete).", status_code=409,
                                extra={"upload": str(missing[0].id), "missing": [1],
                                       "uploads": [str(u.id) for u in missing]})
    return None


def _assemble(upload: DirectUpload) -> int | None | ApplicationError:
    """Complete the upload's multipart upload in the store from the parts it
    has: its total; None when the store no longer knows it (completed by a
    concurrent request, or given up); the refusal when its parts are not
    all there. Store calls only (it runs in a thread)."""
    try:
        parts = store.stored_parts(upload.key, upload.multipart_id)
        total = _check_parts(upload, parts)
        store.complete(upload.key, upload.multipart_id, parts)
    except media.UploadGone:
        return None
    except ApplicationError as refusal:
        return refusal
    return total


def _mark_complete(upload: DirectUpload, total: int | None) -> None:
    now = timezone.now()
    if total is not None and DirectUpload.objects.filter(pk=upload.pk, state=DirectUpload.State.OPEN).update(
            state=DirectUpload.State.COMPLETE, size=total, completed_at=now):
        upload.state, upload.size, upload.completed_at = DirectUpload.State.COMPLETE, total, now
        return
    upload.refresh_from_db()
    if upload.state == DirectUpload.State.COMPLETE:  # a concurrent request completed it
        return
    if total is not None:  # assembled, then aborted or swept meanwhile: its bytes must not stay
        media.delete(upload.key)
    raise ApplicationError("upload_expired", f"{upload.filename}: this upload was given up.", status_code=410)


def _check_parts(upload: DirectUpload, parts: list[media.Part]) -> int:
    """The total of `parts` when they are exactly what the upload allows;
    409 naming the missing or wrong ones otherwise."""
    have = {p.number: p.size for p in parts}
    if upload.size is not None:
        expected = {n: part_size_of(upload, n) for n in range(1, part_count(upload) + 1)}
    else:
        expected = {int(n): size for n, size in upload.signed.items()}
        if not expected or sorted(expected) != list(range(1, max(expected) + 1)):
            raise ApplicationError("upload_incomplete", f"{upload.filename}: a deferred length's parts are 1 to N, "
                                   "each asked for before it is sent.", status_code=409)
    missing = sorted(n for n, size in expected.items() if have.get(n) != size)
    extra = sorted(set(have) - set(expected))
    if missing or extra:
        raise ApplicationError("upload_incomplete", f"{upload.filename}: parts {missing or extra} are missing or "
                               "not the size their URL allowed.", status_code=409,
                               extra={"upload": str(upload.id), "missing": missing})
    return sum(expected.values())


def direct_upload_abort(*, owner: AbstractBaseUser, upload_id) -> None:
    """Give an upload up: what it stored goes; the row stays as a tombstone
    (410 from now on, and the sweep deletes a single PUT's key once more
    when it forgets it). Marked expired first (one conditional update), so
    that no concurrent complete or claim takes it while its bytes go."""
    upload = _owned(owner, upload_id)
    DirectUpload.objects.filter(pk=upload.pk, state__in=LIVE).update(state=DirectUpload.State.EXPIRED)
    _drop_stored(upload)


def _drop_stored(upload: DirectUpload) -> None:
    if upload.state == DirectUpload.State.COMPLETE:
        media.delete(upload.key)
    else:
        store.abort(upload.key, upload.multipart_id)


# --- claim ------------------------------------------------------------------------------------


def uploads_create_from_direct(*, owner: AbstractBaseUser, upload_ids: list,
                               scheduled_for: datetime | None = None, batch_name: str = "") -> list[Upload]:
    """The owner's uploads `upload_ids` (completed here if they are not yet)
    become one batch: their keys are the new uploads' files, nothing is
    copied, and their rows go in the same transaction as the batch's
    creation. Another claim of any of them at the same time finds them
    gone (409) and creates nothing."""
    ids = list(dict.fromkeys(str(i) for i in upload_ids))
    if not ids:
        raise ApplicationError("no_files", "Name one or more completed uploads in 'direct'.")
    most = limits.limits_for(user_id=owner.pk).pending_uploads  # more cannot be in progress
    if len(ids) > most:
        raise ApplicationError("too_many_files", f"A batch may name at most {most:,} uploads.", status_code=413)
    found = {str(u.id): u for u in DirectUpload.objects.filter(owner=owner, id__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ApplicationError("unknown_uploads", f"These uploads are not yours or unknown: {', '.join(missing)}.",
                               extra={"direct": missing})
    # Before the store is asked to assemble multipart uploads, work a refusal
    # would waste (uploads_record counts again, under the lock, to create
    # them). Single PUTs cost one listing to complete, and a look first
    # would cost every claim a round trip: the count under the lock decides.
    if any(u.multipart_id and u.state == DirectUpload.State.OPEN for u in found.values()):
        limits.queued_jobs_check(adding={owner.pk: len(ids)}, first_look=True)
    uploads = _complete(_owned_many(owner, ids, found=found))  # the rows read above: not read again

    def claim() -> None:
        taken, _ = DirectUpload.objects.filter(owner=owner, id__in=ids, state=DirectUpload.State.COMPLETE).delete()
        if taken != len(ids):
            raise ApplicationError("already_claimed", "Some of these uploads were claimed (or given up) meanwhile; "
                                   "nothing was created.", status_code=409)

    files = [services.StoredFile(u.key, u.filename, u.size, u.content_type) for u in uploads]
    return services.uploads_record(owner=owner, files=files, scheduled_for=scheduled_for, claim=claim,
                                   batch_name=batch_name)


# --- the sweep ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Swept:
    expired: int  # uploads given up (their bytes dropped)
    forgotten: int  # tombstones deleted
    orphans: int  # multipart uploads no row knew, aborted


def direct_uploads_sweep(*, batch: int = 500) -> Swept:
    """Give up expired uploads (their bytes first: marked expired, then
    dropped outside any transaction), delete tombstones past
    FAIRLANE_UPLOAD_TOMBSTONE_S, and abort multipart uploads under uploads/
    that no row knows and that are older than an upload may live. Any host
    may run it (beat runs it); in bounded batches."""
    now = timezone.now()
    expired = 0
    while True:
        due = list(DirectUpload.objects.filter(state__in=LIVE, expires_at__lte=now).order_by("expires_at")[:batch])
        if not due:
            break
        DirectUpload.objects.filter(pk__in=[u.pk for u in due], state__in=LIVE).update(
            state=DirectUpload.State.EXPIRED)
        for upload in due:
            try:
                _drop_stored(upload)
            except Exception:  # the orphan pass finds it again later
                log.exception("could not drop the bytes of expired upload %s", upload.pk)
        expired += len(due)
    forgotten = 0
    tombstone = now - timedelta(seconds=settings.FAIRLANE_UPLOAD_TOMBSTONE_S)
    while rows := list(DirectUpload.objects.filter(state=DirectUpload.State.EXPIRED, expires_at__lt=tombstone)
                       .values_list("pk", "key", "multipart_id")[:batch]):
        # A single PUT's URL, signed before the upload was given up, could
        # have written its object again since: it goes for good with the row.
        for _, key, multipart_id in rows:
            if not multipart_id:
                media.delete(key)
        forgotten += DirectUpload.objects.filter(pk__in=[pk for pk, _, _ in rows]).delete()[0]
    started_before = now - timedelta(seconds=settings.FAIRLANE_UPLOAD_EXPIRE_S + 3600)
    orphans = 0
    stale = store.stale_uploads("uploads/", tag=STAGING_TAG, started_before=started_before)
    for start in range(0, len(stale), batch):
        chunk = stale[start:start + batch]
        known = set(DirectUpload.objects.filter(multipart_id__in=[i for _, i in chunk], state__in=LIVE)
                    .values_list("multipart_id", flat=True))
        for key, multipart_id in chunk:
            if multipart_id not in known:
                media.multipart_abort(key, multipart_id)
                orphans += 1
    if expired or orphans:
        log.info("direct uploads: %d expired, %d orphaned multipart uploads aborted", expired, orphans)
    return Swept(expired, forgotten, orphans)


__all__ = ["NewFile", "PartUrl", "Status", "Swept", "direct_upload_abort", "direct_upload_sign",
           "direct_upload_status", "direct_uploads_complete", "direct_uploads_create", "direct_uploads_sweep",
           "uploads_create_from_direct"]
