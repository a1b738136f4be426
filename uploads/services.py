"""Services that write uploads and jobs. Every job status change is a guarded
conditional UPDATE, so a duplicate delivery (Celery is at-least-once) or a
late admin action can never move a job backwards or run it twice."""
from __future__ import annotations

import logging
import os
import signal
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

import dispatcher
import media
import organisations
from dispatcher import KeyPolicy
from project import logcontext, metrics, passes, plans
from project.bulk_insert import insert_many
from project.dbclock import db_now
from project.lanes import Lane
from project.pacing import paced
from uploads import lifecycle, limits, parts, rates
from uploads.errors import ApplicationError, public_message
from uploads.models import Batch, Job, JobAttempt, Output, Profile, Upload

log = logging.getLogger(__name__)


def worker_id() -> str:
    """Which process ran an attempt: enough to find its logs (called at run
    time: prefork children have their own pid)."""
    return f"{settings.FAIRLANE_HOST_ID}:{os.getpid()}"


@dataclass(frozen=True)
class OutputFile:
    """A finished output, already stored under its attempt's prefix."""

    name: str
    path: str  # its key in the store (media/)
    content_type: str
    size: int
    metadata: dict


def _ms_between(start: datetime | None, end: datetime) -> int | None:
    return None if start is None else max(0, int((end - start).total_seconds() * 1000))


@dataclass(frozen=True)
class StoredFile:
    """A file in storage under `key` (the web tier stored it, or its client
    sent it there directly: uploads/direct.py), to become an Upload."""

    key: str
    filename: str
    size: int
    content_type: str = ""


def uploads_create(
    *, owner: AbstractBaseUser, files: list[UploadedFile], scheduled_for: datetime | None = None,
    batch_name: str = "",
) -> list[Upload]:
    """Store every file of a request, then create its batch and jobs
    (uploads_record). The files are stored first, outside any transaction:
    a copy into the store (seconds per GiB) must not hold the database;
    if the batch is not created, they are removed again. Each upload
    carries its job as created in `accepted_job`."""
    if not files:
        raise ApplicationError("no_files", "Attach one or more files in the multipart field 'file'.")
    _check_schedule(scheduled_for)
    # Before any byte is stored (uploads_record counts again, under the lock, to create them).
    limits.queued_jobs_check(adding={owner.pk: len(files)}, first_look=True)
    too_big = [f.name for f in files if f.size > settings.FAIRLANE_MAX_UPLOAD_BYTES]
    if too_big:
        raise ApplicationError(
            "file_too_large",
            f"Files larger than {settings.FAIRLANE_MAX_UPLOAD_BYTES} bytes are not accepted: {', '.join(too_big)}.",
            status_code=413,
            extra={"files": too_big},
        )
    written: list[str] = []  # keys known before writing, so a file that fails half-way is removed too
    try:
        stored = []
        for f in files:
            written.append(media.upload_key(owner_id=owner.pk))
            stored.append(StoredFile(media.save_upload(written[-1], f), (f.name or "upload")[:255], f.size,
                                     (f.content_type or "")[:255]))
        return uploads_record(owner=owner, files=stored, scheduled_for=scheduled_for, batch_name=batch_name)
    except BaseException:
        for key in written:
            media.delete(key)
        raise


def _check_schedule(scheduled_for: datetime | None) -> None:
    if scheduled_for is not None and timezone.is_naive(scheduled_for):
        raise ApplicationError("invalid_scheduled_for", "scheduled_for needs a time zone, e.g. 2026-12-01T09:00:00Z.")


def uploads_record(
    *, owner: AbstractBaseUser, files: list[StoredFile], scheduled_for: datetime | None = None,
    claim: Callable[[], None] | None = None, batch_name: str = "",
) -> list[Upload]:
    """One batch of files already in storage: its batch, uploads and jobs
    in one short transaction that does no I/O but the database's (2,000
    files are three bulk inserts), enqueued only after commit, so no worker
    can see a job whose row is not there yet and a failed request enqueues
    nothing. `claim` runs first in the same transaction: whatever the files
    are taken over from (a direct upload's rows) goes with the batch's
    creation or not at all. The owner's jobs stay within their plan's
    max_queued_jobs (limits.queued_jobs_check, under their lock), or
    nothing is created. The caller removes the files if this raises."""
    if not files:
        raise ApplicationError("no_files", "Name one or more files.")
    _check_schedule(scheduled_for)
    batch = uuid.uuid4()
    with transaction.atomic():
        limits.queued_jobs_check(adding={owner.pk: len(files)})
        if claim is not None:
            claim()
        now = db_now()
        name = batch_name_clean(batch_name) or batch_default_name(filenames=[f.filename for f in files], at=now)
        Batch.objects.create(id=batch, owner=owner, created_at=now, name=name)
        uploads = [Upload(owner=owner, batch=batch, filename=f.filename, size=f.size,
                          client_content_type=f.content_type, file=f.key) for f in files]
        insert_many(Upload, uploads)
        jobs = []
        for upload in uploads:
            cost = cost_estimate_for_size(upload.size)
            rate_key, rate_units = rates.rate_of(kind=Job.Kind.UNKNOWN, media_info={}, filename=upload.filename,
                                                 size=upload.size, cost_estimate=cost)
            job = Job(upload=upload, owner=owner, lane=Lane.CPU_TRANSCODE, queued_at=now,
                      scheduled_for=scheduled_for, cost_estimate=cost, rate_key=rate_key, rate_units=rate_units)
            # Until a delivery records its message's id (`<job id>@<random>`, job_start)
            job.task_id = str(job.id)
            jobs.append(job)
            # The job as accepted: once committed, a worker may move it on
            # before the caller answers, and the answer is about acceptance.
            upload.accepted_job = job
        insert_many(Job, jobs)
        dispatcher.after_commit(lambda: _enqueue_committed(jobs))
    return uploads


def _enqueue_committed(jobs: list[Job]) -> None:
    """The jobs just created, as created: not read again (one round trip of
    every claim). One canceled meanwhile is dropped by the worker that is
    offered it (job_start), as a retried duplicate is."""
    if settings.FAIRLANE_FAULT_INJECTION and settings.FAIRLANE_FAULT_KILL_WEB_AFTER_COMMIT:
        # tests/chaos: the web process dies between commit and publish; the
        # reconciler must publish these jobs from their rows (the outbox).
        log.warning("fault injection: web process %d killed after commit, before enqueue", os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
    _jobs_submit(jobs)


# Before the probe, the only thing known about a file is its size. About one
# worker second per 4 MB is the right order for phone video at our ladder;
# the dispatcher corrects each key's charge by the measured time afterwards.
BYTES_PER_COST_SECOND = 4 * 1024 * 1024


def cost_estimate_for_size(size: int) -> float:
    return max(0.05, size / BYTES_PER_COST_SECOND)


def _plan_checked(profile: Profile) -> Profile:
    """`profile` with every plan value that breaks its bounds (stored before
    they were enforced, or written around them) back at its default."""
    bad = plans.reset_invalid(profile, Profile.PLAN_FIELDS)
    if bad:
        log.warning("plan of user %s has invalid %s; the defaults are used instead", profile.user_id, ", ".join(bad))
    return profile


def fair_policies(*, user_ids: Iterable[int], lane: Lane) -> dict[int, KeyPolicy]:
    """Each user's weight, cap and rate on `lane`, for every user asked about
    (no Profile: the defaults), and their organisation's as the policy's
    group: the lane shares its worker time between organisations by their
    weights, then an organisation's between its members by theirs; caps and
    rates bind at both levels. The group is read from the membership, never
    from the request. A user in no organisation (made around the post_save
    that gives everyone one) is a group of their own. Plans are checked
    where they are edited (project/plans.py) and again here: one user's bad
    plan must not make an enqueue raise, which would also abort a
    reconciler pass for every row after it, other users' included. On
    io-notify a user without a cap of their own gets NOTIFY_USER_CAP (and
    so does an organisation: organisations.plan_on). One query, whatever
    the number of users (each member's plan read with their membership; a
    second only for users in no organisation): every submit runs it, a
    light user's claim and each ending job's notification among them."""
    ids = set(user_ids)
    io = lane is Lane.IO_NOTIFY
    policies = dict.fromkeys(ids, KeyPolicy(cap=settings.NOTIFY_USER_CAP) if io else KeyPolicy())
    members = organisations.member_plans(user_ids=ids, lane=lane, related=("user__fair_profile",))
    profiles = [p for m, _ in members.values() if (p := getattr(m.user, "fair_profile", None)) is not None]
    alone = ids - set(members)
    for p in map(_plan_checked, profiles + (list(Profile.objects.filter(user_id__in=alone)) if alone else [])):
        if io:
            rate = (p.notify_rate_per_s, float(p.notify_burst)) if p.notify_rate_per_s is not None else None
            policies[p.user_id] = KeyPolicy(weight=p.weight, cap=p.notify_cap or settings.NOTIFY_USER_CAP, rate=rate)
        else:
            policies[p.user_id] = KeyPolicy(weight=p.weight, cap=p.transcode_cap)
    for user_id, (_, group) in members.items():
        policies[user_id] = replace(policies[user_id], group=group.key, group_weight=group.weight,
                                    group_cap=group.cap, group_rate=group.rate)
    return policies


# The task that runs a job of each kind (all on the cpu-transcode lane).
EXPORT_TASK = "exports.job_run"
TRANSCODE_TASK = "transcoding.job_run"
JOB_FIELDS_FOR_DISPATCH = ("id", "owner_id", "kind", "cost_estimate", "scheduled_for")


def job_task_name(job: Job) -> str:
    return EXPORT_TASK if job.kind == Job.Kind.EXPORT else TRANSCODE_TASK


def job_time_limits(job: Job) -> dict:
    """Celery's soft and hard time limits for the job's next attempt, scaled
    to its estimated worker seconds (from the file size before the probe,
    from the media duration after it). The soft limit lets the attempt clean
    up (uploads/attempts.py); the hard one kills a child that does not."""
    soft = settings.FAIRLANE_TIME_LIMIT_BASE_S + settings.FAIRLANE_TIME_LIMIT_PER_COST_S * job.cost_estimate
    soft = min(soft, settings.FAIRLANE_TIME_LIMIT_MAX_S)
    return {"soft_time_limit": round(soft), "time_limit": round(soft + settings.FAIRLANE_TIME_LIMIT_HARD_EXTRA_S)}


def job_hand_back(job: Job, *, actual_cost: float = 0.0, delay_s: float | None = None) -> None:
    """Offer a queued job to the dispatcher again, at the front of its owner's
    backlog (dispatcher.hand_back), after `delay_s` (a retry's backoff)."""
    dispatcher.hand_back(
        job_task_name(job), [str(job.id)], task_id=str(job.id), fair_key=str(job.owner_id), cost=job.cost_estimate,
        actual_cost=actual_cost, delay_s=delay_s, options=job_time_limits(job),
        policy=fair_policies(user_ids=[job.owner_id], lane=Lane.CPU_TRANSCODE).get(job.owner_id),
    )


def jobs_enqueue(*, job_ids: Iterable[str]) -> int:
    """Hand queued jobs to the cpu-transcode lane through the fair dispatcher.
    Returns how many were new to it (the rest it already held)."""
    return _jobs_submit(list(Job.objects.filter(id__in=list(job_ids), status=Job.Status.QUEUED)
                             .only(*JOB_FIELDS_FOR_DISPATCH).order_by("created_at")))


# How many jobs one chunk of a bulk operation handles (project/pacing.py):
# a submit's call to the dispatcher, a retry's statements, a cancel's
# transaction. Each chunk is a burst of work on the host every user's
# requests share; 500 made bursts of 0.1-0.45 s (a retry's one UPDATE).
BULK_CHUNK = 250


def _jobs_submit(jobs: list[Job]) -> int:
    """Hand `jobs` to the dispatcher, BULK_CHUNK to a call, the calls
    paced (project/pacing.py): a 5,000-job retry or claim gives the host
    back between them, and the lane has each chunk's jobs before the pause."""
    policies = fair_policies(user_ids=[j.owner_id for j in jobs], lane=Lane.CPU_TRANSCODE)
    submitted = 0
    for chunk in paced(jobs, BULK_CHUNK):
        submitted += dispatcher.enqueue_many([dispatcher.Submission(
            job_task_name(job), [str(job.id)], task_id=str(job.id), fair_key=str(job.owner_id),
            cost=job.cost_estimate, policy=policies.get(job.owner_id), options=job_time_limits(job),
            due=job.scheduled_for.timestamp() if job.scheduled_for else None) for job in chunk])
    return submitted


def jobs_reconcile() -> int:
    """The outbox: re-submit every queued job the dispatcher does not hold.
    Redis lost its state, or the process died between commit and submit.
    Submission is idempotent by task id, so racing the normal path is
    harmless; jobs younger than a few seconds are left to that path."""
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    settled = db_now() - timedelta(seconds=settings.FAIR_RECONCILE_MIN_AGE_S)
    queued = Job.objects.filter(status=Job.Status.QUEUED, queued_at__lt=settled).values_list("id", flat=True)
    submitted = 0
    # In bounded pages that resume where the last pass stopped (project/passes.py).
    for page in passes.pages("jobs_reconcile", queued):
        ids = [str(job_id) for job_id in page]
        missing = [job_id for job_id, state in zip(ids, sched.known_many(ids)) if state is None]
        submitted += jobs_enqueue(job_ids=missing) if missing else 0
    return submitted


def job_lease_until(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.FAIRLANE_JOB_LEASE_S)


class JobRowBusy(Exception):
    """job_start waited FAIRLANE_JOB_START_LOCK_WAIT_MS for the job's row,
    which another transaction holds (its owner's cancel, most likely)."""


# PostgreSQL's SQLSTATE for a lock not granted within lock_timeout (or NOWAIT).
LOCK_NOT_AVAILABLE = "55P03"


def job_start(*, job_id: str, task_id: str = "") -> Job | None:
    """queued -> running, once, under a fresh lease. Returns None when another
    delivery got there first or the job is no longer runnable; the caller then
    drops the message. The new attempt number is the fencing token of every
    later write of this attempt. `task_id`, the delivering message's id,
    becomes the job's (Flower, the results admin). Times and the lease are
    the database's clock (project/dbclock.py).

    Raises JobRowBusy when another transaction has held the job's row for
    FAIRLANE_JOB_START_LOCK_WAIT_MS (PostgreSQL): a queued job's row is
    locked by its owner's cancel until the cancel's chunk commits
    (jobs_cancel), and the worker's slot, which every user's jobs wait for,
    would wait with it (bench-isolation, before both: the job-start UPDATE
    took 3.3 ms on average beside the hostile user, 0.35 ms quiet)."""
    now = db_now()
    try:
        with transaction.atomic():
            # The row locked and read, then moved on with its wait: two
            # statements (the worker's slot waits for each round trip while
            # the database host is busy). The lock wait is this
            # transaction's own (set_config's is_local): nothing to reset.
            _lock_wait_at_most(settings.FAIRLANE_JOB_START_LOCK_WAIT_MS)
            job = Job.objects.select_for_update(of=("self",)).select_related("upload").filter(id=job_id).first()
            if job is not None and job.status == Job.Status.QUEUED:
                started = {"status": Job.Status.RUNNING, "started_at": now, "attempts": job.attempts + 1,
                           "progress": 0, "live": {}, "lease_expires_at": job_lease_until(now),
                           "wait_ms": _ms_between(max(filter(None, [job.queued_at or job.created_at,
                                                                    job.scheduled_for])), now),
                           **({"task_id": task_id[:64]} if task_id else {})}
                # The status again: SQLite has no row lock (its writes are serialized).
                if not Job.objects.filter(id=job_id, status=Job.Status.QUEUED,
                                          attempts=job.attempts).update(**started):
                    job = None
                else:
                    for name, value in started.items():
                        setattr(job, name, value)
            else:
                job = None
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            raise JobRowBusy(job_id) from exc
        raise
    if job is None:
        log.info("job %s not started: not queued (duplicate delivery or finished)", job_id)
        return None
    JobAttempt.objects.create(job=job, number=job.attempts, started_at=now, worker=worker_id(), task_id=task_id[:64])
    logcontext.bind(job_id=str(job.id), user_id=job.owner_id, attempt=job.attempts)
    log.info("job started after waiting %d ms", job.wait_ms or 0)
    return job


def _lock_wait_at_most(ms: int) -> None:
    """This transaction's statements wait at most `ms` for a lock, on
    PostgreSQL; SQLite has no row locks to wait for."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{max(1, ms)}ms"])


def _this_attempt(job_id: str, attempt: int | None):
    """The job while it is running this attempt (any attempt when None)."""
    jobs = Job.objects.filter(id=job_id, status=Job.Status.RUNNING)
    return jobs if attempt is None else jobs.filter(attempts=attempt)


def job_progress_set(*, job_id: str, progress: int, attempt: int | None = None, checkpoint: dict | None = None) -> bool:
    """Record progress (and a checkpoint to resume from); False when the job
    is no longer running this attempt (an operator canceled it, a stopping
    worker handed it back, or its lease ran out and another worker took it),
    which tells the worker to stop."""
    fields = {"progress": max(0, min(100, int(progress)))}
    if checkpoint is not None:
        fields["checkpoint"] = checkpoint
    return bool(_this_attempt(job_id, attempt).update(**fields))


def job_live_record(*, job_id: str, attempt: int, live: dict, playable: bool) -> bool:
    """Record what the running attempt has stored of its video so far
    (transcoding/live.py); False, as job_progress_set, when the job is no
    longer that attempt's. `playable`: the job its owner sees (this one, or
    the parent of a chunked video's first chunk) can now be watched. The
    first time in the job's run that sets its `playable_at`, and the owner
    is told after commit (lifecycle.job_playable)."""
    with transaction.atomic():
        if not _this_attempt(job_id, attempt).update(live=live):
            return False
        if playable:
            shown = Job.objects.filter(id=job_id).values_list("parent_id", flat=True).first() or job_id
            now = db_now()
            if Job.objects.filter(id=shown, status=Job.Status.RUNNING, playable_at__isnull=True).update(
                    playable_at=now):
                owner_id = Job.objects.filter(id=shown).values_list("owner_id", flat=True).get()
                log.info("job %s playable", shown)
                event = lifecycle.JobPlayable(job_id=str(shown), owner_id=owner_id)
                dispatcher.after_commit(lambda: lifecycle.job_playable.send(event))
    return True


def job_lease_renew(*, job_id: str, attempt: int) -> bool:
    """Extend the running attempt's lease; False when it is no longer the
    job's running attempt."""
    # A job split into parts (uploads/parts.py) runs without a lease: its
    # splitting attempt's keeper, still renewing for a moment after the
    # split, must not give it one back (the sweep would then "recover" it).
    return bool(_this_attempt(job_id, attempt).filter(lease_expires_at__isnull=False).update(
        lease_expires_at=job_lease_until(db_now())))


def job_probe_record(*, job_id: str, kind: str, media_info: dict, cost_estimate: float) -> None:
    """What the probe found, and the rate its work is priced at from now
    (the probed key's units need no name or size; a kind without a key
    keeps the name's guess stored at creation)."""
    probed = rates.probed_key(kind, media_info)
    priced = {} if probed is None else {
        "rate_key": probed, "rate_units": rates.units_of(probed, media_info=media_info, size=0,
                                                         cost_estimate=cost_estimate)}
    Job.objects.filter(id=job_id).update(kind=kind, media_info=media_info, cost_estimate=cost_estimate, **priced)


def _finishing(jobs, *more: str):
    """What job_finish reads of the job it ends (and `more`)."""
    return jobs.only("started_at", "owner_id", "lane", "kind", "wait_ms", "parent_id", "part", "part_index", *more)


def job_finish(*, job_id: str, status: str, attempt: int | None = None, error_code: str = "",
               error_message: str = "", progress: int | None = None, locked: Job | None = None) -> bool:
    """queued/running -> `status` (succeeded, failed or canceled): the one
    transition that ends a job, for job_succeed, job_fail, jobs_cancel and
    the parts of a chunked job (uploads/parts.py). Only the running attempt
    `attempt` may end it when that is given. Call it inside a transaction:
    with the job it closes the open attempt's log row with the same outcome,
    moves a part's parent on (parts.part_finished), or cancels a job's
    unfinished parts and tells its owner after commit (notify_pending is the
    outbox). `error_code` and `error_message` are stored as given (the
    callers cut and clean them); `progress` only when given. Returns True
    when this call ended the job, False when it had ended already or is no
    longer that attempt's. `locked`: the job as the caller read it under
    its row lock in this transaction (_finishing's fields), not read again."""
    fields: dict = {"error_code": error_code, "error_message": error_message}
    if progress is not None:
        fields["progress"] = progress
    now = db_now()
    job = locked if locked is not None else _finishing(Job.objects.filter(id=job_id)).first()
    if job is None:
        return False
    unfinished = Job.objects.filter(id=job_id, status__in=[Job.Status.QUEUED, Job.Status.RUNNING])
    if attempt is not None:
        unfinished = _this_attempt(job_id, attempt)
    is_part = job.parent_id is not None  # the user hears about the parent only
    updated = unfinished.update(
        status=status, finished_at=now, process_ms=_ms_between(job.started_at, now), lease_expires_at=None,
        notify_pending=not is_part, **fields
    )
    if updated:
        process_ms = _ms_between(job.started_at, now)
        transaction.on_commit(lambda: metrics.observe_job(
            lane=job.lane, kind=job.kind, outcome=status,
            wait_s=None if job.wait_ms is None else job.wait_ms / 1000,
            process_s=None if process_ms is None else process_ms / 1000,
        ))
        JobAttempt.objects.filter(job_id=job_id, finished_at__isnull=True).update(
            finished_at=now, outcome=status, error_code=error_code, error_message=error_message,
        )
        if is_part:
            parts.part_finished(part=job, status=status, error_code=error_code, error_message=error_message)
        else:
            parts.parts_cancel(parent_id=job_id, message=f"The job was {status}.")
            # Its owner is told by whoever listens (notify: email, webhooks, the
            # batch's summary); notify_pending (set above) is the outbox.
            ended = lifecycle.JobFinished(job_id=job_id, owner_id=job.owner_id, status=status)
            dispatcher.after_commit(lambda: lifecycle.job_finished.send(ended))
    return bool(updated)


def job_succeed(*, job_id: str, outputs: list[OutputFile], attempt: int | None = None) -> bool:
    """running -> succeeded with its outputs, atomically; only by the running
    attempt when `attempt` is given (a worker whose lease ran out and was
    replaced must not publish)."""
    with transaction.atomic():
        job = _finishing(_this_attempt(job_id, attempt).select_for_update()).first()
        if job is None:
            return False
        Output.objects.bulk_create(Output(job_id=job_id, name=out.name, file=out.path, content_type=out.content_type,
                                          size=out.size, metadata=out.metadata) for out in outputs)
        return job_finish(job_id=job_id, status=Job.Status.SUCCEEDED, attempt=attempt, progress=100, locked=job)


def job_fail(*, job_id: str, code: str, message: str, attempt: int | None = None) -> bool:
    """queued/running -> failed with a code and a human message (only from
    the running `attempt` when given). The message is shown to the job's
    owner, so whatever names the server is taken out (the log keeps it)."""
    with transaction.atomic():
        return job_finish(job_id=job_id, status=Job.Status.FAILED, attempt=attempt, error_code=code[:64],
                          error_message=public_message(message))


def jobs_retry(*, job_ids: Iterable[str], actor: AbstractBaseUser) -> list[Job]:
    """failed/canceled -> queued, through the fair dispatcher like any new job
    (no queue jumping); the next run counts as a new attempt, with a fresh
    budget of FAIRLANE_MAX_ATTEMPTS (failures before the retry do not count).
    Each owner's jobs stay within their plan's max_queued_jobs, or none is
    retried (429). Returns the jobs that were retried, as they were (what
    the dispatcher and this need of them read: JOB_FIELDS_FOR_DISPATCH,
    status, attempts); others are left alone."""
    now = db_now()
    # A part is not retried on its own once it has ended: its parent
    # has ended with it, and retrying the parent splits it again.
    retryable = Job.objects.filter(id__in=list(job_ids), status__in=[Job.Status.FAILED, Job.Status.CANCELED],
                                   parent__isnull=True)
    with transaction.atomic():
        # The owners first, then their jobs: the order every creator of jobs locks in.
        limits.owner_lock(retryable.order_by().values_list("owner_id", flat=True).distinct())
        # What the retry needs of them, not whole rows (5,000 of them, again
        # and again, were the web's time of a heavy user's retries).
        jobs = list(retryable.select_for_update().order_by("created_at").only(
            *JOB_FIELDS_FOR_DISPATCH, "status", "attempts", "attempt_budget_from", "checkpoint"))
        limits.queued_jobs_check(adding=Counter(job.owner_id for job in jobs))
        ids = [job.id for job in jobs]
        # Their objects go once the rows are gone (after commit), and only
        # the attempts made so far: the retry's own attempt may be uploading
        # by the time this runs. Those before the last retry went with it.
        stale = [(str(job.id), range(job.attempt_budget_from + 1, job.attempts + 1), job.checkpoint) for job in jobs]
        transaction.on_commit(lambda: _job_objects_delete(stale))
        part_prefixes: list[str] = []
        # BULK_CHUNK jobs to a statement, paced in this transaction: it holds
        # only the owner's row and their ended jobs, which no worker waits for.
        for chunk in paced(ids, BULK_CHUNK, own_transaction=True):
            Output.objects.filter(job_id__in=chunk).delete()
            # The parts of a chunked job (uploads/parts.py) go: the retry probes
            # and splits again. Their objects hold the old outputs.
            part_prefixes += [media.job_prefix(job_id=part) for part in parts.part_job_ids(parent_ids=chunk)]
            Job.objects.filter(parent_id__in=chunk).delete()
            # A fresh attempt budget (FAIRLANE_MAX_ATTEMPTS counts from here);
            # the attempt log keeps the history.
            Job.objects.filter(id__in=chunk).update(
                status=Job.Status.QUEUED, queued_at=now, progress=0, error_code="", error_message="",
                started_at=None, finished_at=None, wait_ms=None, process_ms=None, checkpoint={},
                notify_pending=False, attempt_budget_from=F("attempts"), live={}, playable_at=None,
            )
        transaction.on_commit(lambda: media_delete(prefixes=part_prefixes))
        dispatcher.after_commit(lambda: _jobs_submit(jobs))  # as read: not read again
    log.info("%s retried %d job(s): %s", actor, len(ids), [str(i) for i in ids[:20]])
    return jobs


def _job_objects_delete(jobs: list[tuple[str, range, dict]]) -> None:
    """Delete the stored outputs of the given attempts of each job (one
    listing of the store each), then announce the restart (exports drops an
    export's unfinished upload), logging rather than raising: the rows are
    gone already, and a leftover object is an orphan, not an error."""
    for job_id, numbers, checkpoint in jobs:
        try:
            for number in numbers:
                media.delete_prefix(media.outputs_prefix(job_id=job_id, attempt=number))
        except Exception:
            log.exception("could not delete the stored outputs of job %s", job_id)
            continue
        lifecycle.job_restarted.send(lifecycle.JobRestarted(job_id=job_id, checkpoint=checkpoint))


def jobs_cancel(*, job_ids: Iterable[str], actor: AbstractBaseUser) -> list[Job]:
    """queued/running -> canceled. A held job leaves its user's backlog at
    once; a released one is dropped by its guarded start; a running one stops
    at its next progress report (its ffmpeg process group is killed and its
    work directory removed). Returns the jobs that were canceled.

    What a batch mostly holds, jobs waiting that never started and have no
    parts, ends in a few statements for all of them (`_waiting_cancel`),
    whatever their number; the rest (running, a chunked video's, a part)
    end one by one through job_finish. The dispatcher hears after each
    chunk's commit, in one call.

    BULK_CHUNK jobs to a transaction: a transaction holds the rows it
    cancels until it commits, and a worker starting or finishing one of
    them waits for it (its slot, which every user's next job waits for,
    with it). 5,000 rows in one transaction held them for as long as the
    whole cancel took. The jobs of one call share their end time, so their
    endings are still one announcement. The chunks are paced
    (project/pacing.py): a batch's cancel gives the host back to other
    users' requests between them."""
    message = f"Canceled by {actor}."
    ids, now = list(job_ids), db_now()
    canceled: list[Job] = []
    for chunk in paced(ids, BULK_CHUNK):
        canceled += _jobs_cancel_chunk(chunk, message, now)
    log.info("%s canceled %d job(s): %s", actor, len(canceled), [str(job.id) for job in canceled[:20]])
    return canceled


def _jobs_cancel_chunk(job_ids: list, message: str, now: datetime) -> list[Job]:
    with transaction.atomic():
        # What the cancel and job_finish need of them, not whole rows; locked, so not read again.
        jobs = list(_finishing(Job.objects.select_for_update().filter(id__in=job_ids, status__in=Job.UNFINISHED),
                               "status"))
        waiting = {job.id for job in jobs
                   if job.status == Job.Status.QUEUED and job.started_at is None and job.parent_id is None}
        waiting -= set(Job.objects.filter(parent_id__in=waiting).values_list("parent_id", flat=True))
        canceled = _waiting_cancel([job for job in jobs if job.id in waiting], message, now)
        for job in jobs:
            if job.id not in waiting and job_finish(job_id=str(job.id), status=Job.Status.CANCELED,
                                                    error_code="canceled", error_message=message, locked=job):
                canceled.append(job)
        by_task: dict[str, list[str]] = {}
        for job in canceled:
            by_task.setdefault(job_task_name(job), []).append(str(job.id))
        # A released job that could not be withdrawn is dropped by its guarded start.
        dispatcher.after_commit(lambda: [dispatcher.cancel(task, task_ids) for task, task_ids in by_task.items()])
    return canceled


def _waiting_cancel(jobs: list[Job], message: str, now: datetime) -> list[Job]:
    """job_finish's cancel for jobs (locked by the caller) that are queued,
    never started and have no parts: one UPDATE of the jobs, one of their
    open attempts (a job a reap put back has one), and after commit their
    metrics and one announcement of them all (lifecycle.send_many), ended
    at `now`."""
    if not jobs:
        return []
    ids = [job.id for job in jobs]
    Job.objects.filter(id__in=ids).update(
        status=Job.Status.CANCELED, finished_at=now, process_ms=None, lease_expires_at=None, notify_pending=True,
        error_code="canceled", error_message=message)
    JobAttempt.objects.filter(job_id__in=ids, finished_at__isnull=True).update(
        finished_at=now, outcome=Job.Status.CANCELED, error_code="canceled", error_message=message)

    def announce() -> None:
        metrics.observe_jobs(metrics.JobEnded(job.lane, job.kind, Job.Status.CANCELED,
                                              None if job.wait_ms is None else job.wait_ms / 1000, None)
                             for job in jobs)
        lifecycle.job_finished.send_many([lifecycle.JobFinished(job_id=str(job.id), owner_id=job.owner_id,
                                                                status=Job.Status.CANCELED, finished_at=now)
                                          for job in jobs])

    dispatcher.after_commit(announce)
    return list(jobs)


def batch_default_name(*, filenames: list[str], at: datetime) -> str:
    """A batch's name when none is given: its first file's ("clip.mp4 and
    11 more" for several), or its date when it has no named file."""
    names = [name for name in filenames if name.strip()]
    if not names:
        return Batch.dated_name(at)
    more = f" and {len(filenames) - 1:,} more" if len(filenames) > 1 else ""
    return names[0][:Batch.NAME_MAX_LENGTH - len(more)] + more


def batch_name_clean(name: str | None) -> str:
    """A name as given (the API's `batch_name`, a rename): one line, at
    most NAME_MAX_LENGTH characters; blank means none."""
    line = " ".join((name or "").split())
    if len(line) > Batch.NAME_MAX_LENGTH:
        raise ApplicationError("invalid_name", f"A batch's name is at most {Batch.NAME_MAX_LENGTH} characters.")
    return line


# --- What users do to their own batches and files (the API) ---------------------------
# Callers have looked the objects up from the user (selectors: another user's
# are a 404), so these take objects, not ids.

def _batch_jobs(batch: Batch):
    """The batch's jobs: one per upload, and its exports."""
    return Job.objects.filter(Q(upload__batch=batch.id) | Q(kind=Job.Kind.EXPORT, batch=batch.id), owner=batch.owner_id)


def batch_rename(*, batch: Batch, name: str) -> Batch:
    """Give the batch a name people choose (1 to NAME_MAX_LENGTH characters, one line)."""
    name = batch_name_clean(name)
    if not name:
        raise ApplicationError("invalid_name", "A batch's name cannot be blank.")
    Batch.objects.filter(id=batch.id).update(name=name)
    batch.name = name
    return batch


def batch_cancel(*, batch: Batch, actor: AbstractBaseUser) -> list[Job]:
    """Cancel every queued or running job of the batch (its exports too),
    with the operator's semantics (jobs_cancel). Returns those canceled."""
    ids = list(_batch_jobs(batch).filter(status__in=Job.UNFINISHED).values_list("id", flat=True))
    return jobs_cancel(job_ids=ids, actor=actor)


def batch_retry(*, batch: Batch, actor: AbstractBaseUser) -> list[Job]:
    """Retry every failed or canceled job of the batch (jobs_retry: through
    the fair dispatcher, a fresh attempt). Returns those retried."""
    ids = list(_batch_jobs(batch).filter(status__in=[Job.Status.FAILED, Job.Status.CANCELED])
               .values_list("id", flat=True))
    return jobs_retry(job_ids=ids, actor=actor)


def uploads_delete(*, uploads: Iterable[Upload], actor: AbstractBaseUser) -> int:
    """Delete uploads with everything made from them: their jobs and outputs,
    the exports of their batches (a batch's ZIP holds copies of its outputs,
    so it goes even when only one upload does), the batch itself once it has
    no upload left, and every stored file of all of these.

    Unfinished jobs are canceled first, in the same transaction (jobs_cancel:
    a held job leaves the backlog, a released one is dropped at its start, a
    running one stops at its next progress report and removes the files of
    its unpublished attempt), so deleting never waits for a worker and
    nothing keeps working for a deleted upload. Files are deleted after the
    rows commit: a failure can leave an unreferenced file (logged), never a
    row whose file is gone. Returns how many uploads were deleted."""
    uploads = list(uploads)
    batch_ids = {upload.batch for upload in uploads}
    jobs = list(Job.objects.filter(Q(upload__in=uploads) | Q(kind=Job.Kind.EXPORT, batch__in=batch_ids),
                                   owner__in={upload.owner_id for upload in uploads}))
    with transaction.atomic():
        _jobs_delete(jobs, actor)
        Upload.objects.filter(id__in=[upload.id for upload in uploads]).delete()
        Batch.objects.filter(id__in=batch_ids).exclude(
            id__in=Upload.objects.filter(batch__in=batch_ids).values("batch")).delete()
        files = [upload.file.name for upload in uploads if upload.file.name]
        transaction.on_commit(lambda: media_delete(files=files))
    log.info("%s deleted %d upload(s) and %d job(s)", actor, len(uploads), len(jobs))
    return len(uploads)


def export_delete(*, job: Job, actor: AbstractBaseUser) -> None:
    """Delete an export job and its ZIP (canceled first when unfinished)."""
    with transaction.atomic():
        _jobs_delete([job], actor)


def _jobs_delete(jobs: list[Job], actor: AbstractBaseUser) -> None:
    """Cancel what is unfinished, delete the rows (outputs and attempts go
    with them) and, after commit, every folder the jobs published into."""
    jobs_cancel(job_ids=[job.id for job in jobs if job.status in Job.UNFINISHED], actor=actor)
    # Every attempt's outputs (outputs/<job>/, including attempts replaced or
    # retried since) and an export's ZIP and checkpoints (exports/<job>/).
    prefixes = sorted({p for job in jobs for p in (media.job_prefix(job_id=str(job.id)),
                                                   media.exports_prefix(job_id=str(job.id)))}
                      | {media.job_prefix(job_id=part) for part in parts.part_job_ids(parent_ids=[j.id for j in jobs])})
    Job.objects.filter(id__in=[job.id for job in jobs]).delete()
    transaction.on_commit(lambda: media_delete(prefixes=prefixes))


def media_delete(*, files: Iterable[str] = (), prefixes: Iterable[str] = ()) -> list[str]:
    """Delete stored objects, and every object under key prefixes, through
    the storage seam (either backend). Best effort after the rows are gone:
    returns (and logs) what could not be deleted instead of raising into a
    request that has already succeeded."""
    failed: list[str] = []
    for key, delete in [*((f, media.delete) for f in files), *((p, media.delete_prefix) for p in prefixes)]:
        try:
            delete(key)
        except Exception:  # noqa: BLE001 - any backend's error: keep going, report below
            failed.append(key)
    if failed:
        log.error("could not delete %d stored file(s) or folder(s): %s", len(failed), failed[:20])
    return failed
