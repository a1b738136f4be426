"""Two-level fair dispatch against a real Redis: organisations (groups)
share a lane by their weights, their members what each organisation gets
by theirs (dispatcher/__init__.py). Shares are measured in worker time
(cost) over a fixed number of releases driven by simulated workers, so
the numbers are exact for the scheduler's order, not timing."""
from __future__ import annotations

import heapq
from collections import Counter, deque

import pytest
import redis

from dispatcher import FairScheduler, KeyPolicy
from dispatcher.service import FAIR_GROUP_HEADER
from tests.dispatcher.test_scheduler import Workers, owner

LANE = "test-groups"  # not a real lane: live workers of other tests must not touch it


@pytest.fixture
def sched(redis_client: redis.Redis) -> FairScheduler:
    """Ten slots and no headroom: window 10."""
    scheduler = FairScheduler(redis_client, LANE, headroom=0)
    scheduler.clear()
    scheduler.register_worker("w1", 10, ttl_s=3600, now=0)
    return scheduler


def flood(sched: FairScheduler, key: str, n: int, *, cost: float = 1.0, **settings) -> None:
    for i in range(n):
        assert sched.submit(f"{key}-{i}", key, cost=cost, now=0, **settings)


def shares(released: list[str], groups: dict[str, str], costs: dict[str, float] | None = None) -> dict[str, float]:
    """Each group's share of the worker time (cost) of `released`; `groups`: key -> group."""
    costs = costs or {}
    spent = Counter()
    for job_id in released:
        spent[groups[owner(job_id)]] += costs.get(owner(job_id), 1.0)
    total = sum(spent.values())
    return {g: spent[g] / total for g in set(groups.values())}


def test_an_organisation_alone_gets_the_whole_lane(sched):
    for member in ("a1", "a2", "a3"):
        flood(sched, member, 20, group="A")
    released = [j for j, _ in sched.release(now=0)]
    assert len(released) == 10  # work-conserving: every slot, whatever the number of members
    assert Counter(owner(j) for j in released) == {"a1": 4, "a2": 3, "a3": 3}  # round robin within A
    assert sched.snapshot(now=0)["groups"]["A"]["in_flight"] == 10


def test_a_member_alone_gets_all_of_its_organisation_s_share(sched):
    flood(sched, "solo", 300, group="A")
    for member in ("b1", "b2"):
        flood(sched, member, 300, group="B")
    released = Workers(sched).run(400)
    counts = Counter(owner(j) for j in released)
    # A's one member gets A's half; B's half is split between its two members.
    assert counts["solo"] == pytest.approx(200, abs=2)
    assert counts["b1"] == pytest.approx(100, abs=2) and counts["b2"] == pytest.approx(100, abs=2)


def test_fifty_members_flooding_get_one_organisation_s_share(sched):
    """Per-user fairness would give A 50 shares to B's one (~0.98:0.02)."""
    groups = {f"a{i}": "A" for i in range(50)} | {"b": "B"}
    for member in groups:
        flood(sched, member, 20 if member != "b" else 500, group=groups[member])
    got = shares(Workers(sched).run(800), groups)
    assert got["A"] == pytest.approx(0.5, abs=0.01) and got["B"] == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("costs", [{"a": 1.0, "b": 1.0}, {"a": 4.0, "b": 1.0}])
def test_organisations_weighted_1_to_3_share_worker_time_1_to_3(sched, costs):
    """In worker time, not jobs: with A's jobs 4x as long, B runs 12 jobs to A's one."""
    flood(sched, "a", 600, cost=costs["a"], group="A", group_weight=1.0)
    flood(sched, "b", 600, cost=costs["b"], group="B", group_weight=3.0)
    got = shares(Workers(sched).run(500), {"a": "A", "b": "B"}, costs)
    assert got["A"] == pytest.approx(0.25, abs=0.01) and got["B"] == pytest.approx(0.75, abs=0.01)


def test_members_weighted_1_to_2_split_their_organisation_s_share_1_to_2(sched):
    flood(sched, "light", 600, weight=1.0, group="A")
    flood(sched, "heavy", 600, weight=2.0, group="A")
    flood(sched, "other", 600, group="B")
    counts = Counter(owner(j) for j in Workers(sched).run(600))
    assert counts["other"] == pytest.approx(300, abs=2)  # B's half, whatever A's members weigh
    assert counts["heavy"] / counts["light"] == pytest.approx(2.0, rel=0.03)


def test_a_newcomer_organisation_s_first_job_waits_about_one_job(sched):
    """Whatever A holds (50 members, 1,000 jobs, some released long ago),
    B's first job is released next: among the first completions after it
    arrives, not behind A's backlog."""
    for i in range(50):
        flood(sched, f"a{i}", 20, group="A")
    workers = Workers(sched)
    workers.run(300)
    assert sched.submit("b-0", "b", group="B", now=0)
    later = workers.run(2)
    assert "b-0" == later[0], later  # the next slot that frees is B's


def test_finish_corrects_both_levels_by_the_measured_cost(sched):
    """Estimates say 1 s for everyone; A's jobs really take 3 s. Once
    corrected, A gets half of the worker time, not half of the jobs."""
    flood(sched, "a", 400, group="A")
    flood(sched, "b", 400, group="B")
    actual = {"a": 3.0, "b": 1.0}
    in_flight = deque(j for j, _ in sched.release(now=0))
    released = []
    while len(released) < 400:
        job_id = in_flight.popleft()
        more = [j for j, _ in sched.finish(job_id, actual_cost=actual[owner(job_id)], key=owner(job_id),
                                           group=owner(job_id).upper(), now=0)]
        released += more
        in_flight += more
    got = shares(released, {"a": "A", "b": "B"}, actual)
    assert got["A"] == pytest.approx(0.5, abs=0.02), Counter(owner(j) for j in released)


def test_an_organisation_s_cap_holds_across_its_members_and_a_member_s_within_it(sched):
    flood(sched, "a1", 10, group="A", group_cap=3)
    flood(sched, "a2", 10, group="A", group_cap=3, cap=1)
    flood(sched, "b", 20, group="B")
    first = Counter(owner(j) for j, _ in sched.release(now=0))
    assert first["a1"] + first["a2"] == 3 and first["a2"] == 1 and first["b"] == 7
    snap = sched.snapshot(now=0)
    assert snap["groups"]["A"]["state"] == "capped" and snap["keys"]["a2"]["state"] == "capped"  # with A
    # A's freed slot: a2 is next in A (fewer served) but at its own cap, so a1 goes.
    assert [owner(j) for j, _ in sched.finish("a1-0", now=0)] == ["a1"]
    # A is at its cap again, found so when it is next picked (the window is full now).
    assert sched.parked_counts() == {"capped_keys": 1, "throttled_keys": 0, "capped_groups": 0,
                                     "throttled_groups": 0}
    assert sched.keys_info(["a1", "a2", "b"]) == {
        "a1": {"state": "active", "backlog": 7, "in_flight": 2, "weight": 1.0, "cap": 0, "group": "A"},
        "a2": {"state": "capped", "backlog": 9, "in_flight": 1, "weight": 1.0, "cap": 1, "group": "A"},
        "b": {"state": "active", "backlog": 13, "in_flight": 7, "weight": 1.0, "cap": 0, "group": "B"},
    }


def test_an_organisation_s_rate_limit_spans_its_members(sched):
    for member in ("a1", "a2"):
        flood(sched, member, 5, group="A", group_rate=(1.0, 2))
    assert len(sched.release(now=0)) == 2  # the organisation's burst, not each member's
    assert sched.release(now=0.5) == []
    assert sched.next_wakeup_in(0.5) == pytest.approx(0.5)
    assert len(sched.release(now=1.0)) == 1


def test_a_key_moves_to_another_organisation_only_when_idle(sched):
    flood(sched, "u", 2, group="A")
    assert sched.submit("u-late", "u", group="B", now=0)  # u has work in A: it stays there
    assert sched.snapshot(now=0)["keys"]["u"]["group"] == "A"
    for job_id, _ in sched.release(now=0):
        sched.finish(job_id, now=0)
    assert sched.snapshot(now=0)["keys"] == {}
    assert sched.submit("u-next", "u", group="B", now=0)
    assert sched.keys_info(["u"])["u"]["group"] == "B"


def test_share_basis_says_what_a_key_would_get(sched):
    flood(sched, "a1", 5, group="A", group_weight=1.0)
    flood(sched, "a2", 5, group="A", weight=3.0, group_weight=1.0)
    flood(sched, "b", 5, group="B", group_weight=3.0)
    basis = sched.share_basis("a2")
    assert basis == {"weight": 3.0, "cap": 0, "busy": True, "group": "A", "group_weight": 1.0, "group_cap": 0,
                     "group_busy_weight": 4.0, "lane_busy_weight": 4.0, "share": pytest.approx(0.25 * 0.75)}
    idle = sched.share_basis("newcomer")  # a key of its own group, idle: one more group of weight 1
    assert (idle["group"], idle["busy"], idle["share"]) == (None, False, pytest.approx(1 / 5))
    summary = sched.summary(now=0)
    assert (summary["busy_groups"], summary["group_active_weight"], summary["busy_keys"]) == (2, 4.0, 3)


def test_keys_without_a_group_behave_as_groups_of_their_own(sched):
    """No group: the one-level dispatcher, weights deciding between keys."""
    flood(sched, "x", 600, weight=1.0)
    flood(sched, "y", 600, weight=3.0)
    counts = Counter(owner(j) for j in Workers(sched).run(400))
    assert counts["y"] / counts["x"] == pytest.approx(3.0, rel=0.03)
    assert sched.snapshot(now=0)["groups"] == {}


def test_the_policy_carries_the_group_to_the_submit_and_the_message():
    policy = KeyPolicy(weight=2.0, group="studio", group_weight=3.0, group_cap=4, group_rate=(1.0, 5))
    assert policy.submit_fields() == {"weight": 2.0, "cap": 0, "rate": (0.0, 0.0), "group": "studio",
                                      "group_weight": 3.0, "group_cap": 4, "group_rate": (1.0, 5)}
    assert FAIR_GROUP_HEADER == "fairlane_group"
    with pytest.raises(ValueError):
        FairScheduler._submit_args("j", "@k:x")  # the lane's own names for groups


@pytest.mark.parametrize("weights", [{"m1": 1.0, "m2": 1.0}, {"m1": 1.0, "m2": 2.0}])
def test_measured_costs_unlike_the_estimates_keep_both_levels_shares(sched, weights):
    """Each job really takes 0.5x to 4x its estimate (a fixed cycle, not
    chance), whoever it belongs to: the corrections keep A:B at 1:1 and A's
    members at their weights, in worker time. (A member's place among its
    organisation's left uncorrected until its next release gave two equal
    members 0.87:1.)"""
    for key, w in weights.items():
        flood(sched, key, 600, weight=w, group="A")
    flood(sched, "b", 600, group="B")
    factors = [0.5, 4.0, 1.0, 2.5, 0.75, 3.0, 1.5]
    in_flight = deque(j for j, _ in sched.release(now=0))
    spent: Counter = Counter()
    for n in range(900):
        job_id = in_flight.popleft()
        key, actual = owner(job_id), factors[n % len(factors)]
        spent[key] += actual
        in_flight += [j for j, _ in sched.finish(job_id, actual_cost=actual, key=key,
                                                 group="B" if key == "b" else "A", now=0)]
    # Within SFQ's bound: |W_1 / w_1 - W_2 / w_2| <= c / w_1 + c / w_2 (c = 4), about 2% of the ~290 s
    # the lightest member gets, and one job in flight each.
    assert (spent["m1"] + spent["m2"]) / spent["b"] == pytest.approx(1.0, rel=0.05), spent
    assert spent["m2"] / spent["m1"] == pytest.approx(weights["m2"] / weights["m1"], rel=0.05), spent


def test_members_weighted_1_to_2_as_make_bench_fairness_runs_them(sched):
    """bench/fairness.py's organisation_members, without workers or timing:
    300 rounds of one job each for omA-1 (weight 1) and omA-2 (weight 2)
    in A and omB-0 in B, submitted 1 ms apart through the hot path
    (submit_and_release: the first ones go straight to the queue), two
    slots, each job finished with a measured cost unlike its 30 ms estimate
    (a fixed cycle up to 6x, as stalls on a loaded machine make them), on a
    virtual clock. Measured as the benchmark measures it (its interval and
    shares), the ratio is 2: the 2.195 the benchmark once read came from
    its run on a loaded machine, not from the scheduler (bench/fairness.py)."""
    from bench.fairness import backlogged_interval, shares as time_shares

    sched.register_worker("w1", 2, ttl_s=3600, now=0)  # the benchmark's two slots
    weights = {"omA-1": 1.0, "omA-2": 2.0}
    measured = [0.030, 0.031, 0.045, 0.030, 0.180, 0.033, 0.030, 0.062, 0.030]
    events = []  # (time, order, job id or None for a submit, key, group, weight)
    order = 0
    for i in range(300):
        for key, group, weight in (("omA-1", "A", 1.0), ("omA-2", "A", 2.0), ("omB-0", "B", 1.0)):
            order += 1
            events.append((order / 1000, order, None, f"{key}-{order}", key, group, weight))
    heapq.heapify(events)
    queue, free, runs, started = deque(), 2, {}, 0
    while events:
        now, _, finished, job_id, key, group, weight = heapq.heappop(events)
        if finished is None:
            _, released = sched.submit_and_release(job_id, key, cost=0.030, weight=weight, group=group, now=now)
        else:
            free += 1
            released = sched.finish(job_id, actual_cost=runs[job_id]["end"] - runs[job_id]["start"], key=key,
                                    group=group, now=now)
        queue += [j for j, _ in released]
        while free and queue:
            job_id, free = queue.popleft(), free - 1
            key = owner(job_id)
            runs[job_id] = {"key": key, "start": now, "end": now + measured[started % len(measured)]}
            started += 1
            order += 1
            heapq.heappush(events, (runs[job_id]["end"], order, True, job_id, key, "B" if key == "omB-0" else "A", 0))
    assert len(runs) == 900
    got = time_shares(runs, list(weights), *backlogged_interval(runs, list(weights)))
    assert got["omA-2"] / got["omA-1"] == pytest.approx(2.0, rel=0.02), got
