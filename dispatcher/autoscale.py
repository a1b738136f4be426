"""What an autoscaler should know about a lane: its work in worker-seconds,
not in jobs, and the hosts that would clear it within a target.

2,000 thumbnails and 2,000 feature-length videos are the same number of
jobs; an autoscaler that counts jobs asks for fifty hosts for the first
(and pays at least one billing period for each) and a handful for the
second (and its customers wait hours). The scheduler keeps, in O(1), the
estimated cost of the jobs waiting and in flight, the measured worker
seconds served, and the recent measured / estimated ratio
(`FairScheduler.summary`); this module turns them into the numbers
/metrics publishes (project/metrics.py):

- work: (waiting + in-flight estimated cost) x the ratio. Estimates come
  from the file size before the probe and from the media after it; the
  ratio corrects them by what this lane's hosts really take. In-flight jobs
  count whole (their remaining part is not known): an over-estimate of at
  most one job per busy slot, which keeps a busy lane from being scaled in
  under its running jobs;
- suggested hosts: the hosts whose slots clear the work in `target_s`, but
  never more slots than jobs (a job runs on one slot: one 600 s video with
  a 300 s target needs one slot, not two).

Pure functions of the summary, so the benchmark's simulated autoscaler
(bench/autoscale.py) and /metrics compute the same thing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LaneWork:
    """One lane's work as an autoscaler sees it, at one moment."""

    waiting_jobs: int
    in_flight_jobs: int
    waiting_work_s: float  # cost-corrected estimated worker-seconds
    in_flight_work_s: float
    served_s: float  # measured worker-seconds of every attempt that ended: a counter
    cost_ratio: float  # measured / estimated, lately

    @property
    def jobs(self) -> int:
        return self.waiting_jobs + self.in_flight_jobs

    @property
    def work_s(self) -> float:
        return self.waiting_work_s + self.in_flight_work_s


def lane_work(summary: dict[str, Any]) -> LaneWork:
    """The work in a lane's `FairScheduler.summary()`. A ratio that is not a
    positive number (no finish yet) counts as 1: the estimates as they are."""
    ratio = float(summary.get("cost_ratio") or 1.0)
    if not math.isfinite(ratio) or ratio <= 0:
        ratio = 1.0
    return LaneWork(
        waiting_jobs=int(summary["waiting"]),
        in_flight_jobs=int(summary["in_flight"]),
        waiting_work_s=float(summary["waiting_cost_s"]) * ratio,
        in_flight_work_s=float(summary["in_flight_cost_s"]) * ratio,
        served_s=float(summary["served_s"]),
        cost_ratio=ratio,
    )


def suggested_hosts(*, work_s: float, jobs: int, target_s: float, slots_per_host: int) -> int:
    """Hosts of `slots_per_host` slots that run `work_s` worker-seconds of
    `jobs` jobs within `target_s`: ceil(min(jobs, work / target) / slots).
    0 when there is no job; at least 1 when there is one (however small)."""
    if jobs <= 0:
        return 0
    if target_s <= 0 or slots_per_host <= 0:
        raise ValueError("target_s and slots_per_host must be positive")
    slots = min(jobs, math.ceil(max(0.0, work_s) / target_s))
    return max(1, math.ceil(slots / slots_per_host))


def slots_per_host(live_slots: list[int], *, configured: int) -> int:
    """The slots of one worker host: `configured` when set (> 0), else the
    live workers' mean (one worker per host and lane), else 1."""
    if configured > 0:
        return configured
    live = [s for s in live_slots if s > 0]
    return max(1, round(sum(live) / len(live))) if live else 1
