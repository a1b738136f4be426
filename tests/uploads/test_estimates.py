"""The batch finish estimate: pure functions of the remaining work per kind,
the measured rates and the dispatcher's view, tested with numbers the test
chooses; and that view, read from a real dispatcher state."""
from __future__ import annotations

import math
import uuid
from datetime import datetime, timezone

import pytest

from uploads.estimates import (
    EFFECTIVE_SAMPLES, PRIOR_CV, PRIOR_SAMPLES, RANGE_Z, UNMEASURED_CV, KeyRate, LaneShare, estimate_finish, key_rate,
    lane_share_basis,
)
from uploads.rates import Rate
from uploads.selectors import KeyBacklog

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
ALONE = LaneShare(slots=2, weight=1.0, active_weight=1.0, cap=None)
SURE = KeyRate(seconds_per_unit=0.5, cv_job=0.0, cv_rate=0.0, source="yours", samples=100)
IMAGES = {"image": KeyBacklog(jobs=100, units=100.0, cost_s=5.0)}


@pytest.mark.parametrize(("backlog", "lane", "seconds", "share"), [
    # alone: every slot; 100 images at 0.5 s on 2 slots
    (IMAGES, LaneShare(slots=2, weight=1.0, active_weight=1.0, cap=None), 25.0, 1.0),
    # one other user of equal weight: half the slots
    (IMAGES, LaneShare(slots=2, weight=1.0, active_weight=2.0, cap=None), 50.0, 0.5),
    # twice the weight of the one other user: two thirds
    (IMAGES, LaneShare(slots=3, weight=2.0, active_weight=3.0, cap=None), 25.0, 0.6667),
    # a cap of one job in flight: one slot whatever the share
    (IMAGES, LaneShare(slots=4, weight=1.0, active_weight=1.0, cap=1), 50.0, 1.0),
    # two files left cannot use four slots
    ({"image": KeyBacklog(jobs=2, units=2.0, cost_s=1.0)}, LaneShare(slots=4, weight=1.0, active_weight=1.0, cap=None),
     0.5, 1.0),
    # the snapshot may not count the user yet: never more than all the slots
    (IMAGES, LaneShare(slots=2, weight=1.0, active_weight=0.0, cap=None), 25.0, 1.0),
])
def test_the_estimate_divides_the_remaining_work_by_the_users_share_of_the_slots(backlog, lane, seconds, share):
    estimate = estimate_finish(backlog=backlog, rates_by_key={"image": SURE}, lane=lane, now=NOW)
    assert estimate.seconds == seconds and estimate.share == share
    assert (estimate.finish_at - NOW).total_seconds() == pytest.approx(seconds)
    assert estimate.remaining_worker_s == sum(item.units for item in backlog.values()) * SURE.seconds_per_unit
    # Rates known exactly, files exactly alike: no range.
    assert estimate.seconds_low == estimate.seconds_high == seconds and estimate.uncertainty == 0.0
    assert estimate.as_dict()["kind"] == "estimate"


def test_each_kind_of_file_is_priced_at_its_own_rate_and_an_unmeasured_one_at_the_static_estimates():
    backlog = {"image": KeyBacklog(jobs=10, units=10.0, cost_s=3.0),
               "video:720": KeyBacklog(jobs=2, units=7.5, cost_s=12.0),  # 7.5 s of 720p video left
               "pre:pdf": KeyBacklog(jobs=4, units=4.0, cost_s=1.2)}  # nobody's PDFs measured yet
    rates_by_key = {"image": SURE, "video:720": KeyRate(2.0, 0.0, 0.0, "yours", 20)}
    estimate = estimate_finish(backlog=backlog, rates_by_key=rates_by_key, lane=ALONE, now=NOW)
    assert estimate.remaining_worker_s == pytest.approx(5.0 + 15.0 + 1.2)
    assert estimate.seconds == pytest.approx(21.2 / 2, abs=0.05)
    by_key = {k.key: k for k in estimate.by_key}
    assert by_key["video:720"].unit == "second" and by_key["video:720"].worker_s == 15.0
    assert by_key["pre:pdf"].seconds_per_unit is None and by_key["pre:pdf"].source == "not measured yet"
    # The only uncertainty is the unmeasured key's.
    assert estimate.uncertainty == pytest.approx(1.2 * UNMEASURED_CV / 21.2, abs=1e-4)


def test_the_range_counts_the_rates_own_error_whole_and_the_spread_of_single_files_averaged():
    """100 files at 1 s each, +-30 % from file to file, the rate itself
    known to +-10 %: the files' spread shrinks with their number (0.3 /
    sqrt(100)), the rate's does not."""
    rate = KeyRate(seconds_per_unit=1.0, cv_job=0.3, cv_rate=0.1, source="yours", samples=50)
    backlog = {"image": KeyBacklog(jobs=100, units=100.0, cost_s=0.0)}
    estimate = estimate_finish(backlog=backlog, rates_by_key={"image": rate}, lane=ALONE, now=NOW)
    relative = math.sqrt(0.1 ** 2 + 0.3 ** 2 / 100)
    assert estimate.uncertainty == pytest.approx(relative, abs=1e-4)
    assert estimate.seconds == 50.0
    spread = 1 + RANGE_Z * relative
    assert estimate.seconds_low == pytest.approx(50.0 / spread, abs=0.05)
    assert estimate.seconds_high == pytest.approx(50.0 * spread, abs=0.05)
    assert estimate.finish_low_at < estimate.finish_at < estimate.finish_high_at
    body = estimate.as_dict()
    assert body["finish_low_at"] == estimate.finish_low_at and body["rates"][0]["key"] == "image"


def test_a_very_uncertain_estimate_ranges_multiplicatively_and_never_below_zero():
    backlog = {"pre:other": KeyBacklog(jobs=3, units=30.0, cost_s=60.0)}
    estimate = estimate_finish(backlog=backlog, rates_by_key={}, lane=ALONE, now=NOW)
    assert estimate.seconds == 30.0 and estimate.uncertainty == UNMEASURED_CV
    assert estimate.seconds_low == pytest.approx(30.0 / (1 + RANGE_Z), abs=0.05)
    assert estimate.seconds_high == pytest.approx(30.0 * (1 + RANGE_Z), abs=0.05)


@pytest.mark.parametrize(("backlog", "lane"), [
    ({}, ALONE),  # nothing left
    (IMAGES, None),  # the dispatcher could not be asked
    (IMAGES, LaneShare(slots=0, weight=1.0, active_weight=1.0, cap=None)),  # no slots
])
def test_no_estimate_without_work_or_a_basis(backlog, lane):
    assert estimate_finish(backlog=backlog, rates_by_key={"image": SURE}, lane=lane, now=NOW) is None


EVERYONE = Rate(n=500, mean=2.0, var=0.36)  # cv 0.3
FEW = Rate(n=PRIOR_SAMPLES, mean=1.0, var=0.04)  # cv 0.2
MANY = Rate(n=200, mean=1.0, var=0.04)


@pytest.mark.parametrize(("mine", "everyone", "mean", "cv_job", "cv_rate", "source"), [
    # nobody's measured: no rate (the static estimates are used)
    (None, None, None, None, None, None),
    # only others' files: their rate, as unsure as another user's files are
    (None, EVERYONE, 2.0, 0.3, PRIOR_CV, "everyone's"),
    # a few of the user's own: half theirs, half everyone's
    (FEW, EVERYONE, 1.5, 0.2, math.hypot(0.5 * 0.2 / math.sqrt(PRIOR_SAMPLES), 0.5 * PRIOR_CV),
     "yours and everyone's"),
    # a few, and nobody else's: theirs, as unsure as if half of it were borrowed
    (FEW, None, 1.0, 0.2, math.hypot(0.5 * 0.2 / math.sqrt(PRIOR_SAMPLES), 0.5 * PRIOR_CV), "yours"),
    # many of the user's own: theirs alone, as sure as an EWMA of that many
    (MANY, EVERYONE, 1.0, 0.2, 0.2 / math.sqrt(EFFECTIVE_SAMPLES), "yours"),
])
def test_the_users_rate_leans_on_everyones_while_the_user_has_few_samples(mine, everyone, mean, cv_job, cv_rate,
                                                                          source):
    rate = key_rate(mine, everyone)
    if mean is None:
        assert rate is None
        return
    assert rate.seconds_per_unit == pytest.approx(mean)
    assert rate.cv_job == pytest.approx(cv_job) and rate.cv_rate == pytest.approx(cv_rate)
    assert rate.source == source and rate.samples == (mine.n if mine else 0)


@pytest.mark.django_db
def test_the_basis_is_the_dispatchers_view_of_who_has_work(make_user, cpu_lane_paused):
    """Two users with work held, weights 3 and 1: the first is assumed 3/4."""
    import dispatcher
    from dispatcher import KeyPolicy
    from project.lanes import Lane

    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    for user, weight in ((alice, 3.0), (bob, 1.0)):
        for _ in range(5):  # more than the window, so some stay held
            dispatcher.enqueue("transcoding.job_run", [str(uuid.uuid4())], task_id=str(uuid.uuid4()),
                               fair_key=str(user.pk), cost=10.0, policy=KeyPolicy(weight=weight))
    basis = lane_share_basis(user_id=alice.pk)
    slots = sched.snapshot()["totals"]["window"] - sched.headroom
    assert basis == LaneShare(slots=slots, weight=3.0, active_weight=4.0, cap=None, share=0.75)
    # A user with nothing queued is assumed to join them, with its plan's weight (default 1): an organisation of
    # one of weight 1 (tests/organisations/test_estimates.py has members of one).
    assert lane_share_basis(user_id=carol.pk).active_weight == 5.0
    assert lane_share_basis(user_id=carol.pk).share == pytest.approx(1 / 5)
