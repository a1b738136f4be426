"""The worker side of fair dispatch, wired through Celery signals.

- task_prerun: note the job; if it runs longer than START_REPORT_AFTER_S
  the lease thread tells the scheduler it started (its lease becomes a run
  lease) and renews that lease every third of it.
- task_postrun: report the finish with the measured run time (the
  scheduler corrects the key's charge by actual - estimated) and release
  into the freed slot, in one script call that also pushes the released
  message. Synchronously, before the task's result (and so its ack) leaves
  the child: by the time the worker asks for its next message, it is in the
  queue. That is what lets a lane run without headroom (no released job
  waiting in the queue, so a newcomer waits behind none), at one round
  trip per job; a reporter thread instead would have to win the GIL from
  the next task, which a CPU-bound Python task holds for 5 ms at a time.
- worker_ready: register this worker's slots for the lanes it consumes (the
  scheduler's window is the live slots plus headroom; refused, and logged
  as an ERROR, while another live process holds the same node name), run
  the reconcilers (rebuild held state from the database), and start the
  ticker thread that reaps expired leases and releases delayed and
  throttled jobs.
- worker_ready and every third of FAIR_WORKER_TTL_S after (draining too):
  say which of each lane's jobs this process holds (taken from the queue:
  waiting for a pool slot or running), so that a released job whose message
  is in no queue and held by no live process (its worker was killed with
  it, or Redis was down at its warm shutdown) is offered again within
  seconds, not when its release lease runs out (scheduler.holding).
- worker_shutdown: unregister, so the window shrinks at once.
- worker_shutdown and worker_process_shutdown (a prefork child, which
  leaves by os._exit, without atexit): send the held jobs' task-sent
  events still buffered (monitor.py), so Flower lists the last ones.
- task_failure with WorkerLostError / TimeLimitExceeded (the prefork main
  process, when a child died or was killed at its hard limit): hand the job
  to its lost-handler (settings.FAIR_LOST_HANDLERS), or just free its slot.
- task_revoked / task_unknown: Celery discarded a released message without
  running it; the job is handed back (or, unknown, its slot freed), so no
  message Celery drops leaves a slot held until a lease runs out.
- Messages carry ids of their own (`<job id>@<random>`); everything here
  reports the job id (`job_id_of`).
- worker_shutting_down (SIGTERM, in the main process): mark the worker as
  draining (its children give back jobs they have not started), shrink the
  window, wait up to FAIRLANE_SHUTDOWN_GRACE_S for running jobs, then ask
  each one's interrupt-handler to hand it back (FAIR_INTERRUPT_HANDLERS).
- A task that returns HANDED_BACK has given its job back to the
  scheduler (or the job is another delivery's): no finish is reported.
- Scale-in protection (protection.py, FAIRLANE_SCALE_PROTECTION): from
  worker_ready a thread keeps the host protected while the main process
  holds fetched or running requests, or held one within
  FAIRLANE_IDLE_UNPROTECT_S; task_received (main process, as a message is
  fetched) wakes it at once; worker_shutting_down ends it for good (an
  unprotect, never a protect again).

Signals fire in the process that runs the task: a prefork child or a thread
of the threads pool, hence the per-process state under a lock.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from billiard.exceptions import WorkerLostError
from celery import shared_task, signals
from celery.exceptions import TimeLimitExceeded
from django.conf import settings
from django.db import close_old_connections
from django.utils.module_loading import import_string

from dispatcher import monitor, protection
from dispatcher.hosts import register_host, unregister_worker_of_host
from dispatcher.service import (
    FAIR_GROUP_HEADER, FAIR_KEY_HEADER, HANDED_BACK, finish, hand_back_message, job_id_of, release_all, scheduler, set_draining,
)
from project.lanes import FAIR_LANES, Lane
from project.routing import UnroutedTaskError, lane_for

log = logging.getLogger(__name__)


@dataclass
class _Running:
    lane: Lane
    started: float  # monotonic
    key: str | None  # the job's fairness key, from its message (None: an older message without it)
    group: str | None = None  # its organisation, from its message (None: none, or an older message)
    reported: bool = False  # start() sent to the scheduler


_running: dict[str, _Running] = {}  # task id -> state, for this process's running fair jobs
_running_lock = threading.Lock()
_threads_started = threading.Event()
_threads_lock = threading.Lock()
_worker_lanes: list[tuple[str, Lane, int]] = []  # (worker name, lane, slots)
_loaded_at = time.time()  # about when this process started: with the pid, no later process's token
_refused: set[Lane] = set()  # lanes where another live process holds this worker's name
_stop = threading.Event()
_draining = threading.Event()  # SIGTERM received: no re-registration, no new jobs
_protection: protection.HostProtection | None = None  # this host's scale-in protection (main process)
# A message taken just before the scheduler looked for lost ones is listed
# by this process's next report; the margin covers the moment between taking
# it and noting it plus the report's round trip (scheduler.holding).
LOST_MESSAGE_MARGIN_S = 1.0
# The looks for lost messages are taken at most this often per lane, however
# many workers report (each look is O(window + queue + workers)).
LOST_MESSAGE_LOOK_EVERY_S = 1.0
# A job's start is reported to the scheduler only once it has run this long:
# most jobs are shorter, and their finish alone is enough (their release
# lease covers them meanwhile). Saves a round trip per short job.
START_REPORT_AFTER_S = 0.5


def _fair_lane(task_name: str) -> Lane | None:
    try:
        lane = lane_for(task_name)
    except UnroutedTaskError:
        return None
    return lane if lane in FAIR_LANES and settings.FAIR_DISPATCH_ENABLED else None


def _ensure_threads() -> None:
    """Start this process's lease thread (once per process: prefork
    children start their own after the fork)."""
    if _threads_started.is_set():
        return
    with _threads_lock:
        if not _threads_started.is_set():
            threading.Thread(target=_lease_loop, name="fair-leases", daemon=True).start()
            _threads_started.set()


@signals.task_prerun.connect
def _on_prerun(task_id: str, task, **kwargs) -> None:
    lane = _fair_lane(task.name)
    if lane is None:
        return
    with _running_lock:
        _running[job_id_of(task_id)] = _Running(lane, time.monotonic(), getattr(task.request, FAIR_KEY_HEADER, None),
                                                getattr(task.request, FAIR_GROUP_HEADER, None))
    _ensure_threads()


@signals.task_postrun.connect
def _on_postrun(task_id: str, task, retval=None, **kwargs) -> None:
    job_id = job_id_of(task_id)
    with _running_lock:
        entry = _running.pop(job_id, None)
    if entry is not None and retval != HANDED_BACK:
        _report(job_id, entry, time.monotonic() - entry.started)


def _report(job_id: str, entry: _Running, actual: float) -> None:
    try:
        scheduler(entry.lane).finish(job_id, actual_cost=actual, key=entry.key, group=entry.group)
    except Exception:  # Redis blip: the lease expires and the job's slot is reclaimed by reap
        log.exception("could not report the end of %s on %s", job_id, entry.lane)


def _lease_loop() -> None:
    """Report starts of jobs that run longer than START_REPORT_AFTER_S and
    renew running jobs' leases every third of a lease."""
    last_beat = time.monotonic()
    while not _stop.wait(START_REPORT_AFTER_S / 2):
        now = time.monotonic()
        with _running_lock:
            to_start = [(tid, e) for tid, e in _running.items()
                        if not e.reported and now - e.started >= START_REPORT_AFTER_S]
            beat_due = now - last_beat >= min(conf["run_lease_s"] for conf in settings.FAIR_LANES.values()) / 3
            to_beat = [(tid, e.lane) for tid, e in _running.items() if e.reported] if beat_due else []
        try:
            for tid, entry in to_start:
                # False: finished or cancelled meanwhile; nothing more to renew.
                entry.reported = scheduler(entry.lane).start(tid)
            if beat_due:
                last_beat = now
                by_lane: dict[Lane, list[str]] = {}
                for tid, lane in to_beat:
                    by_lane.setdefault(lane, []).append(tid)
                for lane, ids in by_lane.items():
                    scheduler(lane).heartbeat(ids)
        except Exception:  # Redis blip: the next round retries; the lease has slack for two misses
            log.exception("reporting starts/heartbeats failed")


@signals.task_failure.connect
def _on_task_failure(sender=None, task_id: str = "", exception: BaseException | None = None, **kwargs) -> None:
    """A prefork child died running `task_id`, or was killed at its hard time
    limit. Celery acknowledged the message (reject_on_worker_lost is off), so
    this is the only place that knows the job needs a decision now rather
    than when its lease runs out."""
    if not isinstance(exception, (WorkerLostError, TimeLimitExceeded)) or sender is None:
        return
    if _fair_lane(sender.name) is None:
        return
    reason = "timeout" if isinstance(exception, TimeLimitExceeded) else "lost"
    log.warning("task %s[%s]: worker child %s", sender.name, task_id, "timed out" if reason == "timeout" else "lost")
    job_id = job_id_of(task_id)
    try:
        handler = settings.FAIR_LOST_HANDLERS.get(sender.name)
        if handler:
            import_string(handler)(job_id=job_id, reason=reason)
        else:
            finish(sender.name, job_id)
    except Exception:  # the lease sweep is the safety net
        log.exception("could not handle the loss of %s", job_id)


@signals.task_revoked.connect
def _on_task_revoked(sender=None, request=None, terminated: bool = False, expired: bool = False,
                     **kwargs) -> None:
    """Celery discarded a released message: revoked (Flower, the control
    API) or expired. Celery acknowledges it and runs nothing, so without this
    the job would hold its window slot until its release lease runs out. The
    job goes back to the front of its backlog and is released again with a
    new message; its guarded start decides whether it still runs (a job
    canceled in the database is dropped then). A revoke that terminated a
    running child first lets the job's interrupt-handler end that attempt
    without counting it as a failure. To cancel a job, cancel it (admin,
    API): a revoke only discards one message."""
    if sender is None or request is None or (lane := _fair_lane(sender.name)) is None:
        return
    job_id = job_id_of(request.id)
    log.warning("task %s[%s] %s; its job is offered again", sender.name, request.id,
                "terminated" if terminated else "expired" if expired else "revoked")
    try:
        if terminated and sender.name in settings.FAIR_INTERRUPT_HANDLERS:
            import_string(settings.FAIR_INTERRUPT_HANDLERS[sender.name])(job_id=job_id)
        hand_back_message(lane, job_id)
    except Exception:  # the lease sweep is the safety net
        log.exception("could not hand back the revoked message of %s", job_id)


@signals.task_unknown.connect
def _on_task_unknown(sender=None, name: str = "", id: str = "", **kwargs) -> None:  # noqa: A002 (Celery's name)
    """A message for a task this worker does not know (a deploy where web and
    workers disagree) is rejected by Celery: free its slot; the database's
    reconciler offers the job again later, when a worker may know it."""
    if not id or _fair_lane(name) is None:
        return
    log.error("task %s[%s] unknown to this worker: its slot is freed", name, id)
    try:
        finish(name, job_id_of(id))
    except Exception:
        log.exception("could not free the slot of %s", id)


@signals.worker_shutting_down.connect
def _on_shutting_down(**kwargs) -> None:
    # Runs inside the main process's signal handler: the interrupted thread
    # may hold a connection pool's lock, so all I/O happens in a thread.
    if _protection is not None:
        _protection.shutdown()  # first: no protect request leaves after this
    if _worker_lanes and not _draining.is_set():
        _draining.set()
        threading.Thread(target=_drain, name="fair-drain", daemon=True).start()


def _drain() -> None:
    """The graceful half of a shutdown: no new jobs, a grace period for the
    running ones, then hand back whatever still runs."""
    from celery.worker import state  # the main process's view of its requests

    for name, lane, _ in _worker_lanes:
        try:
            if not _refused:  # the flag is by name: with a clash it would stop the other process too
                set_draining(name, True)
            scheduler(lane).unregister_worker(name, token=_instance())
        except Exception:
            log.exception("could not mark %s as draining", name)
    deadline = time.monotonic() + settings.FAIRLANE_SHUTDOWN_GRACE_S
    while time.monotonic() < deadline and _interruptible(state.active_requests):
        time.sleep(0.2)
    for request in _interruptible(state.active_requests):
        job_id = job_id_of(request.id)
        try:
            if import_string(settings.FAIR_INTERRUPT_HANDLERS[request.name])(job_id=job_id):
                log.warning("grace period over: job %s handed back", job_id)
        except Exception:
            log.exception("could not hand back %s", job_id)
    close_old_connections()


def _interruptible(requests) -> list:
    return [r for r in list(requests) if r.name in settings.FAIR_INTERRUPT_HANDLERS]


def reconcile() -> None:
    """Rebuild held state from the database (settings.FAIR_RECONCILERS)."""
    for path in settings.FAIR_RECONCILERS:
        try:
            count = import_string(path)()
            if count:
                log.warning("reconciler %s re-submitted %d job(s) the dispatcher had lost", path, count)
        except Exception:
            log.exception("reconciler %s failed", path)
    close_old_connections()


def _reconcile_if_due(hostname: str) -> None:
    """One worker in the cluster reconciles per FAIR_RECONCILE_S: the lock
    expires with the interval, so whoever comes next takes the turn."""
    lock = scheduler(_worker_lanes[0][1]).client.set(
        "fairlane:reconcile-lock", hostname, nx=True, ex=max(1, int(settings.FAIR_RECONCILE_S)))
    if lock:
        reconcile()


def _own_processes() -> list[int]:
    """This worker's main process and its pool's children (prefork), from /proc."""
    me, pids = os.getpid(), [os.getpid()]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == me:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return pids


def _instance() -> str:
    """This worker's instance token, pid@host/start time (the main process's):
    it tells this process apart from another live worker started with the
    same node name, whose registration the scheduler then refuses to share."""
    return f"{os.getpid()}@{settings.FAIRLANE_HOST_ID}/{_loaded_at:.0f}"


def _gone_from_this_host(token: str) -> bool:
    """Whether the instance `token` names a process of this host that is no
    longer running."""
    pid, _, rest = token.partition("@")
    if rest.rpartition("/")[0] != settings.FAIRLANE_HOST_ID or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's process: running
        return False
    return False


def _register(name: str, lane: Lane, slots: int) -> bool:
    """Renew this worker's registration in `lane`; False when another live
    process holds its name. A worker restarted after a crash (SIGKILL, OOM)
    finds its predecessor's registration still live until it expires: when
    that process was on this host and is gone, the name is taken over."""
    sched, ttl_s = scheduler(lane), settings.FAIR_WORKER_TTL_S
    if sched.register_worker(name, slots, ttl_s=ttl_s, token=_instance()):
        return True
    holder = sched.worker_token(name)
    if holder and _gone_from_this_host(holder):
        log.info("worker name %s: took over the registration of %s, which is gone", name, holder)
        return sched.register_worker(name, slots, ttl_s=ttl_s, token=_instance(), replaces=holder)
    return False


def _register_workers() -> None:
    """Renew this worker's slots in each lane's window and its host's list of
    live processes (dispatcher/hosts.py), both on Redis's clock. A lane where
    another live process holds this worker's name (two workers started with
    the same node name) refuses the registration: this worker's slots are not
    counted, which is logged as an ERROR once per clash; the host's list and
    the draining flag, kept by worker name, are left to the other process."""
    clashed = bool(_refused)
    for name, lane, slots in _worker_lanes:
        if _register(name, lane, slots):
            if lane in _refused:
                _refused.discard(lane)
                log.warning("worker name %s is this process's (%s) in lane %s now: its %d slots count",
                            name, _instance(), lane.value, slots)
        elif lane not in _refused:
            _refused.add(lane)
            log.error("worker name %s is already taken in lane %s by another live process (%s): this one (%s) "
                      "is not counted and does not drain by that name; give each worker a name of its own (-n)",
                      name, lane.value, scheduler(lane).worker_token(name), _instance())
    if _refused:
        return
    if clashed:  # the name is this process's now: a flag left by the other process is not this one's
        for name, _, _ in _worker_lanes:
            set_draining(name, False)
    register_host(settings.FAIRLANE_HOST_ID, _worker_lanes[0][0], _own_processes(), ttl_s=settings.FAIR_WORKER_TTL_S)


def _held_job_ids(lane: Lane) -> list[str]:
    """The jobs of `lane` this worker process holds: every request Celery has
    received and not finished (reserved, waiting for a slot, or running).
    The consumer adds them in the main thread; `list` copies the dict in one
    step under the GIL."""
    from celery.worker import state

    ids = []
    for task_id, request in list(state.requests.items()):
        if _fair_lane(request.name) == lane:
            ids.append(job_id_of(task_id))
    return ids


def _report_holdings() -> None:
    """Tell each lane which of its jobs this process holds; put back and
    release the jobs whose message the scheduler finds lost."""
    if not settings.FAIR_RECOVER_LOST_MESSAGES:
        return
    for _, lane, _ in _worker_lanes:
        sched = scheduler(lane)
        recovered = sched.holding(_instance(), _held_job_ids(lane), ttl_s=settings.FAIR_WORKER_TTL_S,
                                  margin_s=LOST_MESSAGE_MARGIN_S, every_s=LOST_MESSAGE_LOOK_EVERY_S)
        if recovered:
            log.warning("lane %s: %d released job(s) whose message was lost (in no queue, held by no live worker) "
                        "offered again: %s", lane.value, len(recovered), recovered[:10])
            sched.release()


def _ticker_loop() -> None:
    """Reap and release on a timer, as a safety net beside the event-driven
    releases (submit, finish). Sleeps until the scheduler's next due time,
    at most FAIR_TICK_S; renews this worker's registration."""
    last_register = last_reconcile = -float("inf")
    while not _stop.is_set():
        try:
            now = time.monotonic()  # intervals only: comparisons of instants are Redis's (one clock)
            if now - last_register > settings.FAIR_WORKER_TTL_S / 3:
                if not _draining.is_set():
                    _register_workers()
                _report_holdings()  # draining too: its jobs are still its own
                last_register = now
            if now - last_reconcile >= settings.FAIR_RECONCILE_S:
                last_reconcile = now
                _reconcile_if_due(_worker_lanes[0][0])
            release_all()
            due = [scheduler(lane).next_wakeup_in() for _, lane, _ in _worker_lanes]
            sleep_s = min([settings.FAIR_TICK_S, *[max(0.01, d) for d in due if d is not None]])
        except Exception:
            log.exception("fair ticker failed; retrying")
            sleep_s = settings.FAIR_TICK_S
        _stop.wait(sleep_s)


@signals.worker_ready.connect
def _on_worker_ready(sender, **kwargs) -> None:
    if not settings.FAIR_DISPATCH_ENABLED:
        return
    controller = sender.controller
    consumed = set(sender.app.amqp.queues.consume_from or ())
    for lane in FAIR_LANES:
        if lane.value in consumed:
            _worker_lanes.append((sender.hostname, lane, int(controller.concurrency)))
    if not _worker_lanes:
        return
    _register_workers()
    # Before the first message is taken: the event loop starts after this
    # signal (celery.worker.loops.asynloop), so no report ever misses one.
    _report_holdings()
    if not _refused:  # the name is this process's
        for name, _, _ in _worker_lanes:
            set_draining(name, False)  # the same name may have stopped before
    reconcile()
    release_all()
    threading.Thread(target=_ticker_loop, name="fair-ticker", daemon=True).start()


@signals.worker_ready.connect
def _start_protection(sender, **kwargs) -> None:
    """Scale-in protection for this host, unless none is configured."""
    global _protection
    try:
        provider = protection.provider_from_settings(settings)
    except ValueError as exc:  # misconfigured: say so at start, run unprotected
        log.error("scale-in protection %s is off: %s", settings.FAIRLANE_SCALE_PROTECTION, exc)
        return
    if provider.name == "none":
        return
    _protection = protection.HostProtection(provider, busy=_has_requests, idle_s=settings.FAIRLANE_IDLE_UNPROTECT_S)
    _protection.start()


def _has_requests() -> bool:
    """The main process holds a request: fetched (reserved, prefetched) or running."""
    from celery.worker import state

    return bool(state.requests)


@signals.task_received.connect
def _on_task_received(**kwargs) -> None:
    if _protection is not None:
        _protection.wake()  # protect now, not at the next tick


@signals.worker_shutdown.connect
def _on_worker_shutdown(**kwargs) -> None:
    _stop.set()
    if _protection is not None:
        _protection.join(timeout=5)  # its last word, the unprotect, goes out first
    for name, lane, _ in _worker_lanes:
        try:
            scheduler(lane).unregister_worker(name, token=_instance())
            if not _refused:
                unregister_worker_of_host(settings.FAIRLANE_HOST_ID, name)
        except Exception:
            log.exception("could not unregister %s from %s", name, lane)
    monitor.flush()


@signals.worker_process_shutdown.connect
def _on_process_shutdown(**kwargs) -> None:
    monitor.flush()


@shared_task(name="project.fair_reconcile", ignore_result=True)
def fair_reconcile() -> None:
    """Beat's safety net: rebuild lost held state and release what fits."""
    reconcile()
    release_all()
