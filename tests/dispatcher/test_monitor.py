"""Held jobs' task-sent events (dispatcher/monitor.py) leave a submitter in
batches: many announcements in one Redis PUBLISH, on their own within a
flush period, at once when the buffer is full, at a clean exit, and never
twice when the process forks. Real Redis and the project's Celery app; the
messages are counted on the event exchange itself, as Flower receives them."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import billiard
import pytest

from dispatcher import message, monitor
from dispatcher.service import celery_app
from tests.event_stream import subscribe, task_event_batches
from tests.promise import wait_for

ROOT = Path(__file__).resolve().parents[2]
# A period no test outlasts: only flush(), a full buffer or an exit sends.
NEVER_S = 3600


class Stream:
    """The task-event messages seen since the test subscribed."""

    def __init__(self) -> None:
        self.pubsub = subscribe()
        self.batches: list[list[dict]] = []

    def carrying(self, jobs: list[monitor.Held]) -> list[list[str]]:
        """The messages that carried any of `jobs`' events, as those events'
        ids (other processes' task events left out)."""
        ids = {_message_id(held) for held in jobs}
        self.batches += task_event_batches(self.pubsub)
        return [found for batch in self.batches if (found := [e["uuid"] for e in batch if e.get("uuid") in ids])]

    def wait_all(self, jobs: list[monitor.Held]) -> list[list[str]]:
        """Once every one of `jobs` was announced on the exchange: the
        messages that carried them."""
        ids = {_message_id(held) for held in jobs}
        wait_for(lambda: ids <= {i for found in self.carrying(jobs) for i in found}, 30,
                 lambda: f"{len(ids)} task-sent events, seen: {self.carrying(jobs)}")
        return self.carrying(jobs)  # and anything that came after them


@pytest.fixture
def stream():
    monitor.flush()  # nothing of an earlier test's
    events = Stream()
    yield events
    monitor.flush()
    events.pubsub.close()


def _held(owner: str = "owner-a") -> monitor.Held:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    built = message.build(celery_app(), "transcoding.job_run", [job_id], job_id=job_id, headers={}, options={})
    return monitor.Held(built.event, message.new_tag(), owner)


def _message_id(held: monitor.Held) -> str:
    return held.event["uuid"].replace(message.RELEASE_TAG, held.tag)


def test_announcements_within_one_period_leave_as_one_message(stream, settings):
    settings.FAIRLANE_EVENT_FLUSH_S = NEVER_S
    jobs = [_held() for _ in range(40)]
    for held in jobs:
        monitor.announce_held(celery_app(), [held])
    assert stream.carrying(jobs) == []  # none published by its announcement

    monitor.flush()

    assert stream.wait_all(jobs) == [[_message_id(held) for held in jobs]]


def test_announcements_leave_on_their_own_within_a_period_as_flower_reads_them(stream, settings):
    settings.FAIRLANE_EVENT_FLUSH_S = 0.1
    jobs = [_held("nightly") for _ in range(3)]
    monitor.announce_held(celery_app(), jobs)

    assert stream.wait_all(jobs) == [[_message_id(held) for held in jobs]]
    sent = [event for batch in stream.batches for event in batch if event["uuid"] == _message_id(jobs[0])]
    assert sent[0]["type"] == "task-sent" and sent[0]["name"] == "transcoding.job_run"
    assert sent[0]["kwargs"] == "{'owner': 'nightly'}"
    # A job submitted outside any task is its own root, under its message id
    # (as the worker's events for it will say), not under the placeholder.
    assert sent[0]["root_id"] == _message_id(jobs[0])


def test_a_full_buffer_leaves_without_waiting_for_its_period_in_messages_of_the_limit(stream, settings):
    settings.FAIRLANE_EVENT_FLUSH_S = NEVER_S
    jobs = [_held() for _ in range(monitor.BATCH_LIMIT + 20)]
    monitor.announce_held(celery_app(), jobs)

    assert [len(found) for found in stream.wait_all(jobs)] == [monitor.BATCH_LIMIT, 20]


def _announce_one_and_flush(held: monitor.Held) -> None:
    monitor.announce_held(celery_app(), [held])
    monitor.flush()


def test_a_forked_child_sends_its_own_events_and_not_its_parent_s(stream, settings):
    settings.FAIRLANE_EVENT_FLUSH_S = NEVER_S
    parents = [_held() for _ in range(5)]
    monitor.announce_held(celery_app(), parents)  # buffered in this process when it forks
    childs = _held()
    # As a prefork worker forks its children (billiard, Celery's own after-fork hooks run).
    child = billiard.get_context("fork").Process(target=_announce_one_and_flush, args=(childs,))
    child.start()
    child.join(60)
    assert child.exitcode == 0

    assert stream.wait_all([childs]) == [[_message_id(childs)]]  # alone in its message
    assert stream.carrying(parents) == []  # the parent's events still wait for the parent
    monitor.flush()
    assert stream.wait_all(parents) == [[_message_id(held) for held in parents]]  # once


EXITING_SUBMITTER = """
import sys
import django
django.setup()
from dispatcher import monitor
from dispatcher.service import celery_app
monitor.announce_held(celery_app(), [monitor.Held({"uuid": sys.argv[1], "name": "transcoding.job_run"}, sys.argv[2],
                                                   "owner-a")])
"""


def test_what_is_buffered_at_a_clean_exit_is_sent(stream):
    held = monitor.Held({"uuid": f"job-{uuid.uuid4().hex[:12]}@{message.RELEASE_TAG}"}, message.new_tag(), "owner-a")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "FAIRLANE_EVENT_FLUSH_S": str(NEVER_S)}
    subprocess.run([sys.executable, "-c", EXITING_SUBMITTER, held.event["uuid"], held.tag], cwd=ROOT, env=env,
                   check=True, timeout=120)

    assert stream.wait_all([held]) == [[_message_id(held)]]
