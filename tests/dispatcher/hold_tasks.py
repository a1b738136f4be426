"""A job that runs until its test lets it go (tests/dispatcher/test_protection_worker.py,
tests/multihost/test_autoscaling.py):
the test, not the machine's speed, decides how long a worker is busy."""
from __future__ import annotations

import time

import redis
from celery import shared_task
from django.conf import settings

# How long a held job waits for its test at most (a test that died must not
# leave a worker busy for ever).
HOLD_MAX_S = 300


def flag(job_id: str, what: str) -> str:
    return f"test:hold:{job_id}:{what}"


@shared_task(name="bench.cpu.hold", ignore_result=True, bind=True)
def hold(self, job_id: str) -> None:
    """Runs until the test sets its "go" flag; "started" holds the name of
    the worker that runs it."""
    client = redis.Redis.from_url(settings.FAIR_REDIS_URL)
    client.set(flag(job_id, "started"), self.request.hostname or "?")
    deadline = time.monotonic() + HOLD_MAX_S
    while not client.exists(flag(job_id, "go")) and time.monotonic() < deadline:
        time.sleep(0.05)
    client.set(flag(job_id, "done"), 1)
