"""Writes: events, their deliveries, and every try at a delivery.

Flow. A job that ends is announced on commit (uploads.lifecycle's
job_finished, received by `job_finished_receive`, connected in
notify/apps.py): `job_finished_notify` enqueues `notify.job_finished`
through the fair dispatcher, charged to the job's owner. That task records
the job's event if any channel of the owner wants it, and, once every job of
the upload batch has ended, the batch's one summary (`Event.key` is unique,
so two jobs ending at once still make one). Each event gets a Delivery per
target (the owner's email, each subscribed endpoint), and each delivery's try
is its own `notify.deliver` task, again through the fair lane: one user's
10,000 deliveries queue behind each other, not in front of anyone else's.

Outboxes. Every submit happens after commit and may find Redis down; the
rows say what is owed, and reconcilers (run by the workers every
FAIR_RECONCILE_S) submit it again: `Job.notify_pending` for job endings
(`job_notifications_reconcile`), pending deliveries for tries
(`deliveries_reconcile`). Both are bounded: an ending's tries are counted
(`JobEnding`) as a delivery's are, and given up after NOTIFY_MAX_ATTEMPTS,
so a task that fails every time is not re-submitted forever.

A try claims its delivery with a guarded UPDATE on (id, seq): `seq` grows
each time a try is scheduled, so a duplicated or stale message claims
nothing. Retries and rate-limit waits schedule the next try with `due` (the
dispatcher holds delayed jobs), never with Celery ETAs.

The claim counts the try (`attempts + 1`) before anything is sent: whatever
happens after the request went out (the worker dies, the database is gone
when the answer is to be recorded), the try has counted, and the reconciler
that takes back an expired claim gives up at NOTIFY_MAX_ATTEMPTS like any
retry. So one event reaches a receiver at most NOTIFY_MAX_ATTEMPTS times
per round of tries, whatever fails where. A rate-limit wait gives its count
back: nothing was sent.

Database connections. The io worker runs 64 threads; Django gives each its
own connection. A try reads what it needs, builds the exact request, closes
its connection, talks to the network (DNS, connect, send, read: seconds at
worst), then opens one again to record the outcome, and closes it. So
connections are held only for the short database phases, not for the HTTP
call (bench/notify.py measures the peak).
"""
from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import CharField, Count, F, Min, Q
from django.db.models.functions import Cast, Coalesce
from django.urls import reverse
from django.utils import timezone

import dispatcher
from dispatcher import KeyPolicy
from notify import emails, ratelimit, retry, signing, ssrf, transport
from notify.events import JOB_EVENTS, SUBSCRIBABLE, Channel, EventType
from notify.models import ChannelPreference, Delivery, DeliveryAttempt, Endpoint, Event, JobEnding
from notify.selectors import preferences_for_user
from project import metrics, passes, plans
from project.dbclock import db_now
from project.lanes import Lane
from uploads import limits
from uploads.errors import ApplicationError
from uploads.lifecycle import JobFinished, JobPlayable
from uploads.models import Batch, Job

log = logging.getLogger(__name__)

TASK_JOB_FINISHED = "notify.job_finished"
TASK_JOBS_CANCELED = "notify.jobs_canceled"
TASK_JOB_PLAYABLE = "notify.job_playable"
TASK_DELIVER = "notify.deliver"
# Fair-share charge of one notify task, in worker seconds (mostly waiting on
# the network; the dispatcher corrects it with the measured time).
NOTIFY_COST_S = 0.05
# A pending delivery whose try is this overdue was lost by the dispatcher.
RECONCILE_AFTER_S = 60.0


# --- entering the lane -----------------------------------------------------------


Plans = Mapping[int, KeyPolicy]


def plans_for(owner_ids: Iterable[int]) -> Plans:
    """The owners' plans on io-notify (weight, cap, rate), in one query: the
    callers that submit many tries look them up once, not once per try."""
    from uploads.services import fair_policies

    return fair_policies(user_ids=owner_ids, lane=Lane.IO_NOTIFY)


def _enqueue(task: str, args: list, *, task_id: str, owner_id: int, delay_s: float | None = None,
             plans: Plans | None = None) -> bool:
    plans = plans_for([owner_id]) if plans is None else plans
    return dispatcher.enqueue(task, args, task_id=task_id, fair_key=str(owner_id), cost=NOTIFY_COST_S,
                              policy=plans.get(owner_id), delay_s=delay_s)


def job_finished_notify(*, job_id, owner_id: int, status: str, plans: Plans | None = None) -> bool:
    """A job ended (called on commit): tell its owner, off the request/worker
    path. False when the task was held already (or the status is not an end).
    `plans`: the owners' plans when the caller has them (plans_for)."""
    if status not in Job.TERMINAL:
        return False
    return _enqueue(TASK_JOB_FINISHED, [str(job_id), status], task_id=_job_finished_task_id(job_id, status),
                    owner_id=owner_id, plans=plans)


def job_finished_receive(event: JobFinished) -> None:
    """uploads.lifecycle's announcement of a job's ending (after its commit)."""
    job_finished_notify(job_id=event.job_id, owner_id=event.owner_id, status=event.status)


def jobs_finished_receive(events: list[JobFinished]) -> None:
    """The same for many endings at once (a batch canceled): the owners'
    plans in one query, the tasks in pipelined round trips. Jobs canceled
    together (one owner, one `finished_at`) are one task for all of them
    (`jobs_canceled_process`), not one each: a canceled job has no event of
    its own, only its batch's summary to publish, and 5,000 tasks asking
    for the same summary took the notify worker and the database a minute
    of two cores (bench/isolation.py's CPU timeline)."""
    ended = [e for e in events if e.status in Job.TERMINAL]
    together, alone = [], []
    for e in ended:
        (together if e.status == Job.Status.CANCELED and e.finished_at is not None else alone).append(e)
    plans = plans_for({e.owner_id for e in ended})
    dispatcher.enqueue_many([
        dispatcher.Submission(TASK_JOB_FINISHED, [str(e.job_id), e.status],
                              task_id=_job_finished_task_id(e.job_id, e.status), fair_key=str(e.owner_id),
                              cost=NOTIFY_COST_S, policy=plans.get(e.owner_id))
        for e in alone
    ] + [_canceled_submission(o, f, plans) for o, f in sorted({(e.owner_id, e.finished_at) for e in together})])


def _canceled_task_id(owner_id: int, finished_at: datetime) -> str:
    return f"notify-canceled-{owner_id}-{round(finished_at.timestamp() * 1_000_000)}"


def _canceled_submission(owner_id: int, finished_at: datetime, plans: Plans) -> dispatcher.Submission:
    return dispatcher.Submission(TASK_JOBS_CANCELED, [owner_id, finished_at.isoformat()],
                                 task_id=_canceled_task_id(owner_id, finished_at), fair_key=str(owner_id),
                                 cost=NOTIFY_COST_S, policy=plans.get(owner_id))


def job_playable_receive(event: JobPlayable) -> None:
    """uploads.lifecycle's announcement that a video can be watched (after
    its commit): its job.playable event, off the worker's path. Nothing
    reconciles it: if this is lost, the job's ending publishes it, before
    its job.succeeded (job_event_process)."""
    _enqueue(TASK_JOB_PLAYABLE, [event.job_id], task_id=f"notify-job-{event.job_id}-playable",
             owner_id=event.owner_id)


def _deliver_task_id(delivery_id, seq: int) -> str:
    return f"notify-dlv-{delivery_id}-{seq}"


def delivery_enqueue(*, delivery_id, seq: int, owner_id: int, delay_s: float | None = None,
                     reserved: bool = False, plans: Plans | None = None) -> bool:
    """Schedule try `seq` of a delivery, `delay_s` from now (a backoff or a
    rate-limit wait: relative, so no host's clock enters; the dispatcher
    counts it on Redis's). `reserved`: it already holds a rate-limit token
    for that time. `plans`: as job_finished_notify."""
    return _enqueue(TASK_DELIVER, [str(delivery_id), seq, reserved], task_id=_deliver_task_id(delivery_id, seq),
                    owner_id=owner_id, delay_s=delay_s, plans=plans)


class Try(NamedTuple):
    """A try to submit: try `seq` of a delivery whose event `owner_id` owns, `delay_s` from now (None: now)."""

    delivery_id: uuid.UUID | str
    seq: int
    owner_id: int
    delay_s: float | None = None


def _deliveries_enqueue(tries: list[Try]) -> int:
    """Submit many tries with one plan lookup."""
    plans = plans_for({t.owner_id for t in tries})
    return sum(delivery_enqueue(delivery_id=t.delivery_id, seq=t.seq, owner_id=t.owner_id, delay_s=t.delay_s,
                                plans=plans) for t in tries)


# --- events and their deliveries -----------------------------------------------------


def _results_url(path: str) -> str:
    return settings.FAIRLANE_BASE_URL.rstrip("/") + path


def _envelope(event_type: str, data: dict) -> dict:
    """Standard Webhooks' payload shape: type, timestamp, data."""
    return {"type": event_type, "timestamp": timezone.now().isoformat(), "data": data}


def _job_data(job: Job) -> dict:
    return {"job": {
        "id": str(job.id), "status": job.status, "kind": job.kind,
        "filename": job.title,
        "batch": str(job.upload.batch) if job.upload_id else None,
        "error": job.error,
        "results_url": _results_url(reverse("job-page", args=[job.id])),
    }}


def _targets(*, owner: AbstractBaseUser, event_type: str) -> list[Delivery]:
    """Unsaved deliveries of an `event_type` event to everyone the owner chose."""
    prefs = preferences_for_user(user_id=owner.pk)
    forced_email = event_type == EventType.ENDPOINT_DISABLED
    targets = []
    if (forced_email or event_type in prefs[Channel.EMAIL]) and owner.email:
        targets.append(Delivery(channel=Channel.EMAIL, recipient=owner.email))
    if event_type in prefs[Channel.WEBHOOK]:
        for endpoint in Endpoint.objects.filter(owner=owner, is_active=True).only("id", "events"):
            if event_type in endpoint.events:
                targets.append(Delivery(channel=Channel.WEBHOOK, endpoint=endpoint))
    return targets


# Tries at publishing one event while its owner deletes endpoints.
_PUBLISH_TRIES = 3


def event_publish(*, owner: AbstractBaseUser, event_type: str, key: str, data: dict, job_id=None,
                  batch=None, always: bool = False) -> Event | None:
    """Record an event once per `key` and deliver it to every chosen target.

    Returns None when nobody wants it (and `always` is off: no row is kept) or
    when the key was published before: exactly once per key.
    """
    for attempt in range(_PUBLISH_TRIES):
        targets = _targets(owner=owner, event_type=event_type)
        if not targets and not always:
            return None
        try:
            with transaction.atomic():
                event = Event.objects.create(owner=owner, type=event_type, key=key, job_id=job_id, batch=batch,
                                             payload=_envelope(event_type, data))
                for delivery in targets:
                    delivery.event = event
                Delivery.objects.bulk_create(targets)
                tries = [Try(d.id, 0, owner.pk) for d in targets]
                dispatcher.after_commit(lambda: _deliveries_enqueue(tries))
            return event
        except IntegrityError:
            if Event.objects.filter(key=key).exists():
                return None  # published already (a redelivered task, or the batch's other last job)
            # An endpoint was deleted after the targets were read (its
            # delivery fails the foreign key at commit): the others still
            # hear, read again without it.
            if attempt == _PUBLISH_TRIES - 1:
                raise
    return None



def _job_finished_task_id(job_id, status: str) -> str:
    return f"notify-job-{job_id}-{status}"


def _playable_publish(job: Job) -> None:
    """The job's job.playable event, once per run of the job (keyed by when
    it became playable), if it became playable."""
    if job.playable_at is None:
        return
    event_type = EventType.JOB_PLAYABLE
    event_publish(owner=job.owner, event_type=event_type, key=f"{event_type}:{job.id}:{job.playable_at.timestamp()}",
                  data=_job_data(job), job_id=job.id)


def job_playable_process(*, job_id: str) -> None:
    """A video became playable: its job.playable event, unless the job has
    ended meanwhile without succeeding (a failed or canceled video is
    nothing to watch)."""
    job = Job.objects.select_related("owner", "upload").filter(id=job_id).first()
    if job is not None and job.status in ("running", "succeeded"):
        _playable_publish(job)


def job_event_process(*, job_id: str, status: str) -> None:
    """The notify side of a job ending: its own event, then its batch's
    summary; then the job's outbox flag is cleared. Running it again (a
    redelivery, the reconciler) publishes nothing twice: events are keyed.
    Each try is counted first (`_ending_claim`): one that raises records its
    error and, at the NOTIFY_MAX_ATTEMPTS-th, gives the ending up, so the
    reconciler stops re-submitting it."""
    job = Job.objects.select_related("owner", "upload").filter(id=job_id).first()
    if job is None or job.status != status:
        return  # gone, or retried since: a later ending will be reported
    ending = _ending_claim(job)
    if ending is None:
        return  # given up
    try:
        if status == "succeeded":  # its job.playable comes first, whatever became of its own task
            _playable_publish(job)
        event_type = JOB_EVENTS.get(status)
        if event_type is not None:
            stamp = job.finished_at.timestamp() if job.finished_at else 0
            event_publish(owner=job.owner, event_type=event_type, key=f"{event_type}:{job.id}:{stamp}",
                          data=_job_data(job), job_id=job.id)
        if job.upload_id:
            batch_summary_publish(batch=job.upload.batch, owner=job.owner)
    except Exception as exc:
        _ending_failed(ending, exc)
        raise
    with transaction.atomic():
        _ending_pending_clear(ending)
        JobEnding.objects.filter(pk=ending.pk).delete()


def jobs_canceled_process(*, owner_id: int, finished_at: datetime | str) -> int:
    """The notify side of the jobs one cancel ended together (the owner's
    jobs canceled at `finished_at` whose ending is still owed): the summary
    of each of their batches, once, then their outbox flags, in one UPDATE.
    A canceled job has no event of its own, so this is what their tasks
    one by one would have done, in statements that do not grow with the
    number of jobs (one summary per batch). Tries are counted on the
    group's first job, as job_event_process counts a job's; given up,
    the whole group's flags are cleared. Returns how many were cleared."""
    if isinstance(finished_at, str):
        finished_at = datetime.fromisoformat(finished_at)
    group = Job.objects.filter(owner_id=owner_id, status=Job.Status.CANCELED, finished_at=finished_at,
                               notify_pending=True)
    first = group.select_related("owner").order_by("id").first()
    if first is None:
        return 0  # done already (a redelivery, the reconciler)
    ending = _ending_claim(first)
    if ending is None:
        return group.update(notify_pending=False)  # given up
    try:
        batches = group.filter(upload__isnull=False).order_by().values_list("upload__batch", flat=True).distinct()
        for batch in sorted(batches):
            batch_summary_publish(batch=batch, owner=first.owner)
    except Exception as exc:
        _ending_failed(ending, exc)
        if ending.tries >= settings.NOTIFY_MAX_ATTEMPTS:
            group.update(notify_pending=False)
        raise
    with transaction.atomic():
        cleared = group.update(notify_pending=False)
        JobEnding.objects.filter(pk=ending.pk).delete()
    return cleared


# --- a job ending's tries ------------------------------------------------------------


ENDING_LOST_ERROR = "no outcome recorded: the worker stopped before the try ended"


def _ending_claim(job: Job) -> JobEnding | None:
    """Count a try at turning the job's ending into events, before it runs
    (whatever stops it, it has counted). None when the ending was given up
    already (a stale message), or is now: its tries are spent, the last
    ones by workers that died without recording why."""
    key = {"job_id": job.id, "finished_at": job.finished_at or job.created_at}
    pending = JobEnding.objects.filter(**key, status=JobEnding.Status.PENDING)
    if not pending.update(tries=F("tries") + 1):
        try:
            with transaction.atomic():
                return JobEnding.objects.create(**key, job_status=job.status, tries=1)
        except IntegrityError:  # another try created it meanwhile, or it was given up
            if not pending.update(tries=F("tries") + 1):
                return None
    ending = pending.first()
    if ending is not None and ending.tries > settings.NOTIFY_MAX_ATTEMPTS:
        ending.tries -= 1  # this one does not run
        _ending_give_up(ending, code=ending.error_code or "no_outcome",
                        message=ending.error_message or ENDING_LOST_ERROR)
        return None
    return ending


def _ending_failed(ending: JobEnding, exc: Exception) -> None:
    """A try raised: record why, and give the ending up when it was the last."""
    code = str(getattr(exc, "code", "") or type(exc).__name__)[:64]
    message = _storable(str(exc) or code, limit=JobEnding._meta.get_field("error_message").max_length,
                        one_line=True)
    JobEnding.objects.filter(pk=ending.pk, status=JobEnding.Status.PENDING).update(error_code=code,
                                                                                  error_message=message)
    if ending.tries >= settings.NOTIFY_MAX_ATTEMPTS:
        _ending_give_up(ending, code=code, message=message)


def _ending_give_up(ending: JobEnding, *, code: str, message: str) -> None:
    """The ending fails for good, once: its row says with what, and the
    job's outbox flag is cleared, so the reconciler submits it no more."""
    with transaction.atomic():
        if not JobEnding.objects.filter(pk=ending.pk, status=JobEnding.Status.PENDING).update(
                status=JobEnding.Status.FAILED, tries=ending.tries, error_code=code, error_message=message,
                given_up_at=db_now()):
            return
        _ending_pending_clear(ending)
    log.error("job %s: its %s ending could not be turned into events in %d tries, given up (%s: %s)",
              ending.job_id, ending.job_status, ending.tries, code, message)


def _ending_pending_clear(ending: JobEnding) -> None:
    """The job's outbox flag off, unless the job has ended again since."""
    Job.objects.filter(id=ending.job_id, status=ending.job_status, finished_at=ending.finished_at).update(
        notify_pending=False)


def job_notifications_reconcile() -> int:
    """The outbox of job endings (settings.FAIR_RECONCILERS): submit the
    notify task of every ended job whose ending was not processed and whose
    task the dispatcher does not hold (Redis was down when the job ended, or
    lost its state since). Jobs that ended within FAIR_RECONCILE_MIN_AGE_S are
    left to the normal path.

    Canceled jobs are read by group, the jobs one cancel ended together (one
    owner, one `finished_at`), whose one task (`notify.jobs_canceled`) tells
    them all: a group whose task is held costs the pass one row and one id
    however many jobs it has (a 5,000-job cancel waiting behind its owner's
    deliveries was read in full every pass). Only a group whose task is not
    held has its jobs read, to see whether each has a task of its own (a job
    canceled alone); if one has none, the group's task is owed again."""
    if not dispatcher.is_fair(Lane.IO_NOTIFY):
        return 0  # plain FIFO (benchmarks' baseline): nothing tells what the broker holds
    settled = timezone.now() - timedelta(seconds=settings.FAIR_RECONCILE_MIN_AGE_S)
    pending = Job.objects.filter(notify_pending=True, finished_at__lt=settled)
    scheduler = dispatcher.scheduler(Lane.IO_NOTIFY)
    budget_s = passes.BUDGET_S / 2  # each of the two passes below: one reconciler's turn in all
    submitted = 0
    own = pending.exclude(status=Job.Status.CANCELED).values_list("id", "status", "owner_id")
    for rows in passes.pages("job_notifications_reconcile", own, budget_s=budget_s):  # bounded pages
        known = scheduler.known_many([_job_finished_task_id(i, s) for i, s, _ in rows])
        lost = [row for row, state in zip(rows, known) if state is None]
        plans = plans_for({owner_id for _, _, owner_id in lost})
        submitted += sum(job_finished_notify(job_id=i, owner_id=o, status=s, plans=plans) for i, s, o in lost)
    canceled = pending.filter(status=Job.Status.CANCELED)
    # A group's page order: its first job's id as text (PostgreSQL has no min(uuid)).
    groups = (canceled.values("owner_id", "finished_at").annotate(first=Min(Cast("id", output_field=CharField())))
              .values_list("first", "owner_id", "finished_at"))
    for page in passes.pages("job_notifications_reconcile_canceled", groups, order="first", budget_s=budget_s):
        held = scheduler.known_many([_canceled_task_id(o, f) for _, o, f in page])
        owed = [(o, f) for (_, o, f), state in zip(page, held)
                if state is None and not _each_has_its_own_task(scheduler, canceled.filter(owner_id=o, finished_at=f))]
        plans = plans_for({owner_id for owner_id, _ in owed})
        submitted += dispatcher.enqueue_many([_canceled_submission(o, f, plans) for o, f in owed])
    return submitted


def _each_has_its_own_task(scheduler, jobs) -> bool:
    """Whether the dispatcher holds a notify task of its own for every one
    of `jobs` (canceled), asked a page at a time, stopping at the first
    that has none."""
    ids = jobs.values_list("id", flat=True).order_by("pk")
    after = None
    while True:
        page = list((ids if after is None else ids.filter(pk__gt=after))[:passes.BATCH])
        if not page:
            return True
        if None in scheduler.known_many([_job_finished_task_id(i, Job.Status.CANCELED) for i in page]):
            return False
        after = page[-1]


def batch_summary_publish(*, batch, owner: AbstractBaseUser) -> Event | None:
    """The batch's summary, once every job of it has ended (whatever the
    outcome). Each job's notify task checks after its job's commit, so the
    last job to end always sees the batch complete; the unique key makes the
    summary exactly-once when several see it.

    It reads well at 2,000 files: the counts, the failed files (at most
    NOTIFY_BATCH_FAILURES_LISTED, then how many more), and one link, to the
    batch's page, where every file is. The check for unfinished jobs comes
    first, since every job's task asks it: a probe of the batch's
    unfinished upload jobs (Job.batch, job_batch_unfinished_idx), and of
    those without a batch (made by the version before 0019 while this one
    rolled out: none after), read through their upload. Through the
    upload alone it walked the owner's unfinished jobs until it met one of
    this batch, every other batch's first: 14 ms a job beside 5,000
    scheduled for later (bench-isolation); before that, asked of the batch
    alone, every user's."""
    jobs = Job.objects.filter(owner=owner, upload__batch=batch)
    key = f"batch.completed:{batch}"
    unfinished = Job.objects.filter(upload__isnull=False, status__in=Job.UNFINISHED, owner=owner).values("pk")
    probes = unfinished.filter(batch=batch).union(unfinished.filter(batch__isnull=True, upload__batch=batch), all=True)
    if probes.exists() or Event.objects.filter(key=key).exists():
        return None  # not ended yet, or told already: before the counts, which read the whole batch
    counts = {row["status"]: row["n"] for row in jobs.values("status").annotate(n=Count("id")).order_by("status")}
    if not counts:
        return None
    limit = settings.NOTIFY_BATCH_FAILURES_LISTED
    failed = list(jobs.filter(status=Job.Status.FAILED).select_related("upload").order_by("upload__created_at")[:limit])
    name = Batch.objects.filter(id=batch).values_list("name", flat=True).first() or ""
    data = {"batch": {
        "id": str(batch), "name": name, "total": sum(counts.values()), "counts": counts,
        "failures": [{"job_id": str(j.id), "filename": j.upload.filename, "error": j.error} for j in failed],
        "failures_not_listed": counts.get(Job.Status.FAILED, 0) - len(failed),
        "results_url": _results_url(reverse("batch-page", args=[batch])),
    }}
    return event_publish(owner=owner, event_type=EventType.BATCH_COMPLETED, key=key,
                         data=data, batch=batch, always=True)


# --- endpoints and preferences ---------------------------------------------------------


def _validated_events(events) -> list[str]:
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise ApplicationError("invalid_events", f"events must be a non-empty list of: {', '.join(SUBSCRIBABLE)}.")
    unknown = sorted(set(events) - set(SUBSCRIBABLE))
    if unknown:
        raise ApplicationError("invalid_events", f"Unknown event(s) {', '.join(unknown)}; choose from "
                               f"{', '.join(SUBSCRIBABLE)}.")
    return sorted(set(events), key=SUBSCRIBABLE.index)


def endpoint_create(*, owner: AbstractBaseUser, url: str, events, resolver: ssrf.Resolver | None = None) -> Endpoint:
    """Register a webhook endpoint after checking its URL reaches only public
    addresses (checked again before every delivery), within the owner's
    plan's max_webhook_endpoints (429 too_many_endpoints: every event is a
    delivery per endpoint, held in Redis until sent). The caller shows the
    returned secret once."""
    events = _validated_events(events)
    if not isinstance(url, str):
        raise ApplicationError("url_invalid", "url must be a string.")
    try:
        ssrf.check_url(url, resolver=resolver)  # DNS: before the lock, which is held for two statements
    except ssrf.UnsafeURLError as exc:
        raise ApplicationError(exc.code, exc.message) from None
    with transaction.atomic():
        limits.owner_lock([owner.pk])
        limits.refuse_over(code="too_many_endpoints", limit=limits.limits_for(user_id=owner.pk).webhook_endpoints,
                           count=Endpoint.objects.filter(owner=owner).count(), adding=1,
                           message="Your plan's limit on webhook endpoints is {limit:,} and you have {count:,}; "
                                   "delete one first.")
        return Endpoint.objects.create(owner=owner, url=url, events=events, secret=signing.secret_generate())


def endpoint_delete(*, endpoint: Endpoint) -> None:
    """Deleting takes its deliveries with it; a try in flight finds nothing to
    record (its guarded update matches no row).

    The endpoint's row is locked first. The notify lane adds deliveries to
    it at any time, and one committed after Django had collected the
    deliveries to delete made the delete fail at its commit, where
    PostgreSQL checks foreign keys (a 500 to the owner; bench-isolation met
    it). From the lock on, such a delivery waits for the delete and is
    refused at its own commit (event_publish then publishes without it).

    Then its deliveries' rows are locked. A try records its answer by
    updating its delivery and adding an attempt row in one transaction; one
    that had added its row, uncommitted, when Django deleted the attempts
    it could see made the delete fail the same way once the try committed.
    Locked first, the delete waits for such a try and then sees its row; a
    try that comes later waits for the delete and finds its delivery gone
    ("stale"). The rows locked are the rows the delete removes anyway."""
    with transaction.atomic():
        if Endpoint.objects.select_for_update().filter(pk=endpoint.pk).exists():
            list(Delivery.objects.select_for_update().filter(endpoint_id=endpoint.pk).values_list("pk", flat=True))
            endpoint.delete()
    log.info("webhook endpoint %s of user %s deleted", endpoint.id, endpoint.owner_id)


def endpoint_enable(*, endpoint_ids: list, actor: AbstractBaseUser) -> int:
    """Turn disabled endpoints back on (admin), with a clean failure streak."""
    count = Endpoint.objects.filter(id__in=endpoint_ids, is_active=False).update(
        is_active=True, disabled_at=None, disabled_reason="", failure_streak=0, failing_since=None)
    log.info("%s re-enabled %d webhook endpoint(s)", actor, count)
    return count


def preferences_set(*, user: AbstractBaseUser, channel: str, events: list[str]) -> list[str]:
    """Choose the events `user` receives on `channel` (an empty list: none)."""
    if channel not in Channel.__members__.values():
        raise ApplicationError("invalid_channel", f"channel must be one of {', '.join(Channel)}.")
    chosen = _validated_events(events) if events else []
    ChannelPreference.objects.update_or_create(user=user, channel=channel, defaults={"events": chosen})
    return chosen


# --- one try ------------------------------------------------------------------------------


def _release_db() -> None:
    """Give this thread's database connection back before network I/O; the
    next query opens one again. Inside a transaction (tests) it must stay."""
    if not connection.in_atomic_block:
        connection.close()


def _claim(delivery_id: str, seq: int) -> Delivery | None:
    """Take try `seq` of a delivery, and count it (see the module's docstring).
    Its lease is on the database's clock, which every host shares."""
    now = db_now()
    claimed = Delivery.objects.filter(id=delivery_id, seq=seq).filter(
        Q(status=Delivery.Status.PENDING) | Q(status=Delivery.Status.SENDING, lease_until__lt=now)
    ).update(status=Delivery.Status.SENDING, attempts=F("attempts") + 1,
             lease_until=now + timedelta(seconds=settings.NOTIFY_SENDING_LEASE_S))
    if not claimed:
        return None
    return Delivery.objects.select_related("event", "event__owner", "endpoint").get(id=delivery_id)


def delivery_attempt(*, delivery_id: str, seq: int, reserved: bool = False,
                     resolver: ssrf.Resolver | None = None) -> str:
    """Run try `seq` of a delivery; returns what happened (for logs and tests):
    stale, canceled, held (behind an earlier event), throttled, succeeded, retry or failed. `resolver`
    replaces DNS (tests of the connect-time check)."""
    delivery = _claim(delivery_id, seq)
    if delivery is None:
        return "stale"  # a duplicate message, or a try that was rescheduled or canceled
    if delivery.channel == Channel.WEBHOOK:
        return _webhook_attempt(delivery, reserved=reserved, resolver=resolver)
    return _email_attempt(delivery)


def _reschedule(delivery: Delivery, *, delay_s: float, reserved: bool) -> None:
    """Give back a claim without counting a try (rate limited): nothing was sent."""
    with transaction.atomic():
        updated = Delivery.objects.filter(id=delivery.id, seq=delivery.seq, status=Delivery.Status.SENDING).update(
            status=Delivery.Status.PENDING, seq=F("seq") + 1, attempts=F("attempts") - 1,
            next_attempt_at=db_now() + timedelta(seconds=delay_s), lease_until=None)
        if updated:
            dispatcher.after_commit(lambda: delivery_enqueue(
                delivery_id=delivery.id, seq=delivery.seq + 1, owner_id=delivery.event.owner_id, delay_s=delay_s,
                reserved=reserved))


# How long a job's event waits, each time, for an earlier event of the same
# job to be tried first at the same endpoint (_behind_earlier).
IN_ORDER_WAIT_S = 0.5


def _behind_earlier(delivery: Delivery) -> bool:
    """Whether an earlier event of the same job (its job.playable, before
    its job.succeeded) is still waiting for its first try at the same
    endpoint: the two are tries of their own, possibly on two threads at
    once, and a receiver must see them in the order they happened. Only the
    first tries are ordered: a failed earlier one retries on its own
    schedule, and holds nothing back."""
    event = delivery.event
    if event.job_id is None:
        return False
    return Delivery.objects.filter(
        endpoint_id=delivery.endpoint_id, event__job_id=event.job_id, event__created_at__lt=event.created_at,
        status__in=[Delivery.Status.PENDING, Delivery.Status.SENDING], attempt_log__isnull=True).exists()


def _webhook_attempt(delivery: Delivery, *, reserved: bool, resolver: ssrf.Resolver | None) -> str:
    endpoint = delivery.endpoint
    if endpoint is None or not endpoint.is_active:
        Delivery.objects.filter(id=delivery.id, status=Delivery.Status.SENDING).update(
            status=Delivery.Status.CANCELED, attempts=F("attempts") - 1, lease_until=None,
            last_error="endpoint disabled")
        return "canceled"
    if _behind_earlier(delivery):
        _reschedule(delivery, delay_s=IN_ORDER_WAIT_S, reserved=reserved)
        return "held"
    if not reserved:
        rate, burst = _rate_limit(endpoint)
        wait_s = ratelimit.take(endpoint_id=str(endpoint.id), rate_per_s=rate, burst=burst)
        if wait_s > 0:
            _reschedule(delivery, delay_s=wait_s, reserved=True)
            return "throttled"
    event = delivery.event
    body = json.dumps(event.payload, separators=(",", ":"), sort_keys=True)
    headers = signing.signed_headers(secret=endpoint.secret, msg_id=event.webhook_id, body=body)
    url = endpoint.url
    _release_db()
    started = timezone.now()
    try:
        target = ssrf.check_url(url, resolver=resolver)  # again, now: the name may point elsewhere since registration
    except ssrf.UnsafeURLError as exc:
        answer = transport.Response(status=None, latency_ms=0, error=f"{exc.code}: {exc.message}")
        retryable = exc.code == "url_unresolvable"  # DNS trouble passes; a private address does not
    else:
        answer = transport.post(
            target, body=body.encode(), headers=headers,
            connect_timeout=settings.NOTIFY_WEBHOOK_CONNECT_TIMEOUT_S,
            read_timeout=settings.NOTIFY_WEBHOOK_READ_TIMEOUT_S,
            total_timeout=settings.NOTIFY_WEBHOOK_DEADLINE_S,
            prefix_bytes=settings.NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES,
        )
        retryable = True
    outcome = _record(delivery, started=started, answer=answer, retryable=retryable)
    _endpoint_health(endpoint_id=endpoint.id, ok=outcome == "succeeded")
    _release_db()
    return outcome


def _rate_limit(endpoint: Endpoint) -> tuple[float, int]:
    """The endpoint's own rate and burst where set and within bounds
    (project/plans.py), else the defaults: a bad value stored anyway is
    logged, not obeyed."""
    bad = plans.reset_invalid(endpoint, ("rate_per_s", "burst"))
    if bad:
        log.warning("webhook endpoint %s has an invalid %s; the default is used", endpoint.id, ", ".join(bad))
    rate = endpoint.rate_per_s if endpoint.rate_per_s is not None else settings.NOTIFY_WEBHOOK_RATE_PER_S
    return rate, endpoint.burst if endpoint.burst is not None else settings.NOTIFY_WEBHOOK_BURST


def _email_attempt(delivery: Delivery) -> str:
    event = delivery.event
    message = emails.email_build(event=event, to=delivery.recipient, username=event.owner.get_username())
    _release_db()
    started = timezone.now()
    try:
        message.send()
        answer = transport.Response(status=250, latency_ms=_ms_since(started))
    except Exception as exc:  # SMTP and socket errors alike: the mail server may be back later
        answer = transport.Response(status=None, latency_ms=_ms_since(started), error=f"{type(exc).__name__}: {exc}")
    outcome = _record(delivery, started=started, answer=answer, retryable=True)
    _release_db()
    return outcome


def _ms_since(start: datetime) -> int:
    return int((timezone.now() - start).total_seconds() * 1000)


# Control characters, NUL among them (PostgreSQL text refuses it): a body
# keeps its tabs and line breaks, a one-line error message nothing.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f]")


def _storable(text: str, *, limit: int, one_line: bool = False) -> str:
    """What a receiver (or a mail server, or an exception about either) said,
    made fit to store and show: no NUL or other control characters (PostgreSQL
    text refuses NUL; an error message is one line), no lone surrogates
    (UTF-8 refuses them), at most `limit` characters."""
    text = (_CONTROL_ONE_LINE if one_line else _CONTROL).sub("\ufffd", text[: limit * 2])
    return text.encode("utf-8", "replace").decode("utf-8")[:limit]


def _record(delivery: Delivery, *, started: datetime, answer: transport.Response, retryable: bool) -> str:
    """Store the try and decide what comes next, atomically, guarded by the
    claim. Everything from outside is made storable first: a receiver may
    answer anything, and an answer that cannot be stored would leave the
    delivery `sending` (tests/notify/test_hostile_receivers.py)."""
    error = _storable(answer.error, limit=DeliveryAttempt._meta.get_field("error").max_length, one_line=True)
    prefix = _storable(answer.body_prefix, limit=settings.NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES)
    ok = retry.is_success(answer.status) if delivery.channel == Channel.WEBHOOK else answer.status == 250
    number = delivery.attempts  # counted by the claim
    delay = None
    if not ok and retryable:
        delay = retry.next_delay_s(number, status=answer.status, retry_after=answer.retry_after)
    now = db_now()
    due = now + timedelta(seconds=delay) if delay is not None else None
    outcome = "succeeded" if ok else "retry" if due else "failed"
    with transaction.atomic():
        fields = {"last_status_code": answer.status if delivery.channel == Channel.WEBHOOK else None,
                  "last_error": error, "lease_until": None}
        if ok:
            fields.update(status=Delivery.Status.SUCCEEDED, delivered_at=now)
        elif due:
            fields.update(status=Delivery.Status.PENDING, seq=delivery.seq + 1, next_attempt_at=due)
        else:
            fields.update(status=Delivery.Status.FAILED)
        updated = Delivery.objects.filter(id=delivery.id, seq=delivery.seq, status=Delivery.Status.SENDING).update(
            **fields)
        if not updated:
            return "stale"  # deleted or canceled meanwhile
        DeliveryAttempt.objects.create(
            delivery_id=delivery.id, number=delivery.attempt_log.count() + 1, started_at=started,
            latency_ms=answer.latency_ms, status_code=fields["last_status_code"], error=error,
            response_prefix=prefix, outcome=outcome, next_attempt_at=due,
        )
        if due:
            dispatcher.after_commit(lambda: delivery_enqueue(
                delivery_id=delivery.id, seq=delivery.seq + 1, owner_id=delivery.event.owner_id, delay_s=delay))
    metrics.observe_job(lane=Lane.IO_NOTIFY, kind=delivery.channel, outcome=outcome,
                        wait_s=max(0.0, (started - (delivery.next_attempt_at or delivery.created_at)).total_seconds()),
                        process_s=answer.latency_ms / 1000)
    log.info("delivery %s try %d (%s): %s %s in %d ms", delivery.id, number, delivery.channel, outcome,
             answer.status or error, answer.latency_ms)
    return outcome


# --- endpoint health ------------------------------------------------------------------------


def _endpoint_health(*, endpoint_id, ok: bool) -> None:
    if ok:
        Endpoint.objects.filter(id=endpoint_id, failure_streak__gt=0).update(failure_streak=0, failing_since=None)
        return
    now = timezone.now()
    Endpoint.objects.filter(id=endpoint_id).update(failure_streak=F("failure_streak") + 1,
                                                   failing_since=Coalesce(F("failing_since"), now))
    endpoint = Endpoint.objects.filter(id=endpoint_id, is_active=True).first()
    if (endpoint is not None and endpoint.failure_streak >= settings.NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES
            and (now - endpoint.failing_since).total_seconds() >= settings.NOTIFY_WEBHOOK_DISABLE_AFTER_S):
        endpoint_disable(endpoint_id=endpoint_id, reason=f"{endpoint.failure_streak} failed attempts in a row "
                         f"since {endpoint.failing_since:%Y-%m-%d %H:%M} UTC")


def endpoint_disable(*, endpoint_id, reason: str) -> bool:
    """Stop delivering to an endpoint that keeps failing: its pending
    deliveries are canceled and its owner is emailed (once: the guarded
    update lets one caller through)."""
    with transaction.atomic():
        if not Endpoint.objects.filter(id=endpoint_id, is_active=True).update(
                is_active=False, disabled_at=timezone.now(), disabled_reason=reason[:255]):
            return False
        Delivery.objects.filter(endpoint_id=endpoint_id, status=Delivery.Status.PENDING).update(
            status=Delivery.Status.CANCELED, last_error="endpoint disabled")
        endpoint = Endpoint.objects.select_related("owner").get(id=endpoint_id)
        event_publish(owner=endpoint.owner, event_type=EventType.ENDPOINT_DISABLED,
                      key=f"endpoint.disabled:{endpoint_id}:{endpoint.disabled_at.timestamp()}",
                      data={"endpoint": {"id": str(endpoint.id), "url": endpoint.url, "reason": reason,
                                         "settings_url": _results_url(reverse("notify-settings"))}})
    log.warning("webhook endpoint %s disabled: %s", endpoint_id, reason)
    return True


# --- operators ------------------------------------------------------------------------------


REPLAYABLE = (Delivery.Status.SUCCEEDED, Delivery.Status.FAILED, Delivery.Status.CANCELED)


def delivery_replay(*, delivery: Delivery, actor: AbstractBaseUser) -> Delivery:
    """Deliver a finished delivery's event to its target again, as a new
    delivery (`replay_of` the old one, whose log stays as it was) entering
    the fair io lane like any other: charged to the event's owner, retried
    on its own schedule. Its webhook-id is the event's, as for every try
    of it: a receiver that de-duplicates sees it as the same message, one
    that failed to process it gets it again. 409 `not_replayable` while the
    delivery is still pending or sending (it has tries coming), 409
    `endpoint_disabled` for a disabled endpoint (re-enable it first)."""
    if delivery.status not in REPLAYABLE:
        raise ApplicationError("not_replayable", f"The delivery is still {delivery.status}; replay it once it has "
                                                 "ended.", status_code=409)
    if delivery.endpoint_id and not delivery.endpoint.is_active:
        raise ApplicationError("endpoint_disabled", "The endpoint is disabled; re-enable it before replaying.",
                               status_code=409)
    owner_id = delivery.event.owner_id
    with transaction.atomic():
        replay = Delivery.objects.create(event_id=delivery.event_id, channel=delivery.channel,
                                         endpoint_id=delivery.endpoint_id, recipient=delivery.recipient,
                                         replay_of=delivery)
        dispatcher.after_commit(lambda: _deliveries_enqueue([Try(replay.id, 0, owner_id)]))
    log.info("%s replayed delivery %s as %s", actor, delivery.id, replay.id)
    return replay


def deliveries_reconcile() -> int:
    """The outbox's safety net (settings.FAIR_RECONCILERS): re-submit tries
    the dispatcher no longer knows (Redis lost them, or a process died
    between commit and submit), and take back claims whose lease passed
    without an outcome (`_claim_expire`)."""
    if not dispatcher.is_fair(Lane.IO_NOTIFY):
        return 0
    now = db_now()
    overdue = now - timedelta(seconds=RECONCILE_AFTER_S)
    due = Delivery.objects.filter(
        Q(status=Delivery.Status.PENDING) & (Q(next_attempt_at__lt=overdue) | Q(next_attempt_at__isnull=True,
                                                                               created_at__lt=overdue))
        | Q(status=Delivery.Status.SENDING, lease_until__lt=now)
    ).values_list("id", "seq", "status", "event__owner_id")
    sched = dispatcher.scheduler(Lane.IO_NOTIFY)
    submitted = 0
    for rows in passes.pages("deliveries_reconcile", due):  # bounded pages (project/passes.py)
        states = sched.known_many([_deliver_task_id(i, s) for i, s, _, _ in rows])
        tries = []
        for (delivery_id, seq, status, owner_id), state in zip(rows, states):
            if state is not None:
                continue
            if status == Delivery.Status.PENDING:
                tries.append(Try(delivery_id, seq, owner_id))
            elif (delay_s := _claim_expire(delivery_id=delivery_id, seq=seq, now=now)) is not None:
                tries.append(Try(delivery_id, seq + 1, owner_id, delay_s))
        submitted += _deliveries_enqueue(tries)
    return submitted


LOST_TRY_ERROR = "no outcome recorded: the worker stopped, or could not record the answer, before its claim expired"


def _claim_expire(*, delivery_id, seq: int, now: datetime) -> float | None:
    """A claim whose lease passed without an outcome: its worker died, or
    could not record what the receiver answered (the request may well have
    gone out). The try counted when it was claimed; it is logged without an
    outcome, and the delivery is tried again after the usual backoff, or
    given up after NOTIFY_MAX_ATTEMPTS. Returns in how many seconds the next
    try is due; None when given up, or when another process moved the
    delivery on."""
    claimed = Delivery.objects.filter(id=delivery_id, seq=seq, status=Delivery.Status.SENDING).only(
        "attempts", "lease_until").first()
    if claimed is None:
        return None
    delay = retry.next_delay_s(claimed.attempts, status=None, retry_after=None)
    due = now + timedelta(seconds=delay) if delay is not None else None
    fields = {"lease_until": None, "last_status_code": None, "last_error": LOST_TRY_ERROR}
    if due:
        fields.update(status=Delivery.Status.PENDING, seq=seq + 1, next_attempt_at=due)
    else:
        fields.update(status=Delivery.Status.FAILED)
    with transaction.atomic():
        if not Delivery.objects.filter(id=delivery_id, seq=seq, status=Delivery.Status.SENDING).update(**fields):
            return None
        DeliveryAttempt.objects.create(
            delivery_id=delivery_id, number=DeliveryAttempt.objects.filter(delivery_id=delivery_id).count() + 1,
            # when it was claimed (as far as the current lease setting tells)
            started_at=claimed.lease_until - timedelta(seconds=settings.NOTIFY_SENDING_LEASE_S),
            error=LOST_TRY_ERROR, outcome=DeliveryAttempt.Outcome.RETRY if due else DeliveryAttempt.Outcome.FAILED,
            next_attempt_at=due)
    log.warning("delivery %s: try %d had no outcome when its claim expired; %s", delivery_id, claimed.attempts,
                f"next try at {due:%H:%M:%S}" if due else "given up")
    return delay if due else None
