"""Synthetic jobs of known cost for the fairness benchmark and tests.

They record when they ran in Redis (not the database) so that measuring them
adds nothing the plain-Celery baseline would not pay. `spin` burns CPU for
its cost (a real prefork slot is busy, as with ffmpeg); `noop` measures pure
dispatch overhead. Routed by the `bench.cpu.` / `bench.io.` prefixes.
"""
from __future__ import annotations

import json
import os
import time

import redis
from celery import shared_task
from django.conf import settings

RUNS_KEY = "bench:runs"
_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.FAIR_REDIS_URL)
    return _client


def _record(job_id: str, key: str, started: float) -> None:
    client().hset(RUNS_KEY, job_id, json.dumps({"key": key, "start": started, "end": time.time(), "pid": os.getpid()}))


@shared_task(name="bench.cpu.spin", ignore_result=True)
def spin(job_id: str, key: str, cost_ms: float) -> None:
    started = time.time()
    deadline = time.perf_counter() + cost_ms / 1000.0
    while time.perf_counter() < deadline:
        pass
    _record(job_id, key, started)


@shared_task(name="bench.cpu.noop", ignore_result=True)
def noop(job_id: str, key: str) -> None:
    client().incr("bench:noop_done")
