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
exactly this event), one publish per call however many jobs, and never in
the way: a broker that refuses an event loses a line in Flower, not a job.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from celery import Celery

from dispatcher.message import RELEASE_TAG

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Held:
    """A job the dispatcher accepted: its task-sent fields (message.Built.event,
    with RELEASE_TAG in the uuid), the tag its first message will carry, and
    its fairness key."""

    event: dict
    tag: str
    key: str


def announce_held(app: Celery, jobs: Iterable[Held]) -> None:
    """task-sent for each held job under its future message id: PENDING in Flower."""
    _send(app, [{**held.event, "uuid": held.event["uuid"].replace(RELEASE_TAG, held.tag),
                 "kwargs": repr({"owner": owner_label(held.key)})} for held in jobs])


def announce_canceled(app: Celery, held: Iterable[tuple[str, str, str]]) -> None:
    """A task-sent again for each (job id, tag, key) canceled while held: the
    entry stays PENDING (only a worker's events change a state without
    Flower inventing a worker), its kwargs say it was canceled."""
    _send(app, [{"uuid": f"{job_id}@{tag}", "kwargs": repr({"owner": owner_label(key), "canceled": True})}
                for job_id, tag, key in held])


def enabled(app: Celery) -> bool:
    return bool(app.conf.task_send_sent_event)


def _send(app: Celery, events: list[dict]) -> None:
    if not events or not enabled(app):
        return
    try:
        # Buffered per group: one message ("task.multi") for the whole list,
        # which the event receiver unpacks (celery/events/receiver.py).
        with app.amqp.producer_pool.acquire(block=True) as producer, app.events.Dispatcher(
                producer.connection, channel=producer.channel, buffer_group=["task"], buffer_limit=len(events) + 1,
                buffer_while_offline=False) as dispatcher:
            for fields in events:
                dispatcher.send("task-sent", **fields)
            dispatcher.flush()
    except Exception:  # monitoring only: the job itself is safe in the dispatcher
        log.warning("could not announce %d held job(s) to the event stream", len(events), exc_info=True)


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
