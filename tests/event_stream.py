"""Celery's task events as they cross the broker, one list per message
(`task.multi`): for the tests that check how events are batched
(tests/e2e/test_event_batching.py, tests/dispatcher/test_monitor.py)."""
from __future__ import annotations

import base64
import json

import redis
from django.conf import settings


def subscribe() -> redis.client.PubSub:
    """A subscription to the event exchange, in place when this returns."""
    pubsub = redis.Redis.from_url(settings.CELERY_BROKER_URL).pubsub()
    pubsub.psubscribe("*celeryev*")
    confirmed = pubsub.get_message(timeout=10)
    assert confirmed and confirmed["type"] == "psubscribe", confirmed
    return pubsub


def task_event_batches(pubsub: redis.client.PubSub) -> list[list[dict]]:
    """Each task-event message published so far, as its list of events."""
    batches = []
    while (message := pubsub.get_message(timeout=0.2)) is not None:
        if message["type"] != "pmessage" or not message["channel"].endswith(b"celeryev/task.multi"):
            continue
        envelope = json.loads(message["data"])
        batches.append(json.loads(base64.b64decode(envelope["body"])))
    return batches
