"""What the benchmark's jobs record, the same way in every mode.

The three modes of bench/fairness.py run their jobs in different Celery apps
(Fairlane's, a plain app, a queue-per-user app), so the job bodies live here
and every app registers them under the same names: start and end times come
from the job itself, on this machine's one clock, and cost each mode the same
single Redis command per job. No Django: the plain apps have none.
"""
from __future__ import annotations

import json
import os
import time

import redis

RUNS_KEY = "bench:runs"
NOOP_DONE_KEY = "bench:noop_done"
_clients: dict[int, redis.Redis] = {}




def _env_url() -> str:
    return os.environ.get("FAIR_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6390/0"


# Where runs are recorded: the plain apps read the environment; the project's
# app (bench/tasks.py) points this at its settings, as its dispatcher does.
redis_url = _env_url


def client() -> redis.Redis:
    """One connection pool per process (prefork children get their own)."""
    pid = os.getpid()
    if pid not in _clients:
        _clients[pid] = redis.Redis.from_url(redis_url())
    return _clients[pid]


def spin(job_id: str, key: str, cost_ms: float) -> None:
    """Burn CPU for `cost_ms` (a real prefork slot is busy, as with ffmpeg)."""
    started = time.time()
    deadline = time.perf_counter() + cost_ms / 1000.0
    while time.perf_counter() < deadline:
        pass
    client().hset(RUNS_KEY, job_id, json.dumps({"key": key, "start": started, "end": time.time(),
                                                "pid": os.getpid()}))


def noop(job_id: str, key: str) -> None:
    """Nothing but one counter: pure dispatch overhead."""
    client().incr(NOOP_DONE_KEY)


def register(app) -> None:
    """The benchmark's tasks on `app`, under the names the fair lane routes."""
    app.task(name="bench.cpu.spin", ignore_result=True)(spin)
    app.task(name="bench.cpu.noop", ignore_result=True)(noop)
