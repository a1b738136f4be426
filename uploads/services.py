"""Services that write uploads and jobs. Every job status change is a guarded
conditional UPDATE, so a duplicate delivery (Celery is at-least-once) or a
late admin action can never move a job backwards or run it twice."""
from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from project import dispatch
from project.lanes import Lane
from uploads.errors import ApplicationError
from uploads.models import Job, Output, Upload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutputFile:
    """A finished output, already moved to its final place under MEDIA_ROOT."""

    name: str
    path: str  # relative to MEDIA_ROOT
    content_type: str
    size: int
    metadata: dict


def _ms_between(start: datetime | None, end: datetime) -> int | None:
    return None if start is None else max(0, int((end - start).total_seconds() * 1000))


def uploads_create(*, owner: AbstractBaseUser, files: list[UploadedFile]) -> list[Upload]:
    """Store every file and create its job in one transaction; enqueue only
    after commit, so no worker can see a job whose row is not there yet and a
    failed request enqueues nothing."""
    if not files:
        raise ApplicationError("no_files", "Attach one or more files in the multipart field 'file'.")
    too_big = [f.name for f in files if f.size > settings.FAIRLANE_MAX_UPLOAD_BYTES]
    if too_big:
        raise ApplicationError(
            "file_too_large",
            f"Files larger than {settings.FAIRLANE_MAX_UPLOAD_BYTES} bytes are not accepted: {', '.join(too_big)}.",
            status_code=413,
            extra={"files": too_big},
        )
    batch = uuid.uuid4()
    uploads: list[Upload] = []
    with transaction.atomic():
        now = timezone.now()
        for f in files:
            upload = Upload(
                owner=owner,
                batch=batch,
                filename=(f.name or "upload")[:255],
                size=f.size,
                client_content_type=(f.content_type or "")[:255],
            )
            upload.file.save("upload", f, save=False)
            upload.save()
            Job.objects.create(upload=upload, owner=owner, lane=Lane.CPU_TRANSCODE, queued_at=now)
            uploads.append(upload)
        job_ids = [str(job_id) for job_id in Job.objects.filter(upload__in=uploads).values_list("id", flat=True)]
        transaction.on_commit(lambda: jobs_enqueue(job_ids=job_ids))
    return uploads


def jobs_enqueue(*, job_ids: Iterable[str]) -> None:
    """Hand queued jobs to the cpu-transcode lane (through the fair dispatcher)."""
    jobs = Job.objects.filter(id__in=list(job_ids), status=Job.Status.QUEUED)
    for job in jobs.only("id", "owner_id", "cost_estimate"):
        dispatch.enqueue(
            "transcoding.job_run",
            job_id=str(job.id),
            fair_key=str(job.owner_id),
            cost=job.cost_estimate,
        )


def job_start(*, job_id: str) -> Job | None:
    """queued -> running, once. Returns None when another delivery got there
    first or the job is no longer runnable; the caller then drops the message."""
    now = timezone.now()
    claimed = Job.objects.filter(id=job_id, status=Job.Status.QUEUED).update(
        status=Job.Status.RUNNING, started_at=now, attempts=F("attempts") + 1, progress=0
    )
    if not claimed:
        log.info("job %s not started: not queued (duplicate delivery or finished)", job_id)
        return None
    job = Job.objects.select_related("upload").get(id=job_id)
    job.wait_ms = _ms_between(job.queued_at or job.created_at, now)
    job.save(update_fields=["wait_ms"])
    return job


def job_progress_set(*, job_id: str, progress: int) -> None:
    Job.objects.filter(id=job_id, status=Job.Status.RUNNING).update(progress=max(0, min(100, int(progress))))


def job_probe_record(*, job_id: str, kind: str, media_info: dict, cost_estimate: float) -> None:
    Job.objects.filter(id=job_id).update(kind=kind, media_info=media_info, cost_estimate=cost_estimate)


def _finish(job_id: str, status: str, **fields) -> bool:
    now = timezone.now()
    job = Job.objects.filter(id=job_id).only("started_at", "owner_id").first()
    if job is None:
        return False
    updated = Job.objects.filter(id=job_id, status__in=[Job.Status.QUEUED, Job.Status.RUNNING]).update(
        status=status, finished_at=now, process_ms=_ms_between(job.started_at, now), **fields
    )
    if updated:
        transaction.on_commit(lambda: dispatch.enqueue(
            "uploads.notify_job_finished", job_id=job_id, fair_key=str(job.owner_id),
            task_id=f"notify-{job_id}-{status}",
        ))
    return bool(updated)


def job_succeed(*, job_id: str, outputs: list[OutputFile]) -> bool:
    """running -> succeeded with its outputs, atomically."""
    with transaction.atomic():
        if not Job.objects.select_for_update().filter(id=job_id, status=Job.Status.RUNNING).exists():
            return False
        for out in outputs:
            Output.objects.create(
                job_id=job_id, name=out.name, file=out.path, content_type=out.content_type,
                size=out.size, metadata=out.metadata,
            )
        return _finish(job_id, Job.Status.SUCCEEDED, progress=100, error_code="", error_message="")


def job_fail(*, job_id: str, code: str, message: str) -> bool:
    """queued/running -> failed with a code and a human message."""
    with transaction.atomic():
        return _finish(job_id, Job.Status.FAILED, error_code=code[:64], error_message=message)
