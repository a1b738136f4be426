"""One lane's steady state, driven through the dispatcher alone (no Celery),
for counting what a job costs its Redis: tests/dispatcher/test_redis_cost.py
holds the commands per job to a budget, and bench/redis_cost.py counts the
server's instructions for this code and an older version's.

A worker of 2 slots and no headroom; `users` users submit `per_user` jobs
each, round-robin, as the service submits (the whole policy with every job),
each with one submit-and-release call; then, with `finish`, every job in
flight is finished with a measured cost unlike its estimate, which releases
the next. Commands are INFO commandstats deltas (those run inside Lua
included), less this workload's own INFO and ZRANGE calls.

`python -m bench.dispatch_workload PORT USERS PER_USER [submit|all|keeping-up]`
prints the counts as JSON (keeping-up: `run_keeping_up` with USERS x
PER_USER jobs): bench/redis_cost.py runs it with an older version's
`dispatcher` first on the path.
"""
from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable

import redis

from dispatcher import NO_RATE_LIMIT, FairScheduler

MESSAGE = '{"body": "' + "x" * 1400 + '~release~"}'  # about a Celery message's size


def _group(user: str, groups: int) -> str | None:
    """User "u<n>"'s organisation when the workload has `groups` of them (0: none)."""
    return f"o{int(user[1:]) % groups}" if groups else None


def _policy(user: str, groups: int) -> dict:
    """The whole policy, as the service sends it with every job (a group's too)."""
    policy = {"weight": 1.0, "cap": 0, "rate": NO_RATE_LIMIT}
    if groups:
        policy.update(group=_group(user, groups), group_weight=1.0, group_cap=0, group_rate=NO_RATE_LIMIT)
    return policy


def _finisher(sched: FairScheduler, groups: int = 0) -> Callable[[str], object]:
    """Finish as the worker does, naming the job's key (ids here are
    "<key>-<n>") and group, unless the version under test (an older
    baseline) cannot."""
    parameters = inspect.signature(sched.finish).parameters
    if "group" in parameters:
        return lambda job_id: sched.finish(job_id, actual_cost=1.5, key=job_id.rpartition("-")[0],
                                           group=_group(job_id.rpartition("-")[0], groups))
    if "key" in parameters:
        return lambda job_id: sched.finish(job_id, actual_cost=1.5, key=job_id.rpartition("-")[0])
    return lambda job_id: sched.finish(job_id, actual_cost=1.5)


def _calls(client: redis.Redis) -> int:
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k != "cmdstat_info")


def run(client: redis.Redis, users: int, per_user: int, *, finish: bool = True, groups: int = 0) -> dict:
    """The workload on `client`'s server; commands counted per phase, and
    how many messages reached the lane's queue. `groups`: the users are
    members of that many organisations (user n of organisation n mod
    groups); 0, keys without one."""
    sched = FairScheduler(client, "cost", headroom=0, queue="cost-queue")
    finish_job = _finisher(sched, groups)
    sched.register_worker("w", 2, ttl_s=3600)  # also loads the function library
    before = _calls(client)
    for j in range(per_user):
        for u in range(users):
            sched.submit_and_release(f"u{u}-{j}", f"u{u}", cost=1.0, payload=MESSAGE, **_policy(f"u{u}", groups))
    submitted = _calls(client)
    finished = own = 0  # own: this workload's ZRANGEs, not the dispatcher's
    while finish:
        own += 1
        in_flight = [job_id.decode() for job_id in client.zrange(sched.prefix + "inflight", 0, -1)]
        if not in_flight:
            break
        for job_id in in_flight:
            finish_job(job_id)
            finished += 1
    return {"jobs": users * per_user, "finished": finished, "pushed": client.llen("cost-queue"),
            "submit_commands": submitted - before, "finish_commands": _calls(client) - submitted - own}


def run_keeping_up(client: redis.Redis, users: int, jobs: int, *, groups: int = 0) -> dict:
    """A lane whose workers keep up: `jobs` jobs of `users` users
    round-robin, each submitted (with the whole policy) and finished before
    the next, so that every submit finds its key idle and the window empty.
    Commands counted over the whole run (counting each call would add the
    counting's own instructions to bench/redis_cost.py's)."""
    sched = FairScheduler(client, "keeping-up", headroom=0, queue="keeping-up-queue")
    finish_job = _finisher(sched, groups)
    sched.register_worker("w", 2, ttl_s=3600)
    sched.release()  # a lane's first release notes that nothing is delayed
    released = 0
    before = _calls(client)
    for j in range(jobs):
        _, out = sched.submit_and_release(f"u{j % users}-{j}", f"u{j % users}", cost=1.0, payload=MESSAGE,
                                          **_policy(f"u{j % users}", groups))
        released += len(out)
        finish_job(f"u{j % users}-{j}")
    commands = _calls(client) - before  # before this workload's own LLEN
    return {"jobs": jobs, "released_by_submit": released, "pushed": client.llen("keeping-up-queue"),
            "commands": commands}


if __name__ == "__main__":
    port, users, per_user, phase = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if phase == "keeping-up":
        print(json.dumps(run_keeping_up(redis.Redis(port=port), users, users * per_user)))
    else:
        print(json.dumps(run(redis.Redis(port=port), users, per_user, finish=phase == "all")))
