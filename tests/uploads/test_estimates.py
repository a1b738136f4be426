"""The batch finish estimate: a pure function of the remaining work and the
dispatcher's view, tested with numbers the test chooses; and that view,
read from a real dispatcher state."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from uploads.estimates import LaneShare, estimate_finish, lane_share_basis

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(("remaining", "jobs", "lane", "seconds", "share"), [
    # alone: every slot
    (400.0, 10, LaneShare(slots=4, weight=1.0, active_weight=1.0, cap=None), 100.0, 1.0),
    # one other user of equal weight: half the slots
    (400.0, 10, LaneShare(slots=4, weight=1.0, active_weight=2.0, cap=None), 200.0, 0.5),
    # twice the weight of the one other user: two thirds
    (400.0, 10, LaneShare(slots=3, weight=2.0, active_weight=3.0, cap=None), 200.0, 0.6667),
    # a cap of one job in flight: one slot whatever the share
    (400.0, 10, LaneShare(slots=4, weight=1.0, active_weight=1.0, cap=1), 400.0, 1.0),
    # two files left cannot use four slots
    (100.0, 2, LaneShare(slots=4, weight=1.0, active_weight=1.0, cap=None), 50.0, 1.0),
    # the snapshot may not count the user yet: never more than all the slots
    (100.0, 10, LaneShare(slots=2, weight=1.0, active_weight=0.0, cap=None), 50.0, 1.0),
])
def test_the_estimate_divides_the_remaining_work_by_the_users_share_of_the_slots(remaining, jobs, lane, seconds,
                                                                                  share):
    estimate = estimate_finish(remaining_worker_s=remaining, unfinished_jobs=jobs, lane=lane, now=NOW)
    assert estimate.seconds == seconds and estimate.share == share
    assert (estimate.finish_at - NOW).total_seconds() == pytest.approx(seconds)
    assert estimate.as_dict()["kind"] == "estimate" and estimate.remaining_worker_s == remaining


@pytest.mark.parametrize(("jobs", "lane"), [
    (0, LaneShare(slots=2, weight=1.0, active_weight=1.0, cap=None)),  # nothing left
    (3, None),  # the dispatcher could not be asked
    (3, LaneShare(slots=0, weight=1.0, active_weight=1.0, cap=None)),  # no slots
])
def test_no_estimate_without_work_or_a_basis(jobs, lane):
    assert estimate_finish(remaining_worker_s=10.0, unfinished_jobs=jobs, lane=lane, now=NOW) is None


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
    assert basis == LaneShare(slots=slots, weight=3.0, active_weight=4.0, cap=None)
    # A user with nothing queued is assumed to join them, with its plan's weight (default 1).
    assert lane_share_basis(user_id=carol.pk).active_weight == 5.0
