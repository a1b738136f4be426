"""When will a batch be done? An estimate, labelled as one, with its range
and its basis.

The model is the fair dispatcher's own (dispatcher/__init__.py): a user's
transcode backlog runs in order, and while several users wait, each gets
worker time in proportion to their weight. So what stands between now and a
batch's last file is the user's unfinished work up to and including that
batch, and the rate at which the user gets through it is

    throughput = min(slots x weight / (sum of the weights of the users who
                     have work now), the user's cap, jobs the user has left)

slot seconds per second: a job runs on one slot, so a user with two jobs
left cannot use ten slots.

The work is counted per rate key (uploads/rates.py: images per file,
videos per second of input by frame size, a queued file by what its name
suggests) and priced at what the user's own finished files of that key
measured, leaning on every user's measurements while the user has few
(PRIOR_SAMPLES), and on the jobs' static estimates (`cost_estimate`) for a
key nobody has measured yet. Hence its uncertainty: the spread of one
job's time, which averages out over many files, and the uncertainty of
each rate itself, which does not; a rate borrowed from other users' files,
or a static guess, is much less sure (PRIOR_CV, UNMEASURED_CV). The range
is RANGE_Z of these standard deviations either side.

What it cannot know is the future competition: it assumes today's lasts,
so it is pessimistic when others are about to finish and optimistic when
others are about to start; a user alone gets every slot.
`estimate_finish` and `key_rate` are pure functions, tested with
controlled numbers; `lane_share_basis` and `batch_estimates` read their
inputs (the dispatcher's O(1) lane summary, two Redis hashes of rates).
"""
from __future__ import annotations

import logging
import math
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import redis

import dispatcher
from project.lanes import Lane
from uploads import rates
from uploads.rates import Rate
from uploads.selectors import KeyBacklog
from uploads.services import fair_policies

log = logging.getLogger(__name__)

# Until the user has this many samples of a key, the lane-wide rate counts
# as much as this many of the user's own (a shrinkage prior): one odd file
# does not set the estimate of the next thousand.
PRIOR_SAMPLES = 4
# How far another user's files (the lane-wide rate) may be from this
# user's: half again or half as much is common between a phone's photos
# and scans.
PRIOR_CV = 0.5
# A key nobody has measured is priced by the jobs' static estimates, which
# the first users found 2-3x off (issue 33).
UNMEASURED_CV = 1.0
# The range is the estimate +- 1.645 standard deviations: 90 % of outcomes
# if the errors were normal. docs/benchmarks.md has how often the real
# finish fell inside it.
RANGE_Z = 1.645
# An exponentially weighted mean of weight RATE_ALPHA is about as sure as a
# plain mean of this many samples.
EFFECTIVE_SAMPLES = (2 - rates.RATE_ALPHA) / rates.RATE_ALPHA


@dataclass(frozen=True)
class LaneShare:
    """The dispatcher's view of one user on the transcode lane, now."""

    slots: int  # worker slots of the lane (its window less the headroom)
    weight: float  # the user's weight
    active_weight: float  # sum of the weights of every user with work held or in flight, the user included
    cap: int | None  # the user's concurrency cap, or their organisation's when lower, if any
    # The fraction of the lane the dispatcher gives the user (their
    # organisation's share, then theirs within it); None: weight / active_weight.
    share: float | None = None


@dataclass(frozen=True)
class KeyRate:
    """What one unit of a rate key is taken to cost, and how sure that is."""

    seconds_per_unit: float
    cv_job: float  # relative spread of one job's time
    cv_rate: float  # relative uncertainty of seconds_per_unit itself
    source: str  # "yours", "yours and everyone's", "everyone's"
    samples: int  # the user's own


@dataclass(frozen=True)
class KeyEstimate:
    key: str
    unit: str
    jobs: int
    units: float
    seconds_per_unit: float | None  # None: not measured, the static estimates are used
    source: str
    samples: int
    worker_s: float


@dataclass(frozen=True)
class FinishEstimate:
    finish_at: datetime
    seconds: float
    seconds_low: float
    seconds_high: float
    remaining_worker_s: float
    uncertainty: float  # relative standard deviation of the remaining work
    share: float  # of the lane's slots assumed for the user
    throughput_worker_s_per_s: float
    slots: int
    by_key: tuple[KeyEstimate, ...]

    @property
    def finish_low_at(self) -> datetime:
        return self.finish_at + timedelta(seconds=self.seconds_low - self.seconds)

    @property
    def finish_high_at(self) -> datetime:
        return self.finish_at + timedelta(seconds=self.seconds_high - self.seconds)

    def as_dict(self) -> dict:
        body = asdict(self)
        body["rates"] = body.pop("by_key")
        return {**body, "finish_low_at": self.finish_low_at, "finish_high_at": self.finish_high_at,
                "kind": "estimate",
                "basis": "your unfinished work up to this batch, per kind of file, at the seconds per file (or per "
                         "second of video, or per MB before a file is probed) your finished files measured, / "
                         "(slots x fair share, at most your cap and unfinished files); assumes the current "
                         "competition lasts"}


def key_rate(mine: Rate | None, everyone: Rate | None) -> KeyRate | None:
    """The user's rate of a key, leaning on the lane-wide one while the
    user has few samples; None when neither has any."""
    if mine is None and everyone is None:
        return None
    if mine is None:
        return KeyRate(everyone.mean, everyone.cv, PRIOR_CV, "everyone's", 0)
    own_cv_rate = mine.cv / math.sqrt(min(mine.n, EFFECTIVE_SAMPLES))
    if mine.n >= EFFECTIVE_SAMPLES:
        return KeyRate(mine.mean, mine.cv, own_cv_rate, "yours", mine.n)
    # The prior's weight, and its uncertainty, fade as the user's samples grow;
    # without anyone else's rate a handful of samples is no surer (their own
    # spread, from so few, says little).
    w = mine.n / (mine.n + PRIOR_SAMPLES)
    cv_rate = math.hypot(w * own_cv_rate, (1 - w) * PRIOR_CV)
    if everyone is None:
        return KeyRate(mine.mean, mine.cv, cv_rate, "yours", mine.n)
    mean = w * mine.mean + (1 - w) * everyone.mean
    cv_job = mine.cv if mine.n >= PRIOR_SAMPLES else everyone.cv
    return KeyRate(mean, cv_job, cv_rate, "yours" if w >= 0.9 else "yours and everyone's", mine.n)


def estimate_finish(*, backlog: dict[str, KeyBacklog], rates_by_key: dict[str, KeyRate], lane: LaneShare | None,
                    now: datetime) -> FinishEstimate | None:
    """None when there is nothing left to do or no basis to estimate on."""
    jobs = sum(item.jobs for item in backlog.values())
    if jobs <= 0 or lane is None or lane.slots <= 0 or lane.weight <= 0:
        return None
    work, variance, by_key = 0.0, 0.0, []
    for key, item in sorted(backlog.items()):
        rate = rates_by_key.get(key)
        if rate is None:
            worker_s = max(0.0, item.cost_s)
            variance += (worker_s * UNMEASURED_CV) ** 2
        else:
            worker_s = max(0.0, item.units) * rate.seconds_per_unit
            # The rate's own error is shared by every file of the key; a
            # job's spread around it averages out over the key's files.
            variance += (worker_s * rate.cv_rate) ** 2 + item.jobs * (worker_s / item.jobs * rate.cv_job) ** 2
        work += worker_s
        by_key.append(KeyEstimate(key=key, unit=rates.UNITS.get(key, "cost_s"), jobs=item.jobs,
                                  units=round(item.units, 3),
                                  seconds_per_unit=None if rate is None else round(rate.seconds_per_unit, 4),
                                  source="not measured yet" if rate is None else rate.source,
                                  samples=0 if rate is None else rate.samples, worker_s=round(worker_s, 1)))
    share = lane.share if lane.share is not None else min(1.0, lane.weight / max(lane.active_weight, lane.weight))
    throughput = lane.slots * share
    if lane.cap:
        throughput = min(throughput, float(lane.cap))
    throughput = min(throughput, float(jobs))
    relative = math.sqrt(variance) / work if work > 0 else 0.0
    seconds = work / throughput
    # Multiplicative either side, so that a wide range never reaches below zero.
    spread = 1 + RANGE_Z * relative
    return FinishEstimate(finish_at=now + timedelta(seconds=seconds), seconds=round(seconds, 1),
                          seconds_low=round(seconds / spread, 1), seconds_high=round(seconds * spread, 1),
                          remaining_worker_s=round(work, 1), uncertainty=round(relative, 4), share=round(share, 4),
                          throughput_worker_s_per_s=round(throughput, 3), slots=lane.slots, by_key=tuple(by_key))


def lane_share_basis(*, user_id: int) -> LaneShare | None:
    """The user's LaneShare from the lane's summary and the user's own key,
    two O(1) reads however many users have work (every batch poll asks);
    None when Redis cannot answer (the batch is still shown, without an
    estimate)."""
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    try:
        summary = sched.summary()
        basis = sched.share_basis(str(user_id))
    except redis.RedisError as exc:
        log.warning("no finish estimate: the dispatcher's state is unreachable (%r)", exc)
        return None
    busy = basis["busy"]
    if busy:  # the two levels as the dispatcher applies them (issue 34): its share, its and its group's caps
        weight, share = basis["weight"], basis["share"]
        caps = [c for c in (basis["cap"], basis["group_cap"] if basis["group"] else 0) if c]
    else:  # nothing held or in flight right now: the plan as the dispatcher would apply it
        policy = fair_policies(user_ids=[user_id], lane=Lane.CPU_TRANSCODE).get(user_id) or dispatcher.KeyPolicy()
        weight = policy.weight
        # Its first job: its organisation joins the busy ones (were another member busy,
        # the basis would know the group; a newcomer alone in it gets all of the group's share).
        share = policy.group_weight / (summary["group_active_weight"] + policy.group_weight) if policy.group else None
        caps = [c for c in (policy.cap, policy.group_cap) if c]
    others = summary["active_weight"] - (weight if busy else 0.0)
    return LaneShare(slots=max(0, int(summary["window"]) - sched.headroom), weight=weight,
                     active_weight=max(0.0, others) + weight, cap=min(caps) if caps else None, share=share)


def user_rates(*, user_id: int) -> dict[str, KeyRate]:
    """Every key's KeyRate for the user (two Redis reads); none when Redis
    cannot answer (the static estimates are used)."""
    try:
        mine, everyone = rates.rates_for(user_id=user_id)
    except redis.RedisError as exc:
        log.warning("finish estimate without measured rates (%r)", exc)
        return {}
    return {key: rate for key in mine.keys() | everyone.keys()
            if (rate := key_rate(mine.get(key), everyone.get(key))) is not None}


def batch_estimates(*, user_id: int, backlogs: dict[uuid.UUID, dict[str, KeyBacklog]], now: datetime
                    ) -> dict[uuid.UUID, FinishEstimate | None]:
    """Each unfinished batch's estimate from one read of the lane and of
    the user's rates, whatever the number of batches."""
    if not backlogs:
        return {}
    lane = lane_share_basis(user_id=user_id)
    by_key = user_rates(user_id=user_id) if lane is not None else {}
    return {batch_id: estimate_finish(backlog=backlog, rates_by_key=by_key, lane=lane, now=now)
            for batch_id, backlog in backlogs.items()}
