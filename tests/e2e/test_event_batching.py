"""A worker's task events leave in batches (project/event_batching.py), not
one Redis PUBLISH each, and the batch still open when the worker stops is
sent then: Flower loses no task's end."""
from __future__ import annotations

import uuid

import pytest
from kombu import Queue

from bench.harness import Worker
from tests import workers
from tests.event_stream import subscribe, task_event_batches
from tests.promise import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TASK_EVENTS = ("task-received", "task-started", "task-succeeded")


def test_a_task_s_events_wait_for_the_batch_and_the_last_batch_is_sent_at_shutdown(tmp_path):
    from project.celery import app

    pubsub = subscribe()
    # A queue of its own, not a lane: other tests' jobs (a webhook's retry,
    # say) would fill Celery's buffer (24 events) and send ours early.
    queue = f"events-test-{uuid.uuid4().hex}"
    # A flush period longer than this test can take: a batch can only leave at shutdown.
    env = {"DATABASE_URL": workers.test_database_url(), "FAIRLANE_EVENT_FLUSH_S": "600",
           "FAIRLANE_TEST_QUEUE": queue}
    worker = Worker(queue, pool="threads", concurrency=2, name="io-events", log_dir=tmp_path,
                    suffix="events", loglevel="INFO", env=env, extra_args=(),
                    app="tests.e2e.private_queue_app")
    try:
        worker.wait_ready()
        task_id = app.send_task("project.fair_reconcile", queue=Queue(queue)).id
        wait_for(lambda: any(task_id in line and "succeeded" in line for line in worker.log_tail(400).splitlines()),
                 60, lambda: f"the task to run; worker log:\n{worker.log_tail()}", every=0.2)
        # Run and done, and not one of its events has left the worker.
        assert not [e for batch in task_event_batches(pubsub) for e in batch if e.get("uuid") == task_id]
    finally:
        worker.stop()
    ours = [[e["type"] for e in batch if e.get("uuid") == task_id] for batch in task_event_batches(pubsub)]
    # All three in one message, sent when the worker stopped.
    assert [types for types in ours if types] == [list(TASK_EVENTS)]
    pubsub.close()
