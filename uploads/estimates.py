"""When will a batch be done? An estimate, labelled as one, with its basis.

The model is the fair dispatcher's own (dispatcher/__init__.py): a user's
transcode backlog runs in order, and while several users wait, each gets
worker time in proportion to their weight. So what stands between now and a
batch's last file is the user's remaining estimated work up to and including
that batch (jobs' `cost_estimate`, in worker seconds: from the file size
until the probe, from the media after it; a running job counts by what its
progress says is left), and the rate at which the user gets work done is

    throughput = min(slots x weight / (sum of the weights of the users who
                     have work now), the user's cap, jobs the user has left)

worker seconds per second: a job runs on one slot, so a user with two jobs
left cannot use ten slots. The estimate assumes today's competition lasts;
it is pessimistic when others are about to finish, and a user alone gets
every slot. `estimate_finish` is a pure function, tested with controlled
numbers; `lane_share_basis` reads its inputs from the dispatcher.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import redis

import dispatcher
from project.lanes import Lane
from uploads.services import fair_policies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaneShare:
    """The dispatcher's view of one user on the transcode lane, now."""

    slots: int  # worker slots of the lane (its window less the headroom)
    weight: float  # the user's weight
    active_weight: float  # sum of the weights of every user with work held or in flight, the user included
    cap: int | None  # the user's concurrency cap, if any


@dataclass(frozen=True)
class FinishEstimate:
    finish_at: datetime
    seconds: float
    remaining_worker_s: float
    share: float  # of the lane's slots assumed for the user
    throughput_worker_s_per_s: float
    slots: int

    def as_dict(self) -> dict:
        return {**asdict(self), "kind": "estimate",
                "basis": "remaining estimated worker seconds / (slots x fair share, at most the user's cap "
                         "and unfinished jobs); assumes the current competition lasts"}


def estimate_finish(*, remaining_worker_s: float, unfinished_jobs: int, lane: LaneShare | None,
                    now: datetime) -> FinishEstimate | None:
    """None when there is nothing left to do or no basis to estimate on."""
    if unfinished_jobs <= 0 or lane is None or lane.slots <= 0 or lane.weight <= 0:
        return None
    share = min(1.0, lane.weight / max(lane.active_weight, lane.weight))
    throughput = lane.slots * share
    if lane.cap:
        throughput = min(throughput, float(lane.cap))
    throughput = min(throughput, float(unfinished_jobs))
    seconds = max(0.0, remaining_worker_s) / throughput
    return FinishEstimate(finish_at=now + timedelta(seconds=seconds), seconds=round(seconds, 1),
                          remaining_worker_s=round(max(0.0, remaining_worker_s), 1), share=round(share, 4),
                          throughput_worker_s_per_s=round(throughput, 3), slots=lane.slots)


def lane_share_basis(*, user_id: int) -> LaneShare | None:
    """The user's LaneShare from the lane's summary and the user's own key,
    two O(1) reads however many users have work (every batch poll asks);
    None when Redis cannot answer (the batch is still shown, without an
    estimate)."""
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    try:
        summary = sched.summary()
        mine = sched.key_policy(str(user_id))
    except redis.RedisError as exc:
        log.warning("no finish estimate: the dispatcher's state is unreachable (%r)", exc)
        return None
    busy = mine is not None and mine[2]
    if busy:
        weight, cap = mine[0], mine[1] or None
    else:  # nothing held or in flight right now: the plan as the dispatcher would apply it
        policy = fair_policies(user_ids=[user_id], lane=Lane.CPU_TRANSCODE).get(user_id)
        weight, cap = (policy.weight, policy.cap) if policy else (1.0, None)
    others = summary["active_weight"] - (weight if busy else 0.0)
    return LaneShare(slots=max(0, int(summary["window"]) - sched.headroom), weight=weight,
                     active_weight=max(0.0, others) + weight, cap=cap)
