"""The one way work enters a lane.

Services call `enqueue` with the task's arguments and its fairness key (the
owning user). For a fair lane the message is not published: the job is held
in the lane's FairScheduler (scheduler.py) with its Celery message built
already (message.py), and the scheduler's release script pushes that message
into the lane's queue when it releases the job, whoever calls it: here
(right after the submit, in the same script call), a worker when a job
finishes (worker.py), or the workers' ticker. A plain lane publishes at
once. The router still decides the lane.

A held job's message is the Celery call itself (task name, args, task id),
so what Flower shows once released is the ordinary task with its readable
arguments. The scheduler knows a job by its job id, which makes a
re-submission of the same job (reconciler, duplicate request) recognisable:
it accepts a job id once. Each released message gets an id of its own,
`<job id>@<release tag>` (message.py): Celery remembers revoked ids for
hours and drops every message that carries one, so a message id must never
be reused by a later run of the same job; Flower still shows the job id.
The submitter picks the tag of the first release, so that a held job can be
announced to Flower under the id it will run as (monitor.py).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from celery import Celery
from django.conf import settings
from django.db import transaction
from django.utils.module_loading import import_string

from dispatcher import message, monitor
from dispatcher.scheduler import NO_RATE_LIMIT, FairScheduler
from project.lanes import FAIR_LANES, Lane
from project.routing import lane_for

log = logging.getLogger(__name__)

# Celery header that marks a message as released by the fair scheduler, so
# the worker knows to report start/finish for it.
FAIR_HEADER = "fairlane_lane"
# Celery header with the job's fairness key: the worker names it when it
# reports the finish, which saves the finish a Redis command (scheduler.finish).
FAIR_KEY_HEADER = "fairlane_key"
# Celery header with the job's group (organisation), when it has one: named
# with the key in the finish, for the same reason.
FAIR_GROUP_HEADER = "fairlane_group"
# What a fair task returns when its job is not finished as far as the
# scheduler is concerned: the job was handed back (requeued for a retry or a
# shutdown) or belongs to another, live delivery. The worker then does not
# report a finish, which would forget a job that is still owed a run.
HANDED_BACK = "fairlane:handed-back"


def job_id_of(task_id: str) -> str:
    """The job a Celery task id belongs to (ids of plain lanes are job ids)."""
    return task_id.rpartition("@")[0] or task_id


@dataclass(frozen=True)
class KeyPolicy:
    """A fairness key's settings: weight (share), cap (max in flight), rate
    ((tokens per second, burst) for rate-limited lanes); and its group's
    (the organisation the key, a user, belongs to): the lane shares its
    worker time between groups by group_weight, then each group's between
    its keys by their weights; group_cap and group_rate limit the whole
    organisation. group None: the key is a group of its own (one level,
    the weight alone decides). The group comes from the account, never
    from a value a client sends: a tenant must not be able to leave its
    organisation's share by naming another."""

    weight: float = 1.0
    cap: int | None = None
    rate: tuple[float, float] | None = None
    group: str | None = None
    group_weight: float = 1.0
    group_cap: int | None = None
    group_rate: tuple[float, float] | None = None

    def submit_fields(self) -> dict:
        """The scheduler's submit arguments for this policy: all of it with
        every job (0 / NO_RATE_LIMIT remove a cap / limit), so a changed plan
        takes effect with the key's next job; the scheduler skips settings
        it has already."""
        return {
            "weight": self.weight, "cap": self.cap if self.cap is not None else 0, "rate": self.rate or NO_RATE_LIMIT,
            "group": self.group, "group_weight": self.group_weight,
            "group_cap": self.group_cap if self.group_cap is not None else 0,
            "group_rate": self.group_rate or NO_RATE_LIMIT,
        }


def celery_app() -> Celery:
    """The Celery app that publishes released jobs: settings.FAIR_CELERY_APP,
    by name, so the dispatcher never imports the project's Celery module
    (which loads this package's worker signals: that would be a circle).
    Not celery.current_app: any Celery() created later in the process (a
    control client, a test) becomes "current" and would publish without the
    project's routes."""
    return import_string(settings.FAIR_CELERY_APP)


_schedulers: dict[tuple[int, Lane], FairScheduler] = {}
_lock = threading.Lock()


def scheduler(lane: Lane) -> FairScheduler:
    """One scheduler (and Redis connection pool) per lane and process: prefork
    children get their own after the fork instead of sharing the parent's
    sockets. redis-py clients are thread-safe, so threads share it."""
    key = (os.getpid(), lane)
    with _lock:
        if key not in _schedulers:
            conf = settings.FAIR_LANES[lane.value]
            _schedulers[key] = FairScheduler(
                # Timeouts: a Redis that hangs (stopped, partitioned) must fail a
                # request or a task, never hang it; every script is O(log n).
                redis.Redis.from_url(settings.FAIR_REDIS_URL, health_check_interval=30, socket_timeout=10,
                                     socket_connect_timeout=5),
                lane.value,
                headroom=conf["headroom"],
                default_window=conf["default_window"],
                release_lease_s=conf["release_lease_s"],
                run_lease_s=conf["run_lease_s"],
                queue=lane.value,  # project/celery.py: each lane's queue is named after it
            )
        return _schedulers[key]


def is_fair(lane: Lane) -> bool:
    return lane in FAIR_LANES and settings.FAIR_DISPATCH_ENABLED


def enqueue(
    task_name: str,
    args: list,
    *,
    task_id: str,
    fair_key: str,
    cost: float = 1.0,
    policy: KeyPolicy | None = None,
    due: float | None = None,
    delay_s: float | None = None,
    options: dict | None = None,
) -> bool:
    """Submit `task_name(*args)` to its lane; False if this task id is already
    held or in flight (the call was a duplicate and changed nothing).
    Not before `due` (an absolute time, e.g. a user's schedule) or `delay_s`
    seconds from now (a backoff: relative, so this host's clock does not
    matter; the dispatcher counts it on Redis's clock).
    `options` are Celery call options for the message (time limits)."""
    lane = lane_for(task_name)
    if not is_fair(lane):  # plain FIFO Celery (the benchmarks' baseline): a broker-side countdown
        countdown = delay_s if delay_s is not None else max(0.0, due - time.time()) if due else None
        celery_app().send_task(task_name, args=args, task_id=task_id, countdown=countdown, **(options or {}))
        return True
    policy = policy or KeyPolicy()
    sched = scheduler(lane)
    built, tag = _message(sched, task_name, args, task_id, fair_key, options, policy.group), message.new_tag()
    accepted, _ = sched.submit_and_release(
        task_id, fair_key, cost=cost, payload=built.body, due=due, delay_s=delay_s, tag=tag, **policy.submit_fields(),
    )
    if accepted:
        monitor.announce_held(celery_app(), [monitor.Held(built.event, tag, fair_key, policy.group)])
    return accepted


@dataclass(frozen=True)
class Submission:
    """One job for `enqueue_many`: enqueue's arguments."""

    task_name: str
    args: list
    task_id: str
    fair_key: str
    cost: float = 1.0
    policy: KeyPolicy | None = None
    due: float | None = None
    options: dict | None = None


# Submits sent in one call by enqueue_many (scheduler.submit_many).
PIPELINE_BATCH = 500


def enqueue_many(submissions: list[Submission]) -> int:
    """`enqueue` for many jobs at once (a 2,000-file batch): on a fair lane
    their submits go PIPELINE_BATCH to a call (scheduler.submit_many), then
    one release, instead of one submit-and-release round trip each. The order
    and the charges are those of submitting them one by one: each job joins
    the back of its key's backlog, and the release takes the fairest first.
    Returns how many were new (the rest were held or in flight already)."""
    accepted = 0
    by_lane: dict[Lane, list[Submission]] = {}
    for sub in submissions:
        by_lane.setdefault(lane_for(sub.task_name), []).append(sub)
    for lane, subs in by_lane.items():
        if not is_fair(lane):
            accepted += sum(enqueue(s.task_name, s.args, task_id=s.task_id, fair_key=s.fair_key, cost=s.cost,
                                    policy=s.policy, due=s.due, options=s.options) for s in subs)
            continue
        sched = scheduler(lane)
        for start in range(0, len(subs), PIPELINE_BATCH):
            jobs, held = [], []
            for sub in subs[start:start + PIPELINE_BATCH]:
                policy = sub.policy or KeyPolicy()
                built, tag = _message(sched, sub.task_name, sub.args, sub.task_id, sub.fair_key,
                                      sub.options, policy.group), message.new_tag()
                jobs.append((sub.task_id, sub.fair_key, {"cost": sub.cost, "payload": built.body, "due": sub.due,
                                                         "tag": tag, **policy.submit_fields()}))
                held.append(monitor.Held(built.event, tag, sub.fair_key, policy.group))
            results = sched.submit_many(jobs, batch=PIPELINE_BATCH)
            accepted += sum(results)
            monitor.announce_held(celery_app(), [h for h, ok in zip(held, results) if ok])
        sched.release()
    return accepted


def _message(sched: FairScheduler, task_name: str, args: list, job_id: str, fair_key: str,
             options: dict | None, group: str | None = None) -> message.Built:
    """The job's Celery message, as the release script will push it."""
    headers = {FAIR_HEADER: sched.lane, FAIR_KEY_HEADER: fair_key}
    if group:
        headers[FAIR_GROUP_HEADER] = group
    built = message.build(celery_app(), task_name, args, job_id=job_id, headers=headers, options=options or {})
    if built.queue != sched.queue:
        raise ValueError(f"{task_name} is routed to {built.queue!r}, not to its lane's queue {sched.queue!r}")
    return built


def hand_back(
    task_name: str,
    args: list,
    *,
    task_id: str,
    fair_key: str,
    cost: float,
    actual_cost: float = 0.0,
    policy: KeyPolicy | None = None,
    delay_s: float | None = None,
    options: dict | None = None,
) -> None:
    """Offer a job again at the front of its user's backlog (after `delay_s`):
    a retry, a job whose worker died, or one a stopping worker gave back.

    In flight, it is requeued in place, its key paying `actual_cost` for the
    attempt. Not in flight (the scheduler finished it, or Redis lost it) it is
    submitted anew; if the scheduler still holds it, nothing needs doing.
    """
    lane = lane_for(task_name)
    if is_fair(lane):
        sched = scheduler(lane)
        built, tag = _message(sched, task_name, args, task_id, fair_key, options,
                              policy.group if policy else None), message.new_tag()
        if sched.requeue(task_id, actual_cost=actual_cost, delay_s=delay_s, payload=built.body, tag=tag):
            monitor.announce_held(celery_app(), [monitor.Held(built.event, tag, fair_key,
                                                              policy.group if policy else None)])
            sched.release()
            return
    enqueue(task_name, args, task_id=task_id, fair_key=fair_key, cost=cost, policy=policy, delay_s=delay_s,
            options=options)


def after_commit(publish_: Callable[[], object]) -> None:
    """Run `publish_` (a submit to the dispatcher) once the transaction commits.

    Robust: a Redis that is down at that moment must not turn a committed
    change into an error (a client would upload again, a worker would clean
    up outputs it has published). The committed rows are the outbox, and the
    reconcilers (settings.FAIR_RECONCILERS) submit what was missed; Django
    logs the failure.
    """
    transaction.on_commit(publish_, robust=True)


def _draining_key(hostname: str) -> str:
    return f"fairlane:draining:{hostname}"


def set_draining(hostname: str, draining: bool) -> None:
    """Mark a worker as stopping (SIGTERM) or back in service (worker start)."""
    client = scheduler(Lane.CPU_TRANSCODE).client
    if draining:
        client.set(_draining_key(hostname), "1", ex=24 * 3600)
    else:
        client.delete(_draining_key(hostname))


def is_draining(hostname: str) -> bool:
    """Whether the worker `hostname` is stopping: its processes take no new job."""
    return bool(scheduler(Lane.CPU_TRANSCODE).client.exists(_draining_key(hostname)))


def finish(task_name: str, task_id: str) -> None:
    """Tell the scheduler a job is done when its worker cannot (it died)."""
    lane = lane_for(task_name)
    if is_fair(lane):
        scheduler(lane).finish(task_id)


def release_all() -> int:
    """Reap expired leases and release what fits, on every fair lane (ticker,
    beat, worker start). Returns how many jobs were released (and so
    published: the release script pushes their messages)."""
    count = 0
    for lane in FAIR_LANES:
        if not is_fair(lane):
            continue
        sched = scheduler(lane)
        reaped = sched.reap()
        if reaped:
            log.warning("lane %s: %d job lease(s) expired, offered again: %s", lane, len(reaped), reaped[:10])
        count += len(sched.release())
    return count


def cancel(task_name: str, job_ids: list[str]) -> None:
    """Withdraw waiting jobs: held and delayed ones leave the backlog.

    A job already released is not revoked in Celery: its message is dropped
    by the job's guarded start, which reports the finish and frees the slot
    at once. (A revoke would be dropped by Celery without a word to the
    dispatcher, and it is remembered by id for hours.)"""
    lane = lane_for(task_name)
    if is_fair(lane):
        sched = scheduler(lane)
        announced = sched.pending_tags(job_ids) if monitor.enabled(celery_app()) else [None] * len(job_ids)
        canceled = [(job_id, *pending) for job_id, pending, done in zip(job_ids, announced, sched.cancel_many(job_ids))
                    if done and pending]
        monitor.announce_canceled(celery_app(), canceled)


def hand_back_message(lane: Lane, job_id: str) -> None:
    """A released message of `job_id` was discarded without running (revoked
    from Flower, expired): put the job back at the front of its backlog and
    release again, so its slot is not held until its lease runs out. Whether
    the job is still owed a run is for its next delivery's guarded start to
    decide. Nothing to do when the scheduler no longer has it in flight."""
    sched = scheduler(lane)
    if sched.requeue(job_id):
        sched.release()
