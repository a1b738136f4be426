"""What one job costs the dispatcher's Redis, in commands (those its scripts
run included), counted by a private server's INFO commandstats: the Redis
every worker host shares saturates at its commands per second, so this is
the ceiling of the whole system. Deterministic (the same scripts run the
same commands), unlike timings; `make bench-fairness` measures the whole
path with Celery's own commands beside it."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.ports import free_port
from dispatcher.scheduler import NO_RATE_LIMIT, FairScheduler

USERS, JOBS_PER_USER, SLOTS = 20, 5, 2
# Steady state of a lane with backlogs: a submit finds no room (it stores the
# job and reads the window); a finish corrects its key's charge, forgets the
# job and releases one, pushing its message. EVALSHA counted.
SUBMIT_BUDGET, FINISH_BUDGET = 9.0, 19.0


@pytest.fixture
def private_redis() -> Iterator[redis.Redis]:
    from project import embedded_redis

    data_dir, port = Path(tempfile.mkdtemp(prefix="fairlane-cost-redis-")), free_port()
    proc = embedded_redis.spawn(data_dir, port, persist=False)
    try:
        yield redis.Redis(port=port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(data_dir, ignore_errors=True)


def _calls(client: redis.Redis) -> int:
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k != "cmdstat_info")


def test_a_job_costs_at_most_its_budget_of_commands(private_redis):
    sched = FairScheduler(private_redis, "cost", headroom=0, queue="cost-queue")
    sched.register_worker("w", SLOTS, ttl_s=3600)
    sched.submit_and_release("warm-up", "warm-up", payload="m ~release~")  # loads the scripts
    sched.finish("warm-up", actual_cost=1.0)

    jobs = [(f"u{u}-{j}", f"u{u}") for j in range(JOBS_PER_USER) for u in range(USERS)]
    before = _calls(private_redis)
    for job_id, key in jobs:
        # As the service submits: the whole policy with every job.
        sched.submit_and_release(job_id, key, cost=1.0, payload=f"{job_id} ~release~", weight=1.0, cap=0,
                                 rate=NO_RATE_LIMIT)
    submitted = _calls(private_redis)
    finished = own = 0  # own: this test's ZRANGEs, not the dispatcher's
    while True:
        own += 1
        in_flight = [i.decode() for i in private_redis.zrange(sched.prefix + "inflight", 0, -1)]
        if not in_flight:
            break
        for job_id in in_flight:
            sched.finish(job_id, actual_cost=1.5)  # the measured cost differs from the estimate
            finished += 1
    after = _calls(private_redis) - own

    assert finished == len(jobs)
    assert private_redis.llen("cost-queue") == 1 + len(jobs)  # every job was released and pushed once
    per_submit = (submitted - before) / len(jobs)
    per_finish = (after - submitted) / len(jobs)
    assert per_submit <= SUBMIT_BUDGET, f"{per_submit:.2f} commands per submit"
    assert per_finish <= FINISH_BUDGET, f"{per_finish:.2f} commands per finish"
