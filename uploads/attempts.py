"""One attempt at a job, and everything that can end an attempt badly.

Delivery is at least once (acks_late), and workers die, stall and get
deployed away, so an attempt is never trusted to end well:

- It starts only through the guarded claim (services.job_start), which
  numbers it; that number fences every later write of the attempt, so a
  worker that was presumed dead and replaced cannot publish or fail the job.
- It holds a lease in the database, renewed by a thread every third of
  FAIRLANE_JOB_LEASE_S. A worker that dies or stalls (SIGKILL, OOM, power
  loss, SIGSTOP) stops renewing; `jobs_recover_expired`, run by every
  worker's ticker, offers its job again within lease + sweep interval.
- A prefork child that dies is seen at once by its parent (Celery's
  task_failure with WorkerLostError, dispatcher/worker.py), which calls
  `job_worker_lost` instead of waiting for the lease.
- Transient errors (database, Redis, storage, TransientError) send the job
  round again after an exponential backoff with jitter, through the fair
  dispatcher at the front of its owner's backlog; permanent ones (JobError)
  fail it at once. Attempts that ended lost or retried count toward
  FAIRLANE_MAX_ATTEMPTS, after which the job fails with the last error:
  a file that kills its worker every time ends `resource_limit` instead of
  looping forever (Celery's reject_on_worker_lost would requeue it forever).
- A worker that is stopping (SIGTERM) takes no new job and hands back the
  ones it was given but had not started; after its grace period it hands
  back running ones too (`job_interrupt`), which notice at their next
  progress write and clean up. Neither counts as a failed attempt.

Every path here ends in exactly one of: the job's terminal state, or the
job queued and offered to the dispatcher again (services.job_hand_back).
"""
from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction

import dispatcher
import media
from project import metrics, passes
from project.dbclock import Now, db_now
from project.lanes import Lane
from uploads import parts, services
from uploads.errors import JobError, TransientError, public_message
from uploads.models import Job, JobAttempt

log = logging.getLogger(__name__)

# Worth another attempt: the same work may well succeed in a moment.
TRANSIENT_ERRORS = (TransientError, OperationalError, InterfaceError, redis.ConnectionError, redis.TimeoutError,
                    OSError)
# Attempt outcomes that count toward FAIRLANE_MAX_ATTEMPTS. "interrupted"
# (a deploy) does not: a job must not fail because workers were restarted.
FAILED_OUTCOMES = ("retry", "lost")


class JobFailed(Exception):
    """Raised through a job's task (by job_attempt_run) after its delivery
    failed the job (the failure is recorded by then), with the job's error
    code and message: Celery stores the task as FAILURE, so Flower and
    the results admin say what happened to the job. It is a report, not a
    crash: the tasks declare it in `throws` (logged without a traceback),
    the message is acknowledged (acks_late acknowledges failures), the
    dispatcher's postrun reports the finish as for any other end, and
    nothing retries it (no autoretry; the lost-handler takes only
    WorkerLostError and TimeLimitExceeded)."""


def _fail(job_id: str, number: int, *, code: str, message: str) -> None:
    """Fail the job from its running attempt `number`. Raises JobFailed when
    that took effect, with the code and message as job_fail stores them;
    returns when the attempt no longer owned the job (nothing changed)."""
    if services.job_fail(job_id=job_id, code=code, message=message, attempt=number):
        raise JobFailed(f"{code[:64]}: {public_message(message)}")


class AttemptLost(Exception):
    """The job is no longer this attempt's: canceled, handed back by a
    stopping worker, or taken over after this attempt's lease ran out."""


@dataclass
class Attempt:
    """What the work function of a job gets: the job, its attempt number,
    and the one way to report progress (which is also where it learns that
    it must stop)."""

    job: Job
    number: int
    _lost: threading.Event = field(default_factory=threading.Event)

    @property
    def outputs_prefix(self) -> str:
        """Where this attempt stores its outputs: one prefix per attempt, so a
        replaced attempt that still finishes can never overwrite the live
        one's objects."""
        return media.outputs_prefix(job_id=str(self.job.id), attempt=self.number)

    def progress(self, percent: int, *, checkpoint: dict | None = None) -> None:
        """Record progress (and a checkpoint to resume from); raises
        AttemptLost when the job is no longer this attempt's."""
        if self._lost.is_set() or not services.job_progress_set(
                job_id=str(self.job.id), progress=percent, attempt=self.number, checkpoint=checkpoint):
            raise AttemptLost(str(self.job.id))
        if self.job.parent_id:  # a part of a chunked job: the user sees its parent's progress
            parts.parent_progress_refresh(parent_id=str(self.job.parent_id))


# What an attempt made, or None when it handed its job to parts of their
# own (uploads/parts.py): nothing to publish, the parts end the job.
Work = Callable[[Attempt], list[services.OutputFile] | None]


def retry_delay_s(failures: int) -> float:
    """Exponential backoff with jitter: half of base * 2^(n-1) fixed, half
    random, so retries of many jobs that failed together spread out."""
    ceiling = min(settings.FAIRLANE_RETRY_MAX_DELAY_S, settings.FAIRLANE_RETRY_BASE_DELAY_S * 2 ** max(0, failures - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _lease_keeper(job_id: str, number: int, lost: threading.Event, done: threading.Event) -> None:
    """Renew the attempt's lease until `done`; set `lost` when it is no
    longer the job's running attempt. Its own database connection, closed
    on the way out (threads do not share Django connections)."""
    every = settings.FAIRLANE_JOB_LEASE_S / 3
    try:
        while not done.wait(every):
            try:
                if not services.job_lease_renew(job_id=job_id, attempt=number):
                    lost.set()
                    return
            except (OperationalError, InterfaceError):  # database blip: the next round tries again
                log.warning("could not renew the lease of job %s attempt %d", job_id, number)
                close_old_connections()
    finally:
        connection.close()


def _elapsed_s(job: Job) -> float:
    return max(0.0, (db_now() - job.started_at).total_seconds()) if job.started_at else 0.0


def _this_budget(job: Job):
    """The attempts that count toward FAIRLANE_MAX_ATTEMPTS: those since the
    job's last retry by a person (Job.attempt_budget_from)."""
    return JobAttempt.objects.filter(job_id=job.id, number__gt=job.attempt_budget_from)


def _requeue_or_give_up(job: Job, number: int, *, outcome: str, code: str, message: str,
                        exhausted_code: str | None = None, min_delay_s: float = 0.0) -> bool:
    """End attempt `number` as `outcome` and queue the job again after a
    backoff (at least `min_delay_s`); or, when it has used up FAIRLANE_MAX_ATTEMPTS, fail it with the
    last error. Returns True when the job was queued again; raises JobFailed
    when it failed the job. Only the job's current attempt can do either
    (the attempt number fences)."""
    job_id = str(job.id)
    failures = _this_budget(job).filter(outcome__in=FAILED_OUTCOMES).count() + 1
    if failures >= settings.FAIRLANE_MAX_ATTEMPTS:
        log.warning("job %s failed for good after %d attempts: %s", job_id, failures, code)
        _fail(job_id, number, code=exhausted_code or code, message=f"{message} Gave up after {failures} attempts.")
        return False
    return _requeue(job, number, outcome=outcome, code=code, message=message,
                    delay_s=max(retry_delay_s(failures), min_delay_s))


def _requeue(job: Job, number: int, *, outcome: str, code: str = "", message: str = "", delay_s: float = 0.0) -> bool:
    job_id = str(job.id)
    now = db_now()
    actual_cost = _elapsed_s(job)
    with transaction.atomic():
        requeued = Job.objects.filter(id=job_id, status=Job.Status.RUNNING, attempts=number).update(
            status=Job.Status.QUEUED, queued_at=now, progress=0, lease_expires_at=None)
        if not requeued:
            return False
        JobAttempt.objects.filter(job_id=job_id, number=number, finished_at__isnull=True).update(
            finished_at=now, outcome=outcome, error_code=code[:64], error_message=message)
        delay = delay_s if delay_s > 0 else None
        dispatcher.after_commit(lambda: services.job_hand_back(job, actual_cost=actual_cost, delay_s=delay))
    metrics.count_event(lane=Lane.CPU_TRANSCODE, event=outcome)
    log.info("job %s attempt %d %s (%s); offered again in %.1f s", job_id, number, outcome, code or "-", delay_s)
    return True


def _still_owed_a_run(job_id: str, task_id: str) -> str | None:
    """After this delivery let go of a job: HANDED_BACK when the job is queued
    or running elsewhere (the scheduler still owes it a run, so this delivery
    must not report a finish), None when it is over (canceled, finished).
    Raises JobFailed when the job failed on this delivery's message's run:
    the lease sweep gave up on it while this delivery stalled, or this is a
    second delivery of the message whose run failed it."""
    job = Job.objects.filter(id=job_id).only(*services.JOB_FIELDS_FOR_DISPATCH, "status", "task_id", "error_code",
                                             "error_message").first()
    if job is not None and job.status == Job.Status.FAILED and job.task_id == task_id[:64]:
        raise JobFailed(f"{job.error_code}: {job.error_message}")
    if job is not None and job.status == Job.Status.RUNNING and Job.objects.filter(parent_id=job.id).exists():
        # A long video's parent once split: its parts are jobs of their own and
        # carry its work, so no delivery of the parent is owed a run. (Its
        # first part runs in the splitting delivery's slot: when that host
        # vanishes, the parent's lease runs out and its message comes back;
        # handed back, it would come back every lease, holding a slot of the
        # window its own parts wait for.)
        return None
    if job is not None and job.status == Job.Status.QUEUED:
        # Queued again while this delivery had it (canceled and retried while
        # it ran, or handed back by a stopping worker): the dispatcher may
        # still count it as running here, and would offer it again only when
        # this delivery's lease runs out. Hand it back now; if it was handed
        # back already, this at most releases a duplicate message, which the
        # guarded start drops.
        services.job_hand_back(job)
    return dispatcher.HANDED_BACK if job is not None and job.status in (Job.Status.QUEUED, Job.Status.RUNNING) \
        else None


# A job whose row another transaction held at its start is offered again after
# this: offered at once, it would be released again before the holder (its
# owner's cancel) commits, and the slot would wait on the same row again.
BUSY_ROW_DELAY_S = 1.0


def _dropped(job_id: str, task_id: str) -> str | None:
    """A delivery of a job that is running elsewhere or already over: Celery
    delivers at least once, so this is expected now and then; it is logged
    (services.job_start) and counted, and the message is acknowledged."""
    metrics.count_event(lane=Lane.CPU_TRANSCODE, event="duplicate_delivery")
    return _still_owed_a_run(job_id, task_id)


def job_attempt_run(*, job_id: str, hostname: str, soft_limit_s: float | None, work: Work,
                    task_id: str = "") -> str | None:
    """Run one delivery of a job: claim it, keep its lease, run `work`,
    publish or fail or retry. `task_id`: the delivering message's own id
    (recorded with the attempt). Returns dispatcher.HANDED_BACK when the job
    is owed another run (the caller's task returns it, see dispatcher/worker),
    else None; raises JobFailed when this delivery failed the job, so that
    its task reports FAILURE. Called without a task_id (not a Celery
    delivery: tests, tools), a failure returns None like any other end."""
    try:
        return _deliver(job_id, hostname, soft_limit_s, work, task_id)
    except JobFailed:
        if task_id:
            raise
        return None


def _deliver(job_id: str, hostname: str, soft_limit_s: float | None, work: Work, task_id: str) -> str | None:
    if hostname and dispatcher.is_draining(hostname) and _given_back(job_id, f"worker {hostname} is stopping"):
        return dispatcher.HANDED_BACK
    try:
        job = services.job_start(job_id=job_id, task_id=task_id)
    except services.JobRowBusy:
        # Its row is being changed (its owner's cancel, most likely): the slot takes the
        # next job, and this one, offered again a little later, is found canceled, or runs.
        if _given_back(job_id, "its row is locked by another transaction", delay_s=BUSY_ROW_DELAY_S):
            return dispatcher.HANDED_BACK
        job = None
    if job is None:
        return _dropped(job_id, task_id)
    attempt = Attempt(job=job, number=job.attempts)
    done = threading.Event()
    keeper = threading.Thread(target=_lease_keeper, args=(job_id, attempt.number, attempt._lost, done),
                              name=f"lease-{job_id}", daemon=True)
    keeper.start()
    try:
        return _run(job, attempt, soft_limit_s, work, task_id)
    finally:
        done.set()
        keeper.join(timeout=5)


def _given_back(job_id: str, why: str, *, delay_s: float | None = None) -> bool:
    """Gives the job back to the dispatcher untouched if it is queued, to be
    offered again after `delay_s`."""
    job = Job.objects.filter(id=job_id, status=Job.Status.QUEUED).first()
    if job is None:
        return False
    services.job_hand_back(job, delay_s=delay_s)
    log.info("job %s given back untouched: %s", job_id, why)
    return True


def _run(job: Job, attempt: Attempt, soft_limit_s: float | None, work: Work, task_id: str) -> str | None:
    job_id, number = str(job.id), attempt.number
    published = False
    try:
        outputs = work(attempt)
        if outputs is None:
            return None
        published = services.job_succeed(job_id=job_id, outputs=outputs, attempt=number)
        if not published:
            log.info("job %s attempt %d finished but no longer owns the job; outputs discarded", job_id, number)
            return _still_owed_a_run(job_id, task_id)
        return None
    except JobFailed:
        raise  # this delivery's report of the job's failure (above), not an error of the work
    except AttemptLost:
        log.info("job %s attempt %d stopped: the job is no longer this attempt's", job_id, number)
        return _still_owed_a_run(job_id, task_id)
    except JobError as exc:
        log.info("job %s failed: %s: %s", job_id, exc.code, exc.message)
        _fail(job_id, number, code=exc.code, message=exc.message)
        return None
    except SoftTimeLimitExceeded:
        return _on_soft_time_limit(job_id, number, soft_limit_s)
    except TRANSIENT_ERRORS as exc:
        log.warning("job %s attempt %d hit a transient error: %r", job_id, number, exc)
        message = f"A temporary problem interrupted processing ({type(exc).__name__}); it will be retried."
        if not connection.in_atomic_block:  # a dead database connection is replaced, not reused
            close_old_connections()
        # A store outage is waited out here, not by the store's client: its
        # retries inside each call stop once botocore's retry quota (about 35
        # retries per process) is spent, and from then on every call fails at
        # once, so attempts a short backoff apart would spend the job's whole
        # budget within one restart of the store.
        floor = settings.FAIRLANE_STORAGE_RETRY_MIN_S if isinstance(exc, media.StorageUnavailable) else 0.0
        requeued = _requeue_or_give_up(job, number, outcome="retry", code="transient_error", message=message,
                                       min_delay_s=floor)
        return dispatcher.HANDED_BACK if requeued else None
    except Exception:
        # A bug, not the user's file: fail the job so it does not sit in
        # `running` forever, and keep the traceback in the log.
        log.exception("job %s failed with an internal error", job_id)
        _fail(job_id, number, code="internal_error",
              message="Processing failed because of an internal error; it has been logged.")
        return None
    finally:
        _outputs_tidy(job_id, attempt, published)


def _outputs_tidy(job_id: str, attempt: Attempt, published: bool) -> None:
    """An attempt that did not publish deletes what it stored. The one that
    did deletes what earlier attempts left (a process killed after
    uploading, before publishing, cannot clean up after itself); a replaced
    attempt still running cleans up its own when it stops. A failure here
    leaves orphans, never an error in the job."""
    try:
        if published:
            media.delete_prefix(media.job_prefix(job_id=job_id), keep=attempt.outputs_prefix)
        else:
            media.delete_prefix(attempt.outputs_prefix)
    except Exception:
        log.exception("job %s attempt %d: could not delete stored objects", job_id, attempt.number)


def _on_soft_time_limit(job_id: str, number: int, soft_limit_s: float | None) -> str | None:
    """The policy for a soft time limit: retry when the probe has since shown
    the job to be bigger than the estimate its limit came from (the next
    attempt gets a limit from the better estimate); otherwise fail."""
    job = Job.objects.get(id=job_id)
    limit = int(soft_limit_s or 0)
    message = f"Processing took longer than its time limit ({limit} s) and was stopped."
    if soft_limit_s and services.job_time_limits(job)["soft_time_limit"] > soft_limit_s * 1.2:
        if _requeue_or_give_up(job, number, outcome="retry", code="timeout", message=message):
            return dispatcher.HANDED_BACK
        return None
    _fail(job_id, number, code="timeout", message=message)
    return None


def _attempt_worker(job: Job) -> tuple[str, int | None]:
    """(host, pid) of the process that started the job's current attempt."""
    worker = JobAttempt.objects.filter(job=job, number=job.attempts).values_list("worker", flat=True).first() or ""
    host, _, pid = worker.rpartition(":")
    return host, int(pid) if pid.isdigit() else None


def _ran_here(job: Job) -> bool:
    """Whether the job's running attempt was started by a process of this host."""
    return _attempt_worker(job)[0] == settings.FAIRLANE_HOST_ID


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _crashed_here(job: Job) -> bool:
    """The attempt's process was on this host and is gone: it crashed (or was
    killed), as opposed to a host that vanished or a process that stalled."""
    host, pid = _attempt_worker(job)
    return host == settings.FAIRLANE_HOST_ID and pid is not None and not _pid_alive(pid)


def _why_expired(job: Job) -> str:
    """Why a running attempt's lease ran out, as its host tells it
    (dispatcher/hosts.py): "lost" (its process died on a live host: a
    crash), "host_gone" (its host's registration expired: the host vanished
    or was cut off), or "expired" (its process is still there: stalled)."""
    host, pid = _attempt_worker(job)
    if host == settings.FAIRLANE_HOST_ID:
        return "lost" if _crashed_here(job) else "expired"
    processes = dispatcher.host_processes(host)
    if processes is None:
        return "host_gone"
    return "expired" if pid in processes else "lost"


def job_worker_lost(*, job_id: str, reason: str) -> None:
    """Called in a prefork worker's main process when the child running
    `job_id` died (reason "lost": SIGKILL, OOM, a crash) or was killed at its
    hard time limit ("timeout"). Celery has acknowledged the message (we run
    with reject_on_worker_lost off: the attempt count, not Celery, decides
    whether the job runs again). The dead child's scratch folder goes now,
    not at the next worker start."""
    media.scratch_sweep()
    job = Job.objects.filter(id=job_id).first()
    if job is None or job.status in Job.TERMINAL:
        dispatcher.finish(services.job_task_name(job) if job else services.TRANSCODE_TASK, job_id)
        return
    if job.status == Job.Status.QUEUED:  # the child died before it claimed the job
        services.job_hand_back(job)
        return
    if job.lease_expires_at is None:
        # A job that has split runs without a lease (uploads/parts.py), and
        # its delivery went on to run its first chunk in the same child
        # (transcoding/services.py): the part is what the crash took, not
        # the job, which its parts end. The delivery's message is done.
        for part in Job.objects.filter(parent_id=job.id, status=Job.Status.RUNNING):
            if _crashed_here(part):
                _abandon(part, reason)
        dispatcher.finish(services.job_task_name(job), str(job.id))
        return
    if not _crashed_here(job):
        return  # the running attempt is another, live process's
    _abandon(job, reason)


# Attempt error codes: a crash of the attempt's own process, and a lease that
# ran out with nothing to tell why (its host vanished, or it stalled).
# Attempt error codes: a crash of the attempt's own process, a lease that
# ran out on a live process (stalled), and a host that vanished with it.
CRASHED, EXPIRED, HOST_LOST = "worker_lost", "lease_expired", "host_lost"
LOST_MESSAGES = {
    CRASHED: "The worker processing this file stopped unexpectedly.",
    EXPIRED: "The worker processing this file stopped responding.",
    HOST_LOST: "The machine processing this file was lost; the file is processed again elsewhere.",
}


def _abandon(job: Job, reason: str) -> None:
    """The running attempt's process is gone (or presumed gone)."""
    number = job.attempts
    if reason == "timeout":
        services.job_fail(job_id=str(job.id), code="timeout", attempt=number,
                          message="Processing passed its hard time limit and was killed.")
        dispatcher.finish(services.job_task_name(job), str(job.id))
        return
    if reason == "expired":
        # The sweep found the lease run out: ask the attempt's host why (the
        # prefork parent does not always report a child that dies at once:
        # billiard drops a job whose acknowledgement it had not read yet).
        reason = _why_expired(job)
    code = {"lost": CRASHED, "host_gone": HOST_LOST}.get(reason, EXPIRED)
    message = LOST_MESSAGES[code]
    # A file that has crashed its worker before is the likely cause: it is a
    # resource problem (memory, a decoder crash), not bad luck with hosts. A
    # lost host or a stall is not the file's doing.
    crashed = reason == "lost" or _this_budget(job).filter(error_code=CRASHED).exists()
    exhausted = "resource_limit" if crashed else CRASHED
    try:
        requeued = _requeue_or_give_up(job, number, outcome="lost", code=code, message=message,
                                       exhausted_code=exhausted)
    except JobFailed:  # failed for good; no delivery here to report it to
        requeued = False
    if not requeued:
        dispatcher.finish(services.job_task_name(job), str(job.id))


def jobs_recover_expired() -> int:
    """Offer again (or fail, after FAIRLANE_MAX_ATTEMPTS) every running job
    whose lease has run out: its worker died, lost its host, or stalled.
    Run by every worker's ticker (dispatcher/worker.py) under a lock."""
    expired = Job.objects.filter(status=Job.Status.RUNNING, lease_expires_at__lt=Now())  # the database's clock
    count = 0
    # At most a page per pass: each one leaves the set it came from, and the
    # next pass (a few seconds on) takes the next page (project/passes.py).
    for job in expired.order_by("lease_expires_at")[:passes.BATCH]:
        log.warning("job %s attempt %d: lease expired at %s; its worker is presumed dead",
                    job.id, job.attempts, job.lease_expires_at)
        _abandon(job, "expired")
        count += 1
    return count


def job_interrupt(*, job_id: str) -> bool:
    """A stopping worker's grace period is over: hand the job it is running
    back to the front of its owner's backlog (not failed, not counted as a
    failed attempt). The child notices at its next progress write, stops and
    cleans up. Returns True when the job was handed back."""
    job = Job.objects.filter(id=job_id, status=Job.Status.RUNNING).first()
    if job is None or not _ran_here(job):
        return False
    return _requeue(job, job.attempts, outcome="interrupted", code="interrupted",
                    message="The worker was stopping; the job was handed back.")
