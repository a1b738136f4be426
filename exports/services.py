"""Export every output of an upload batch as one ZIP: a long job that
checkpoints, so a crash costs at most one chunk of work, and whose next
attempt may run on another host.

What goes in is frozen at the first attempt: the manifest (every stored
object of the batch's jobs that had succeeded by then, in a fixed order) is
the first thing checkpointed, and every later attempt exports exactly that
list. Rebuilding it per attempt would let a job that finished in between
shift the entries under the resumed prefix (duplicates, missing files).

The ZIP is assembled in the store as a multipart upload (media.multipart):
entries are streamed from the store into zipfile writing to a local spool;
each time the spool holds FAIRLANE_EXPORT_PART_BYTES (at least S3's 5 MiB)
at an entry boundary it becomes the next part. Every
FAIRLANE_EXPORT_CHUNK_FILES entries the attempt checkpoints, fenced by its
attempt number: the upload's key and id, the parts so far, zipfile's
record of the entries written (offsets and CRCs, for the central
directory) and the spool's current content saved as a small "tail" object
(parts cannot be smaller than 5 MiB, checkpoints can). The next attempt,
on any host, fetches the tail and goes on from the next entry. The bytes
are a function of the manifest alone (fixed entry dates, stored not
compressed, part boundaries by size), so a replaced attempt that wakes up
and re-sends a part or a tail sends the same bytes: it cannot corrupt the
live one's upload. The finished object is invisible until the upload is
completed, and published by the database transition like any output.
"""
from __future__ import annotations

import logging
import os
import posixpath
import signal
import uuid
import zipfile
from dataclasses import dataclass
from datetime import timezone as dt_timezone
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.http import Http404

import dispatcher
import media
from project.dbclock import db_now
from project.lanes import Lane
from uploads import limits, rates
from uploads import services as job_services
from uploads.attempts import Attempt, job_attempt_run
from uploads.errors import JobError
from uploads.lifecycle import JobRestarted
from uploads.models import Job, Output, Upload
from uploads.services import OutputFile

log = logging.getLogger(__name__)

# Copying stored (not recompressed) media runs at disk speed, about this many
# bytes per worker second on a modest disk; the estimate only orders jobs.
EXPORT_BYTES_PER_COST_SECOND = 200 * 1024 * 1024
# S3 refuses parts under 5 MiB (all but the last).
S3_MIN_PART_BYTES = 5 * 1024 * 1024
COPY_BLOCK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One file in the archive: the object it comes from, its name inside."""

    key: str
    arcname: str
    size: int


def export_create(*, owner: AbstractBaseUser, batch: uuid.UUID) -> Job:
    """Queue an export of `batch`, which must be one of `owner`'s (404 otherwise,
    so nobody learns which batches exist), within the owner's max_queued_jobs
    (429 otherwise: uploads/limits.py)."""
    if not Upload.objects.filter(owner=owner, batch=batch).exists():
        raise Http404("No such batch.")
    size = sum(o.size for job in _batch_jobs(owner_id=owner.pk, batch=batch) for o in job.outputs.all())
    with transaction.atomic():
        limits.queued_jobs_check(adding={owner.pk: 1})
        cost = max(0.05, size / EXPORT_BYTES_PER_COST_SECOND)
        rate_key, rate_units = rates.rate_of(kind=Job.Kind.EXPORT, media_info={}, filename="", size=0,
                                             cost_estimate=cost)
        job = Job(owner=owner, kind=Job.Kind.EXPORT, batch=batch, lane=Lane.CPU_TRANSCODE,
                  queued_at=db_now(), cost_estimate=cost, rate_key=rate_key, rate_units=rate_units)
        job.task_id = str(job.id)
        job.save()
        dispatcher.after_commit(lambda: job_services.jobs_enqueue(job_ids=[str(job.id)]))
    return job


def _batch_jobs(*, owner_id: int, batch: uuid.UUID):
    """The batch's finished jobs in a fixed order: a resumed attempt must see
    the same list as the one it resumes."""
    return (Job.objects.filter(owner_id=owner_id, upload__batch=batch, status=Job.Status.SUCCEEDED)
            .select_related("upload").prefetch_related("outputs").order_by("upload__created_at", "upload_id"))


def export_entries(*, owner_id: int, batch: uuid.UUID) -> list[Entry]:
    """Every stored object of the batch's finished jobs' outputs (an HLS
    ladder's segments too, not only the outputs' main files), under one
    folder per upload. Where each object is comes from the job's Output
    rows alone: a chunked video's outputs are stored under its finalizer's
    prefix, not under any attempt of its own."""
    entries = []
    for job in _batch_jobs(owner_id=owner_id, batch=batch):
        # Two uploads may share a file name: the folder gets the upload id's head.
        folder = f"{Path(job.upload.filename).name or 'upload'}-{job.upload.id.hex[:8]}"
        objects = sorted(obj for output in job.outputs.all() for obj in _output_objects(output))
        entries += [Entry(key, f"{folder}/{name}", size) for name, key, size in objects]
    return entries


def _output_objects(output: Output) -> list[tuple[str, str, int]]:
    """(name in its job's folder, key, size) of each object of an output: the
    output's one object by its file name, or an HLS bundle's every object
    under the bundle folder's name (`hls/master.m3u8`, `hls/360p/...`)."""
    folder = output.bundle_folder
    if folder is None:
        return [(posixpath.basename(output.file.name), output.file.name, output.size)]
    home = posixpath.dirname(folder.rstrip("/")) + "/"
    return [(key.removeprefix(home), key, size) for key, size in media.list_prefix(folder).items()]


def _manifest(attempt: Attempt) -> dict:
    """The export's contents, frozen in its checkpoint by its first attempt."""
    cp = attempt.job.checkpoint or {}
    if cp.get("manifest"):
        return cp["manifest"]
    job = attempt.job
    entries = export_entries(owner_id=job.owner_id, batch=job.batch)
    if not entries:
        raise JobError("nothing_to_export", "The batch has no finished outputs to export yet.")
    manifest = {"entries": [[e.key, e.arcname, e.size] for e in entries],
                "date_time": list(job.created_at.astimezone(dt_timezone.utc).timetuple()[:6])}
    attempt.progress(0, checkpoint={"manifest": manifest})
    attempt.job.checkpoint = {"manifest": manifest}
    return manifest


# --- zipfile's record of what it wrote, in and out of the checkpoint --------------


def _zipinfo_json(info: zipfile.ZipInfo) -> dict:
    out = {}
    for slot in zipfile.ZipInfo.__slots__:
        value = getattr(info, slot, None)
        out[slot] = {"hex": value.hex()} if isinstance(value, bytes) else value
    return out


def _zipinfo_from(data: dict) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo()
    for slot, value in data.items():
        if isinstance(value, dict):
            value = bytes.fromhex(value["hex"])
        elif isinstance(value, list):
            value = tuple(value)
        setattr(info, slot, value)
    return info


class _Spool:
    """Where zipfile writes: a local file holding the bytes not yet uploaded
    as a part. Not seekable (so zipfile writes data descriptors and never
    goes back), but it tells the archive's absolute offset, which is what
    zipfile records for each entry."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.file = open(path, "ab")
        self.offset = offset + self.file.tell()

    def write(self, data: bytes) -> int:
        self.file.write(data)
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset

    def seek(self, *args):
        raise OSError("not seekable")

    def flush(self) -> None:
        self.file.flush()

    def size(self) -> int:
        self.file.flush()
        return self.path.stat().st_size

    def reset(self) -> None:
        self.file.truncate(0)
        self.file.seek(0)

    def close(self) -> None:
        self.file.close()


class _Assembly:
    """One export's upload, as the checkpoint records it."""

    def __init__(self, job: Job, cp: dict, scratch: Path) -> None:
        self.job_id = str(job.id)
        self.scratch = scratch
        upload = cp.get("upload")
        self.done = int(cp.get("entries", 0)) if upload else 0
        self.parts = [media.Part(*p) for p in cp.get("parts", [])] if upload else []
        self.infos = [_zipinfo_from(i) for i in cp.get("zip", [])] if upload else []
        self.tail = cp.get("tail") if upload else None
        if upload:
            self.key, self.upload_id = upload["key"], upload["id"]
        else:
            self.key = media.export_key(job_id=self.job_id, token=uuid.uuid4().hex,
                                        filename=f"batch-{job.batch}.zip")
            self.upload_id = media.multipart_begin(self.key)
        uploaded = sum(p.size for p in self.parts)
        spool_path = scratch / "spool"
        spool_path.unlink(missing_ok=True)
        if self.tail:
            media.fetch(self.tail["key"], spool_path)
            if spool_path.stat().st_size != self.tail["size"]:
                raise JobError("export_corrupt", "The export's checkpoint is unreadable; retry the export.")
        self.spool = _Spool(spool_path, uploaded)

    def checkpoint(self, manifest: dict) -> dict:
        return {"manifest": manifest, "upload": {"key": self.key, "id": self.upload_id}, "entries": self.done,
                "parts": [[p.number, p.etag, p.size] for p in self.parts],
                "zip": [_zipinfo_json(i) for i in self.infos], "tail": self.tail}

    def cut_part(self) -> None:
        """The spool becomes the next part."""
        self.spool.flush()
        self.parts.append(media.multipart_put(self.key, self.upload_id, len(self.parts) + 1, self.spool.path))
        self.spool.reset()

    def save_tail(self) -> None:
        """The spool's bytes (under a part's minimum) as their own small
        object, named by the entries they follow, for the next attempt."""
        previous = self.tail
        self.tail = None
        size = self.spool.size()
        if size:
            name = f"tail-{self.done:06d}"
            key = f"{self.key.rsplit('/', 1)[0]}/{name}"
            media.put_file(self.spool.path, key)
            self.tail = {"key": key, "size": size}
        self._previous_tail = previous

    def forget_previous_tail(self) -> None:
        previous = getattr(self, "_previous_tail", None)
        if previous and previous != self.tail:
            media.delete(previous["key"])


def _fault_crash_after(chunk: int, attempt: Attempt) -> None:
    """Fault injection (tests/chaos): the first attempt kills its own process
    right after checkpoint number FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK."""
    crash_at = settings.FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK
    if settings.FAIRLANE_FAULT_INJECTION and attempt.number == 1 and crash_at and chunk == crash_at:
        log.warning("fault injection: export %s crashes after chunk %d", attempt.job.id, chunk)
        os.kill(os.getpid(), signal.SIGKILL)


def _part_bytes() -> int:
    return max(S3_MIN_PART_BYTES, settings.FAIRLANE_EXPORT_PART_BYTES)


def export_build(attempt: Attempt) -> list[OutputFile]:
    """The work of one export attempt (uploads/attempts.py runs it)."""
    job, job_id = attempt.job, str(attempt.job.id)
    manifest = _manifest(attempt)
    entries = [Entry(*e) for e in manifest["entries"]]
    date_time = tuple(manifest["date_time"])
    with media.attempt_scratch(job_id=job_id, attempt=attempt.number) as scratch:
        try:
            built = _assemble(attempt, manifest, entries, date_time, job.checkpoint or {}, scratch)
        except media.UploadGone:
            # The upload was completed or aborted behind this attempt's back
            # (a replaced attempt that woke up): start the ZIP again.
            log.warning("export %s: its upload is gone; starting the archive again", job_id)
            built = _assemble(attempt, manifest, entries, date_time, {}, scratch)
    key, size, resumed_from = built
    return [OutputFile(name="zip", path=key, content_type="application/zip", size=size,
                       metadata={"entries": len(entries), "resumed_from_entry": resumed_from})]


def _assemble(attempt: Attempt, manifest: dict, entries: list[Entry], date_time: tuple, cp: dict,
              scratch: Path) -> tuple[str, int, int]:
    assembly = _Assembly(attempt.job, cp, scratch)
    resumed_from = assembly.done
    if resumed_from:
        log.info("export %s attempt %d resumes after %d entries", attempt.job.id, attempt.number, resumed_from)
    else:  # the next attempt continues this upload, wherever it runs
        attempt.progress(0, checkpoint=assembly.checkpoint(manifest))
    total = sum(e.size for e in entries) or 1
    chunk_files = settings.FAIRLANE_EXPORT_CHUNK_FILES
    chunk_no = 0
    zf = zipfile.ZipFile(assembly.spool, "w", zipfile.ZIP_STORED, allowZip64=True)  # media is compressed already
    zf.filelist = list(assembly.infos)
    zf.NameToInfo = {i.filename: i for i in zf.filelist}
    try:
        while assembly.done < len(entries):
            for entry in entries[assembly.done:assembly.done + chunk_files]:
                _write_entry(zf, entry, date_time)
                assembly.done += 1
                if assembly.spool.size() >= _part_bytes():
                    assembly.cut_part()
            assembly.infos = list(zf.filelist)
            if assembly.done < len(entries):
                assembly.save_tail()
                copied = sum(e.size for e in entries[:assembly.done])
                attempt.progress(min(99, int(100 * copied / total)), checkpoint=assembly.checkpoint(manifest))
                assembly.forget_previous_tail()
                chunk_no += 1
                _fault_crash_after(chunk_no, attempt)
        zf.close()  # the central directory, into the spool: the last part
    except BaseException:
        zf.fp = None  # abandoned: the next attempt continues from the checkpoint, not from this writer
        assembly.spool.close()
        raise
    size = assembly.spool.tell()
    try:
        assembly.cut_part()
    finally:
        assembly.spool.close()
    attempt.progress(99)  # still ours? then complete (a replaced attempt stops here)
    media.multipart_complete(assembly.key, assembly.upload_id, assembly.parts)
    if assembly.tail:
        media.delete(assembly.tail["key"])
    return assembly.key, size, resumed_from


def _write_entry(zf: zipfile.ZipFile, entry: Entry, date_time: tuple) -> None:
    info = zipfile.ZipInfo(entry.arcname, date_time=date_time)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    with media.open_stream(entry.key) as src, zf.open(info, "w", force_zip64=entry.size >= zipfile.ZIP64_LIMIT) as dst:
        while block := src.read(COPY_BLOCK):
            dst.write(block)


def export_upload_discard(*, checkpoint: dict) -> None:
    """Drop an export's unfinished upload and its objects (a retried export
    starts from a new manifest)."""
    upload = (checkpoint or {}).get("upload")
    if upload:
        media.multipart_abort(upload["key"], upload["id"])
        media.delete_prefix(upload["key"].rsplit("/", 1)[0] + "/")


def export_restarted_receive(event: JobRestarted) -> None:
    """uploads.lifecycle's announcement of a retried job (after its commit,
    once the old attempts' objects are gone): any job's, and only an
    export's checkpoint names an upload."""
    export_upload_discard(checkpoint=event.checkpoint)


def job_export(*, job_id: str, hostname: str = "", soft_limit_s: float | None = None,
                  task_id: str = "") -> str | None:
    """Run one delivery of an export job; see uploads.attempts.job_attempt_run."""
    return job_attempt_run(job_id=job_id, hostname=hostname, soft_limit_s=soft_limit_s, work=export_build,
                           task_id=task_id)
