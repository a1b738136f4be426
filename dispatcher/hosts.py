"""Which worker hosts are alive, and which of their processes, as the hosts
themselves say.

A sweep on one host finds a running attempt whose lease ran out; the attempt
names the process that ran it (`<host id>:<pid>`). Only the host it ran on
can tell whether that process is still there: each worker's ticker registers
its host id with the pids of its processes (main and pool children), renewed
every FAIR_WORKER_TTL_S / 3 and expiring after FAIR_WORKER_TTL_S by Redis's clock (one
clock for every host). So any sweep can tell three cases apart:

- the host's registration expired: the host is gone (network cut, machine
  lost) — its jobs were lost, not crashed;
- the host is registered and does not list the process: it died on a live
  host — a crash, which counts toward `resource_limit` (a poison file);
- the host still lists the process: it stalled (or is just slow to renew).

Host ids are stable names (FAIRLANE_HOST_ID, default the host name), so a
restarted worker on the same host is the same host.
"""
from __future__ import annotations

import json

from dispatcher.service import scheduler
from project.lanes import Lane

HOST_KEY = "fairlane:host:{host}"


def _client():
    # The dispatcher's Redis (every lane shares it; the lane only picks the pool).
    return scheduler(Lane.CPU_TRANSCODE).client


def register_host(host_id: str, worker: str, pids: list[int], *, ttl_s: float) -> None:
    """Say that `worker` on `host_id` runs `pids`; valid for `ttl_s` from
    now (Redis's clock, via the key's expiry). Call again to renew."""
    key = HOST_KEY.format(host=host_id)
    with _client().pipeline(transaction=True) as pipe:
        pipe.hset(key, worker, json.dumps(sorted(pids)))
        pipe.pexpire(key, int(ttl_s * 1000))
        pipe.execute()


def unregister_worker_of_host(host_id: str, worker: str) -> None:
    """A worker stopped cleanly: its processes are not on the host any more."""
    _client().hdel(HOST_KEY.format(host=host_id), worker)


def host_processes(host_id: str) -> set[int] | None:
    """The pids the host says it runs, or None when its registration expired
    (the host is gone, or never registered)."""
    workers = _client().hgetall(HOST_KEY.format(host=host_id))
    if not workers:
        return None
    return {pid for pids in workers.values() for pid in json.loads(pids)}
