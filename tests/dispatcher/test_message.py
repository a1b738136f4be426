"""The message the release script pushes is the one `send_task` would push.

dispatcher/message.py rebuilds, at submit, what Celery and kombu's Redis
transport put in a queue; the worker decodes it like any other. These tests
pin that against the installed Celery and kombu: each sends the same task
through `send_task` into a real Redis queue and compares the raw message
with the pre-built one once its release tag is filled in. Only kombu's
delivery tag differs (a random uuid there, the message id here).

The app is the project's with its lanes swapped for a queue no worker
consumes (workers that other tests start would take the message first).
"""
from __future__ import annotations

import json

import pytest
from celery import Celery
from kombu import Queue

from dispatcher.message import RELEASE_TAG, build
from project.celery import app as project_app

PIN_QUEUE = "test-message-pin"


@pytest.fixture(scope="module")
def app() -> Celery:
    pinned = Celery("fairlane-message-pin")
    pinned.conf.update(project_app.conf)
    pinned.conf.update(task_queues=(Queue(PIN_QUEUE, routing_key=PIN_QUEUE),), task_default_queue=PIN_QUEUE,
                       task_routes=None)
    return pinned

TAG = "1763900000123456"  # what the release script puts in: microseconds on Redis's clock


def _sent(app: Celery, redis_client, queue: str, task_name: str, args: list, task_id: str, headers: dict, options: dict) -> dict:
    redis_client.delete(queue)
    app.send_task(task_name, args=args, task_id=task_id, headers=headers, **options)
    raw = redis_client.lrange(queue, 0, -1)
    assert len(raw) == 1
    return json.loads(raw[0])


@pytest.mark.parametrize(("task_name", "args", "options"), [
    ("transcoding.job_run", ["0b4f3c1e-job"], {"time_limit": 930, "soft_time_limit": 900}),
    ("notify.deliver", [17], {}),
    ("bench.cpu.spin", ["job-1", "user é/\"quoted\"", 12.5], {}),
])
def test_a_built_message_is_what_send_task_pushes(app, redis_client, task_name, args, options):
    headers = {"fairlane_lane": "some-lane", "fairlane_key": "user-7"}
    queue, stored, _ = build(app, task_name, args, job_id="job-1", headers=headers, options=options)
    built = json.loads(stored.replace(RELEASE_TAG, TAG))

    assert queue == PIN_QUEUE
    sent = _sent(app, redis_client, queue, task_name, args, f"job-1@{TAG}", headers, options)

    assert built["properties"].pop("delivery_tag") == f"job-1@{TAG}"
    sent["properties"].pop("delivery_tag")
    assert built == sent


def test_the_release_tag_appears_only_where_the_message_id_goes(app):
    _, stored, _ = build(app, "bench.cpu.spin", ["job-1", "~release", "release~"], job_id="job-1", headers={},
                      options={})
    message = json.loads(stored)
    assert stored.count(RELEASE_TAG) == 4
    assert message["headers"]["id"] == message["headers"]["root_id"] == f"job-1@{RELEASE_TAG}"
    assert message["properties"]["correlation_id"] == message["properties"]["delivery_tag"] == f"job-1@{RELEASE_TAG}"


def test_a_task_routed_elsewhere_than_a_plain_queue_is_refused(app):
    with pytest.raises(ValueError, match="pre-built"):
        build(app, "bench.cpu.spin", [], job_id="j", headers={}, options={"exchange": "elsewhere"})


@pytest.mark.parametrize(("task_name", "args", "options"), [
    ("transcoding.job_run", ["{job}"], {"time_limit": 930, "soft_time_limit": 900}),
    ("bench.cpu.spin", ["{job}", "user é/\"quoted\"", 12.5], {}),
    ("bench.cpu.spin", ["{job}", "{job}-suffix", ("a", 1)], {}),  # the id inside another value; a tuple
])
def test_the_next_jobs_messages_are_what_send_task_pushes_for_them(app, redis_client, task_name, args, options):
    """After the first of a batch, messages come from its template (the
    same text with the job's id and body put in): each must still be
    exactly what send_task pushes for that job."""
    headers = {"fairlane_lane": "some-lane", "fairlane_key": "user-7"}
    for job_id in ("0b4f3c1e-1111", "a2-second.job:7", "third_3"):
        job_args = [a.replace("{job}", job_id) if isinstance(a, str) else a for a in args]
        queue, stored, event = build(app, task_name, job_args, job_id=job_id, headers=headers, options=options)
        built = json.loads(stored.replace(RELEASE_TAG, TAG))
        sent = _sent(app, redis_client, queue, task_name, job_args, f"{job_id}@{TAG}", headers, options)
        assert built["properties"].pop("delivery_tag") == f"{job_id}@{TAG}"
        sent["properties"].pop("delivery_tag")
        assert built == sent
        assert event["uuid"] == f"{job_id}@{RELEASE_TAG}" and event["args"] == sent["headers"]["argsrepr"]


def test_a_template_serves_the_jobs_of_a_batch():
    """The point of it: a batch's jobs build one message the long way."""
    from dispatcher import message

    message._template.cache_clear()
    for i in range(5):
        build(project_app, "transcoding.job_run", [f"job-{i}"], job_id=f"job-{i}", headers={"h": "v"},
              options={"time_limit": 930})
    info = message._template.cache_info()
    assert (info.misses, info.hits) == (1, 4)
