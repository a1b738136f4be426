"""Held jobs in Flower: the task-sent events a fair lane owes its monitor.

Flower builds its task list from Celery's task events. A task published at
once announces itself with a task-sent event (`task_send_sent_event`); a
fair job's message is pushed by the dispatcher's release script, later, so
without help Flower would learn of a job only when a worker receives it, and
a user's 2,000 held files would be invisible. The submitter therefore
chooses the id its job's first released message will carry
(`<job id>@<tag>`, message.new_tag) and sends Celery's own task-sent event
for that id when the dispatcher accepts the job: Flower lists it as PENDING,
and the worker's events for the same id (received, started, succeeded or
failed) move that one entry on, as for any Celery task.

A held job's kwargs in Flower name its owner (the fair lane's tasks take no
keyword arguments; the worker's task-received replaces them with the real
ones, "{}", once it runs). A job handed back with a new message (a retry) is
announced again under its next id. A held job that is canceled is announced
once more, as canceled, so no PENDING entry outlives its job unexplained.
Only task-sent events (client events) are sent: any other task event names
a worker, and Flower would list the sender as a worker that is offline.

Sent only when `task_send_sent_event` is on (Celery's own switch for
exactly this event), and in batches, as the workers send theirs
(project/event_batching.py): one Redis PUBLISH per submit was one of the
~28 commands a job costs, and a submitter enqueuing hundreds of jobs a
second would spend hundreds of them. The events wait in a buffer of the
process and leave as one `task.multi` message, which event receivers unpack
(celery/events/receiver.py), FAIRLANE_EVENT_FLUSH_S (0.1 s) after the oldest
was announced, or once BATCH_LIMIT wait. A daemon thread, started by the
first event, publishes them: a submit only appends to a list and never waits
for the broker. Each event keeps the time it was announced, Flower's "sent".

The price of the wait: a job released at once (a lane that keeps up) can
reach a worker before its task-sent leaves, and the worker's task-received
(batched too) can then reach Flower first. Flower keeps the worker's state
(a task-sent never moves a task back) but takes the late event's kwargs:
such a job shows its owner where "{}" would be.

What is still buffered leaves at a clean exit (atexit; a prefork child,
which leaves by os._exit, flushes on worker_process_shutdown, in
dispatcher/worker.py) and whenever `flush()` is called. A process killed
outright loses up to one period of lines in Flower, never a job, as does a
broker that refuses a batch (a warning in the log). A forked child (gunicorn
and prefork workers, after the module is loaded) starts with an empty buffer
and no thread: the buffered events are its parent's to send, and the
buffer's lock may have been held by the parent's thread at the fork.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from celery import Celery
from django.conf import settings

from dispatcher.message import RELEASE_TAG

log = logging.getLogger(__name__)

# The most events one message carries, and how many make the buffer leave
# before its period is up. Not Celery's 24: that suits a worker's three
# events per task; a submitter at 500 jobs a second would fill it twice per
# 0.1 s period. 100 keeps one publish per period up to 1,000 announcements
# a second, in a message of at most ~70 KB (a task-sent event is ~510 bytes
# of JSON, base64 in kombu's envelope).
BATCH_LIMIT = 100


@dataclass(frozen=True)
class Held:
    """A job the dispatcher accepted: its task-sent fields (message.Built.event,
    with RELEASE_TAG in the uuid), the tag its first message will carry, and
    its fairness key."""

    event: dict
    tag: str
    key: str
    group: str | None = None  # its organisation (the policy's group), if any


def announce_held(app: Celery, jobs: Iterable[Held]) -> None:
    """task-sent for each held job under its future message id: PENDING in Flower.
    Its root id is its own message id too when it has no parent task (the
    release puts the tag wherever the placeholder is, root id included)."""
    _send(app, [{**held.event, **{field: held.event[field].replace(RELEASE_TAG, held.tag)
                                  for field in ("uuid", "root_id") if held.event.get(field)},
                 "kwargs": repr({"owner": owner_label(held.key),
                                 **({"organisation": group_label(held.group)} if held.group else {})})}
                for held in jobs])


def announce_canceled(app: Celery, held: Iterable[tuple[str, str, str]]) -> None:
    """A task-sent again for each (job id, tag, key) canceled while held: the
    entry stays PENDING (only a worker's events change a state without
    Flower inventing a worker), its kwargs say it was canceled."""
    _send(app, [{"uuid": f"{job_id}@{tag}", "kwargs": repr({"owner": owner_label(key), "canceled": True})}
                for job_id, tag, key in held])


def enabled(app: Celery) -> bool:
    return bool(app.conf.task_send_sent_event)


def flush() -> None:
    """Publish what is buffered now. Returns once those events, and a batch
    the background thread was sending, have left or been given up on
    (tests, shutdown hooks)."""
    _outbox.flush()


def _send(app: Celery, events: list[dict]) -> None:
    if not events or not enabled(app):
        return
    now = time.time()  # Flower's "sent": when announced, not when the batch leaves
    try:
        _outbox.add(app, [{**fields, "timestamp": now} for fields in events])
    except Exception:  # no thread to be had (interpreter shutdown): left for the exit's flush
        log.warning("could not schedule the announcement of %d held job(s)", len(events), exc_info=True)


class _Outbox:
    """The process's task-sent events not yet published, and the daemon
    thread that publishes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the thread: a first event, or a full buffer
        self._events: list[tuple[Celery, dict]] = []
        self._oldest_at = 0.0  # time.monotonic() of the oldest buffered event
        self._thread: threading.Thread | None = None
        # One batch leaves at a time, so that flush() returns only after a
        # batch the thread took before it has left too (the last events at exit).
        self._publishing = threading.Lock()

    def add(self, app: Celery, events: list[dict]) -> None:
        with self._lock:
            if not self._events:
                self._oldest_at = time.monotonic()
                self._wake.notify()
            self._events.extend((app, fields) for fields in events)
            if len(self._events) >= BATCH_LIMIT:
                self._wake.notify()
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="fair-monitor-events", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._events:
                    self._wake.wait()
                while 0 < len(self._events) < BATCH_LIMIT:
                    left = self._oldest_at + settings.FAIRLANE_EVENT_FLUSH_S - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
            self.flush()

    def flush(self) -> None:
        with self._publishing:
            with self._lock:
                events, self._events = self._events, []
            for app, batch in _batches(events):
                _publish(app, batch)


def _batches(events: list[tuple[Celery, dict]]) -> Iterator[tuple[Celery, list[dict]]]:
    """The events by app (in practice one), at most BATCH_LIMIT to a message."""
    by_app: dict[Celery, list[dict]] = {}
    for app, fields in events:
        by_app.setdefault(app, []).append(fields)
    for app, fields in by_app.items():
        for start in range(0, len(fields), BATCH_LIMIT):
            yield app, fields[start:start + BATCH_LIMIT]


def _publish(app: Celery, events: list[dict]) -> None:
    try:
        # Buffered per group: one message ("task.multi") for the whole list.
        with app.amqp.producer_pool.acquire(block=True) as producer, app.events.Dispatcher(
                producer.connection, channel=producer.channel, buffer_group=["task"], buffer_limit=len(events) + 1,
                buffer_while_offline=False) as dispatcher:
            for fields in events:
                dispatcher.send("task-sent", **fields)
            dispatcher.flush()
    except Exception:  # monitoring only: the jobs themselves are safe in the dispatcher
        log.warning("could not announce %d held job(s) to the event stream", len(events), exc_info=True)


def _forget_after_fork() -> None:
    global _outbox
    _outbox = _Outbox()


_outbox = _Outbox()
os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(flush)


@functools.lru_cache(maxsize=10_000)
def owner_label(key: str) -> str:
    """The fairness key as people know it: a user's name for a user id (the
    lanes' keys), cached per process (a monitoring label, renames show after
    a restart); anything else as it is."""
    if not key.isdigit():
        return key
    from django.contrib.auth import get_user_model

    name = get_user_model().objects.filter(pk=int(key)).values_list("username", flat=True).first()
    return name or key


@functools.lru_cache(maxsize=10_000)
def group_label(group: str) -> str:
    """A group (an organisation) as people know it: its name, from
    FAIR_GROUP_NAMES (the dispatcher does not know organisations), cached
    per process like owner_label; the group itself when it has none."""
    if not settings.FAIR_GROUP_NAMES:
        return group
    from django.utils.module_loading import import_string

    return import_string(settings.FAIR_GROUP_NAMES)(keys=[group]).get(group, group)
