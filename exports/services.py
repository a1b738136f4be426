"""Export every output of an upload batch as one ZIP: a long job that
checkpoints, so a crash costs at most one chunk of work.

The ZIP is written in chunks of FAIRLANE_EXPORT_CHUNK_FILES entries. After
each chunk the archive is closed (its central directory written), flushed
to disk, and the checkpoint {entries, size, file} is saved with the progress,
fenced by the attempt number. A later attempt copies the checkpointed prefix
of the previous attempt's file into its own file, reopens it in append mode
(zipfile rewrites the central directory after the new entries) and goes on
from the next entry. Each attempt writes its own file, so a stalled attempt
that wakes up after being replaced cannot corrupt the live one's.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.http import Http404

import dispatcher
from project.dbclock import db_now
from project.lanes import Lane
from uploads import services as job_services
from uploads.attempts import Attempt, job_attempt_run
from uploads.errors import JobError
from uploads.models import Job, Upload
from uploads.services import OutputFile

log = logging.getLogger(__name__)

# Copying stored (not recompressed) media runs at disk speed, about this many
# bytes per worker second on a modest disk; the estimate only orders jobs.
EXPORT_BYTES_PER_COST_SECOND = 200 * 1024 * 1024


@dataclass(frozen=True)
class Entry:
    """One file in the archive: where it comes from, what it is called inside."""

    source: Path
    arcname: str
    size: int


def export_create(*, owner: AbstractBaseUser, batch: uuid.UUID) -> Job:
    """Queue an export of `batch`, which must be one of `owner`'s (404 otherwise,
    so nobody learns which batches exist)."""
    if not Upload.objects.filter(owner=owner, batch=batch).exists():
        raise Http404("No such batch.")
    size = sum(o.size for job in _batch_jobs(owner_id=owner.pk, batch=batch) for o in job.outputs.all())
    with transaction.atomic():
        job = Job(owner=owner, kind=Job.Kind.EXPORT, batch=batch, lane=Lane.CPU_TRANSCODE,
                  queued_at=db_now(), cost_estimate=max(0.05, size / EXPORT_BYTES_PER_COST_SECOND))
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
    """Every published file of the batch's jobs (an HLS ladder's segments
    too, not only the outputs' main files), under one folder per upload."""
    entries = []
    for job in _batch_jobs(owner_id=owner_id, batch=batch):
        # Two uploads may share a file name: the folder gets the upload id's head.
        folder = f"{Path(job.upload.filename).name or 'upload'}-{job.upload.id.hex[:8]}"
        roots = sorted({(Path(settings.MEDIA_ROOT) / o.file.name).parent for o in job.outputs.all()})
        for root in roots[:1]:  # a job publishes into one folder (its attempt's)
            for source in sorted(p for p in root.rglob("*") if p.is_file()):
                entries.append(Entry(source, f"{folder}/{source.relative_to(root)}", source.stat().st_size))
    return entries


def _work_dir(job_id: str) -> Path:
    return Path(settings.MEDIA_ROOT) / "tmp" / "exports" / job_id


def _resume(attempt: Attempt, path: Path) -> int:
    """Start `path` from the job's checkpoint; returns the entries already in it."""
    cp = attempt.job.checkpoint or {}
    previous = _work_dir(str(attempt.job.id)) / cp.get("file", "")
    if not cp.get("entries") or not previous.is_file() or previous.stat().st_size < cp["size"]:
        path.unlink(missing_ok=True)
        return 0
    with open(previous, "rb") as src, open(path, "wb") as dst:
        remaining = cp["size"]
        while remaining:
            block = src.read(min(remaining, 1 << 20))
            if not block:
                raise JobError("export_corrupt", "The export's checkpoint is unreadable; retry the export.")
            dst.write(block)
            remaining -= len(block)
    log.info("export %s attempt %d resumes after %d entries", attempt.job.id, attempt.number, cp["entries"])
    return int(cp["entries"])


def _fault_crash_after(chunk: int, attempt: Attempt) -> None:
    """Fault injection (tests/chaos): the first attempt kills its own process
    right after checkpoint number FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK."""
    crash_at = settings.FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK
    if settings.FAIRLANE_FAULT_INJECTION and attempt.number == 1 and crash_at and chunk == crash_at:
        log.warning("fault injection: export %s crashes after chunk %d", attempt.job.id, chunk)
        os.kill(os.getpid(), signal.SIGKILL)


def export_build(attempt: Attempt) -> list[OutputFile]:
    """The work of one export attempt (uploads/attempts.py runs it)."""
    job, job_id = attempt.job, str(attempt.job.id)
    entries = export_entries(owner_id=job.owner_id, batch=job.batch)
    if not entries:
        raise JobError("nothing_to_export", "The batch has no finished outputs to export yet.")
    work = _work_dir(job_id)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"attempt-{attempt.number}.zip"
    done = _resume(attempt, path)
    resumed_from = done
    total = sum(e.size for e in entries) or 1
    chunk_files = settings.FAIRLANE_EXPORT_CHUNK_FILES
    chunk_no = 0
    while done < len(entries):
        chunk = entries[done:done + chunk_files]
        # Media outputs are compressed already: store them.
        with zipfile.ZipFile(path, "a" if path.exists() else "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for entry in chunk:
                zf.write(entry.source, entry.arcname)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        done += len(chunk)
        chunk_no += 1
        copied = sum(e.size for e in entries[:done])
        attempt.progress(min(99, int(100 * copied / total)),
                         checkpoint={"entries": done, "size": path.stat().st_size, "file": path.name})
        _fault_crash_after(chunk_no, attempt)
    final = attempt.outputs_dir
    final.mkdir(parents=True, exist_ok=True)
    name = f"batch-{job.batch}.zip"
    path.rename(final / name)
    shutil.rmtree(work, ignore_errors=True)
    return [OutputFile(name="zip", path=str((final / name).relative_to(settings.MEDIA_ROOT)),
                       content_type="application/zip", size=(final / name).stat().st_size,
                       metadata={"entries": len(entries), "resumed_from_entry": resumed_from})]


def job_export(*, job_id: str, hostname: str = "", soft_limit_s: float | None = None,
                  task_id: str = "") -> str | None:
    """Run one delivery of an export job; see uploads.attempts.job_attempt_run."""
    return job_attempt_run(job_id=job_id, hostname=hostname, soft_limit_s=soft_limit_s, work=export_build,
                           task_id=task_id)
