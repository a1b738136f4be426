"""Services that write uploads and jobs. Every job status change is a guarded
conditional UPDATE, so a duplicate delivery (Celery is at-least-once) or a
late admin action can never move a job backwards or run it twice."""
from __future__ import annotations

import logging
import os
import socket
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

from project import dispatch, logcontext, metrics
from project.dispatch import KeyPolicy
from project.lanes import Lane
from uploads.errors import ApplicationError
from uploads.models import Job, JobAttempt, Output, Profile, Upload

log = logging.getLogger(__name__)



def worker_id() -> str:
    """Which process ran an attempt: enough to find its logs (called at run
    time: prefork children have their own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


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


def uploads_create(
    *, owner: AbstractBaseUser, files: list[UploadedFile], scheduled_for: datetime | None = None
) -> list[Upload]:
    """Store every file and create its job in one transaction; enqueue only
    after commit, so no worker can see a job whose row is not there yet and a
    failed request enqueues nothing."""
    if not files:
        raise ApplicationError("no_files", "Attach one or more files in the multipart field 'file'.")
    if scheduled_for is not None and timezone.is_naive(scheduled_for):
        raise ApplicationError("invalid_scheduled_for", "scheduled_for needs a time zone, e.g. 2026-12-01T09:00:00Z.")
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
            job = Job(upload=upload, owner=owner, lane=Lane.CPU_TRANSCODE, queued_at=now,
                      scheduled_for=scheduled_for, cost_estimate=cost_estimate_for_size(f.size))
            job.task_id = str(job.id)  # the Celery task id is the job id (Flower, TaskResult, admin search)
            job.save()
            uploads.append(upload)
        job_ids = [str(job_id) for job_id in Job.objects.filter(upload__in=uploads).values_list("id", flat=True)]
        transaction.on_commit(lambda: jobs_enqueue(job_ids=job_ids))
    return uploads


# Before the probe, the only thing known about a file is its size. About one
# worker second per 4 MB is the right order for phone video at our ladder;
# the dispatcher corrects each key's charge by the measured time afterwards.
BYTES_PER_COST_SECOND = 4 * 1024 * 1024
NOTIFY_COST_S = 0.05


def cost_estimate_for_size(size: int) -> float:
    return max(0.05, size / BYTES_PER_COST_SECOND)


def fair_policies(*, user_ids: Iterable[int], lane: Lane) -> dict[int, KeyPolicy]:
    """Each user's weight, cap and rate on `lane`; users without a Profile get the defaults."""
    policies = {}
    for p in Profile.objects.filter(user_id__in=set(user_ids)):
        if lane is Lane.CPU_TRANSCODE:
            policies[p.user_id] = KeyPolicy(weight=p.weight, cap=p.transcode_cap)
        else:
            rate = (p.notify_rate_per_s, float(p.notify_burst)) if p.notify_rate_per_s else None
            policies[p.user_id] = KeyPolicy(weight=p.weight, cap=p.notify_cap, rate=rate)
    return policies


def jobs_enqueue(*, job_ids: Iterable[str]) -> int:
    """Hand queued jobs to the cpu-transcode lane through the fair dispatcher.
    Returns how many were new to it (the rest it already held)."""
    jobs = list(Job.objects.filter(id__in=list(job_ids), status=Job.Status.QUEUED)
                .only("id", "owner_id", "cost_estimate", "scheduled_for").order_by("created_at"))
    policies = fair_policies(user_ids=[j.owner_id for j in jobs], lane=Lane.CPU_TRANSCODE)
    accepted = 0
    for job in jobs:
        accepted += dispatch.enqueue(
            "transcoding.job_run", [str(job.id)], task_id=str(job.id), fair_key=str(job.owner_id),
            cost=job.cost_estimate, policy=policies.get(job.owner_id),
            due=job.scheduled_for.timestamp() if job.scheduled_for else None,
        )
    return accepted


def jobs_reconcile() -> int:
    """Re-submit every queued job the dispatcher does not hold: Redis lost its
    state, or the process died between commit and submit. Submission is
    idempotent by task id, so racing the normal path is harmless."""
    sched = dispatch.scheduler(Lane.CPU_TRANSCODE)
    queued = Job.objects.filter(status=Job.Status.QUEUED).values_list("id", flat=True)
    missing = [str(job_id) for job_id in queued.iterator() if sched.known(str(job_id)) is None]
    return jobs_enqueue(job_ids=missing) if missing else 0


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
    waited_from = max(filter(None, [job.queued_at or job.created_at, job.scheduled_for]))
    job.wait_ms = _ms_between(waited_from, now)
    job.save(update_fields=["wait_ms"])
    JobAttempt.objects.create(job=job, number=job.attempts, started_at=now, worker=worker_id())
    logcontext.bind(job_id=str(job.id), user_id=job.owner_id, attempt=job.attempts)
    log.info("job started after waiting %d ms", job.wait_ms or 0)
    return job


def job_progress_set(*, job_id: str, progress: int) -> bool:
    """Record progress; False when the job is no longer running (an operator
    canceled it), which tells the worker to stop."""
    return bool(Job.objects.filter(id=job_id, status=Job.Status.RUNNING).update(progress=max(0, min(100, int(progress)))))


def job_probe_record(*, job_id: str, kind: str, media_info: dict, cost_estimate: float) -> None:
    Job.objects.filter(id=job_id).update(kind=kind, media_info=media_info, cost_estimate=cost_estimate)


def _finish(job_id: str, status: str, **fields) -> bool:
    now = timezone.now()
    job = Job.objects.filter(id=job_id).only("started_at", "owner_id", "lane", "kind", "wait_ms").first()
    if job is None:
        return False
    updated = Job.objects.filter(id=job_id, status__in=[Job.Status.QUEUED, Job.Status.RUNNING]).update(
        status=status, finished_at=now, process_ms=_ms_between(job.started_at, now), **fields
    )
    if updated:
        process_ms = _ms_between(job.started_at, now)
        transaction.on_commit(lambda: metrics.observe_job(
            lane=job.lane, kind=job.kind, outcome=status,
            wait_s=None if job.wait_ms is None else job.wait_ms / 1000,
            process_s=None if process_ms is None else process_ms / 1000,
        ))
        JobAttempt.objects.filter(job_id=job_id, finished_at__isnull=True).update(
            finished_at=now, outcome=status, error_code=fields.get("error_code", ""),
            error_message=fields.get("error_message", ""),
        )
        transaction.on_commit(lambda: notify_enqueue(job_id=job_id, owner_id=job.owner_id, status=status))
    return bool(updated)


def notify_enqueue(*, job_id: str, owner_id: int, status: str) -> None:
    policy = fair_policies(user_ids=[owner_id], lane=Lane.IO_NOTIFY).get(owner_id)
    dispatch.enqueue(
        "uploads.notify_job_finished", [str(job_id)], task_id=f"notify-{job_id}-{status}",
        fair_key=str(owner_id), cost=NOTIFY_COST_S, policy=policy,
    )


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


def jobs_retry(*, job_ids: Iterable[str], actor: AbstractBaseUser) -> list[Job]:
    """failed/canceled -> queued, through the fair dispatcher like any new job
    (no queue jumping); the next run counts as a new attempt. Returns the jobs
    that were retried; others are left alone."""
    now = timezone.now()
    with transaction.atomic():
        jobs = list(Job.objects.select_for_update().filter(
            id__in=list(job_ids), status__in=[Job.Status.FAILED, Job.Status.CANCELED]))
        ids = [job.id for job in jobs]
        Output.objects.filter(job_id__in=ids).delete()
        Job.objects.filter(id__in=ids).update(
            status=Job.Status.QUEUED, queued_at=now, progress=0, error_code="", error_message="",
            started_at=None, finished_at=None, wait_ms=None, process_ms=None,
        )
        transaction.on_commit(lambda: jobs_enqueue(job_ids=[str(i) for i in ids]))
    log.info("%s retried %d job(s): %s", actor, len(ids), [str(i) for i in ids])
    return jobs


def jobs_cancel(*, job_ids: Iterable[str], actor: AbstractBaseUser) -> list[Job]:
    """queued/running -> canceled. A held job leaves its user's backlog at
    once; a released one is dropped by its guarded start; a running one stops
    at its next progress report (its ffmpeg process group is killed and its
    work directory removed). Returns the jobs that were canceled."""
    canceled = []
    with transaction.atomic():
        for job in Job.objects.select_for_update().filter(
                id__in=list(job_ids), status__in=[Job.Status.QUEUED, Job.Status.RUNNING]):
            if _finish(str(job.id), Job.Status.CANCELED, error_code="canceled",
                       error_message=f"Canceled by {actor}."):
                canceled.append(job)
        ids = [str(job.id) for job in canceled]
        transaction.on_commit(lambda: dispatch.cancel("transcoding.job_run", ids))
    log.info("%s canceled %d job(s): %s", actor, len(canceled), ids)
    return canceled
