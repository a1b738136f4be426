"""FairScheduler against a real Redis: fairness, limits, leases and bookkeeping."""
from __future__ import annotations

from collections import Counter, deque

import pytest
import redis

from dispatcher import NO_RATE_LIMIT, FairScheduler
from dispatcher.message import RELEASE_TAG

LANE = "test-lane"  # not a real lane: live workers of other tests must not touch it


@pytest.fixture
def sched(redis_client: redis.Redis) -> FairScheduler:
    """No worker registered: window = default_window (2) + headroom (1) = 3."""
    return FairScheduler(redis_client, LANE)


def submit_many(sched: FairScheduler, key: str, n: int, *, cost: float = 1.0, now: float = 0.0, **settings) -> None:
    for i in range(n):
        assert sched.submit(f"{key}-{i}", key, cost=cost, now=now, payload=f"msg {key}-{i}", **settings)


class Workers:
    """Simulated workers that finish in-flight jobs oldest first, across calls."""

    def __init__(self, sched: FairScheduler) -> None:
        self.sched = sched
        self.in_flight: deque[str] = deque()

    def run(self, releases: int, *, now: float = 0.0) -> list[str]:
        """Finish jobs until `releases` more were released; returns those ids in order."""
        order = [job_id for job_id, _ in self.sched.release(now=now)]
        self.in_flight += order
        while len(order) < releases and self.in_flight:
            more = [job_id for job_id, _ in self.sched.finish(self.in_flight.popleft(), now=now)]
            order += more
            self.in_flight += more
        return order[:releases]


def owner(job_id: str) -> str:
    return job_id.rsplit("-", 1)[0]


def test_a_light_user_overtakes_a_heavy_backlog_within_one_window(sched):
    submit_many(sched, "heavy", 100)
    first = sched.release(now=0)
    assert [owner(j) for j, _ in first] == ["heavy"] * 3

    assert sched.submit("light-0", "light", now=1)
    window = sched.snapshot(now=1)["totals"]["window"]
    released = [j for j, _ in first]
    for job_id, _ in first:
        released += [j for j, _ in sched.finish(job_id, now=1)]
    assert released.index("light-0") < len(first) + window
    # FIFO would have put it behind all 100 heavy jobs.


@pytest.mark.parametrize(("weights", "costs"), [
    ({"w1": 1, "w2": 2, "w4": 4}, {"w1": 1, "w2": 1, "w4": 1}),
    # Equal weights, cost 10 against cost 1: worker time, not job count, is shared.
    ({"big": 1, "small": 1}, {"big": 10, "small": 1}),
])
def test_continuously_backlogged_keys_share_cost_in_proportion_to_weight(sched, weights, costs):
    for key, weight in weights.items():
        submit_many(sched, key, 1000, cost=costs[key], weight=weight)

    counts = Counter(owner(j) for j in Workers(sched).run(770))

    total_weight = sum(weights.values())
    total_cost = sum(counts[k] * costs[k] for k in weights)
    for key, weight in weights.items():
        share = counts[key] * costs[key] / total_cost
        assert share == pytest.approx(weight / total_weight, rel=0.03), counts


def test_a_key_returning_from_idle_starts_at_the_virtual_clock(sched):
    workers = Workers(sched)
    assert sched.submit("idle-0", "idle", now=0)
    submit_many(sched, "busy", 200)
    workers.run(100)  # idle-0 ran early; busy had the lane to itself since
    v = sched.snapshot(now=0)["totals"]["V"]
    assert v > 90

    for i in range(1, 21):
        assert sched.submit(f"idle-{i}", "idle", now=0)
    assert sched.snapshot(now=0)["keys"]["idle"]["vt"] == 1  # its credit on paper

    # Starting from vt = 1 it would take all 20 next releases; from V it alternates.
    later = Counter(owner(j) for j in workers.run(20))
    assert later["busy"] >= 9, later


def test_a_capped_key_never_has_more_than_cap_in_flight(sched):
    sched.register_worker("w1", 10, now=0)
    submit_many(sched, "capped", 10, cap=2)
    submit_many(sched, "other", 20)

    first = sched.release(now=0)
    assert Counter(owner(j) for j, _ in first) == {"capped": 2, "other": 9}
    assert sched.snapshot(now=0)["keys"]["capped"]["state"] == "capped"

    next_release = sched.finish("capped-0", now=0)
    assert [owner(j) for j, _ in next_release] == ["capped"]
    assert sched.snapshot(now=0)["keys"]["capped"]["in_flight"] == 2


def test_a_rate_limited_key_is_throttled_until_its_token_is_due(sched):
    sched.register_worker("w1", 10, now=0)
    submit_many(sched, "hook", 5, rate=(1.0, 2))

    assert len(sched.release(now=0)) == 2  # the burst
    assert sched.release(now=0.5) == []
    assert sched.next_wakeup_in(0.5) == pytest.approx(0.5)
    assert [j for j, _ in sched.release(now=1.0)] == ["hook-2"]
    assert [j for j, _ in sched.release(now=3.0)] == ["hook-3", "hook-4"]


def test_a_rate_limit_is_removed_by_the_next_submit_without_one(sched):
    submit_many(sched, "r", 3, rate=(0.001, 1))
    assert [j for j, _ in sched.release(now=0)] == ["r-0"]  # one token, then throttled
    sched.submit("r-3", "r", rate=NO_RATE_LIMIT, now=0)
    assert [j for j, _ in sched.release(now=0)] == ["r-1", "r-2"]


def test_a_delayed_job_is_released_when_due_and_not_before(sched):
    assert sched.submit("later", "u", due=60, now=0)
    assert sched.known("later") == "delayed"
    assert sched.release(now=59) == []
    assert sched.next_wakeup_in(59) == 1
    assert sched.release(now=60) == [("later", "")]


def test_duplicate_submits_are_refused_and_the_job_released_once(sched):
    assert sched.submit("j", "u", payload="first", now=0)
    assert not sched.submit("j", "u", payload="second", now=0)
    assert sched.release(now=0) == [("j", "first")]
    assert not sched.submit("j", "u", now=0)  # in flight: still known
    assert sched.release(now=0) == []


def test_submit_and_release_accepts_once_and_releases_up_to_the_window(sched):
    results = [sched.submit_and_release(f"j{i}", "u", payload=f"m{i}", now=0) for i in range(5)]
    assert [accepted for accepted, _ in results] == [True] * 5
    released = [job for _, got in results for job in got]
    assert released == [("j0", "m0"), ("j1", "m1"), ("j2", "m2")]  # window 3, the rest held
    assert sched.submit_and_release("j0", "u", now=0) == (False, [])


def _released_and_state(sched: FairScheduler, steps, *, together: bool) -> tuple[list[str], dict]:
    """Runs `steps` ((job id, key, cost, now), or ("finish", job id, now)),
    each submit either with submit_and_release or as a submit and a release;
    what was released in order, and the lane's state after."""
    released = []
    for step in steps:
        if step[0] == "finish":
            released += [job_id for job_id, _ in sched.finish(step[1], now=step[2])]
        elif together:
            _, out = sched.submit_and_release(step[0], step[1], cost=step[2], now=step[3])
            released += [job_id for job_id, _ in out]
        else:
            sched.submit(step[0], step[1], cost=step[2], now=step[3])
            released += [job_id for job_id, _ in sched.release(now=step[3])]
    return released, sched.snapshot(now=steps[-1][-1])


@pytest.mark.parametrize("steps", [
    # an idle lane: every submit is released by itself (the direct path)
    [("a1", "a", 2.0, 0), ("b1", "b", 1.0, 0), ("finish", "a1", 1), ("a2", "a", 1.0, 1), ("c1", "c", 3.0, 2)],
    # a key that went idle ahead of the virtual clock keeps its lead
    [("a1", "a", 5.0, 0), ("finish", "a1", 1), ("b1", "b", 1.0, 1), ("a2", "a", 1.0, 2), ("b2", "b", 1.0, 2)],
    # the window fills: the fourth waits in its backlog, released by a finish
    [("a1", "a", 1.0, 0), ("b1", "b", 1.0, 0), ("c1", "c", 1.0, 0), ("d1", "d", 1.0, 0), ("finish", "b1", 1)],
])
def test_a_job_released_by_its_own_submit_is_charged_as_a_release_would(redis_client, steps):
    """submit_and_release releases a job for an idle key straight from the
    submit when nothing else is eligible: the order, the keys' virtual
    times and V are those of a submit followed by a release."""
    direct = _released_and_state(FairScheduler(redis_client, LANE), steps, together=True)
    stepwise = _released_and_state(FairScheduler(redis_client, LANE + "-stepwise"), steps, together=False)
    assert direct == stepwise
    assert direct[0] == [s[0] for s in steps if s[0] != "finish"][:len(direct[0])]


def test_a_due_delayed_job_goes_through_release_not_past_it(sched):
    """A submit that finds a delayed job due lets release promote it, in the
    order release always used (the new job was in the backlog first)."""
    sched.release(now=0)  # the lane knows that nothing is delayed
    assert sched.submit("later", "a", due=5, now=0)
    assert sched.submit_and_release("now", "a", now=31) == (True, [("now", ""), ("later", "")])


def test_an_expired_lease_offers_the_job_again_at_the_front(redis_client):
    sched = FairScheduler(redis_client, LANE, default_window=1, headroom=0)
    submit_many(sched, "u", 3)
    assert sched.release(now=0) == [("u-0", "msg u-0")]

    assert sched.reap(now=sched.release_lease_s - 1) == []
    assert sched.reap(now=sched.release_lease_s) == ["u-0"]
    assert sched.known("u-0") == "held"
    assert sched.release(now=sched.release_lease_s) == [("u-0", "msg u-0")]


def test_a_heartbeat_keeps_a_running_job_from_being_reaped(sched):
    submit_many(sched, "u", 2)
    sched.release(now=0)
    assert sched.start("u-0", now=0) and sched.start("u-1", now=0)

    assert sched.heartbeat(["u-0", "unknown"], now=20) == 1
    assert sched.reap(now=40) == ["u-1"]


def test_a_start_after_reap_takes_the_job_out_of_the_backlog(redis_client):
    sched = FairScheduler(redis_client, LANE, default_window=2, headroom=0)
    submit_many(sched, "u", 3)
    sched.release(now=0)
    t = sched.release_lease_s + 1
    assert sched.reap(now=t) == ["u-1", "u-0"]

    assert sched.start("u-0", now=t)  # its message was only slow
    assert sched.known("u-0") == "running"
    assert [j for j, _ in sched.release(now=t)] == ["u-1"]
    state = sched.snapshot(now=t)["keys"]["u"]
    assert (state["backlog"], state["in_flight"]) == (1, 2)


def test_a_finished_or_cancelled_job_is_not_started(sched):
    submit_many(sched, "u", 2)
    sched.release(now=0)
    sched.finish("u-0", now=0)
    assert not sched.start("u-0", now=0)
    assert sched.known("u-0") is None


def test_the_window_follows_the_live_workers(sched):
    submit_many(sched, "u", 20)
    assert len(sched.release(now=0)) == 3  # default_window 2 + headroom 1

    sched.register_worker("w1", 4, ttl_s=60, now=0)
    sched.register_worker("w2", 2, ttl_s=120, now=0)
    assert len(sched.release(now=1)) == 4  # 4 + 2 + 1 = 7
    assert sched.snapshot(now=1)["totals"]["window"] == 7

    assert sched.snapshot(now=60)["totals"]["window"] == 3  # w1 expired
    sched.unregister_worker("w2")
    assert sched.snapshot(now=1)["totals"]["window"] == 5


def test_a_second_live_process_with_the_same_worker_name_is_refused_and_not_counted(sched):
    # Two workers started as cpu@host: the second must neither add its slots
    # to the first one's registration nor take it over.
    assert sched.register_worker("cpu@host", 4, ttl_s=60, now=0, token="100@host/1")
    assert not sched.register_worker("cpu@host", 8, ttl_s=60, now=1, token="200@host/2")
    assert sched.live_workers(now=2) == {"cpu@host": (4, 60.0)}
    snap = sched.snapshot(now=2)
    assert snap["totals"]["window"] == 4 + 1  # the holder's slots + headroom
    assert snap["worker_clashes"] == {"cpu@host": {"registered": "100@host/1", "refused": "200@host/2"}}
    # The refused one's shutdown leaves the live registration alone; the holder renews as ever.
    assert not sched.unregister_worker("cpu@host", token="200@host/2")
    assert sched.register_worker("cpu@host", 4, ttl_s=60, now=10, token="100@host/1")
    assert sched.live_workers(now=11) == {"cpu@host": (4, 70.0)}
    assert sched.snapshot(now=11)["worker_clashes"] == {}
    assert sched.unregister_worker("cpu@host", token="100@host/1")
    assert sched.live_workers(now=11) == {}


def test_a_worker_name_is_free_once_its_holder_lapses_or_is_known_to_be_gone(sched):
    assert sched.register_worker("cpu@host", 4, ttl_s=60, now=0, token="a")
    assert not sched.register_worker("cpu@host", 8, ttl_s=60, now=1, token="b")
    # A restarted worker that knows its predecessor is gone takes the name over.
    assert sched.register_worker("cpu@host", 8, ttl_s=60, now=1, token="b", replaces="a")
    assert sched.worker_token("cpu@host") == "b" and sched.live_workers(now=2) == {"cpu@host": (8, 61.0)}
    assert not sched.register_worker("cpu@host", 4, ttl_s=60, now=2, token="a")
    # Once b's registration has lapsed, anyone may register the name.
    assert sched.register_worker("cpu@host", 4, ttl_s=60, now=61, token="a")
    assert sched.live_workers(now=62) == {"cpu@host": (4, 121.0)}
    assert sched.snapshot(now=62)["worker_clashes"] == {}


def test_a_registration_without_a_token_is_never_refused(sched):
    assert sched.register_worker("w", 4, ttl_s=60, now=0, token="a")
    assert sched.register_worker("w", 2, ttl_s=60, now=1)
    assert sched.live_workers(now=2) == {"w": (2, 61.0)}


def test_finish_releases_the_next_job_in_the_same_call(redis_client):
    sched = FairScheduler(redis_client, LANE, default_window=1, headroom=0)
    submit_many(sched, "u", 2)
    assert sched.release(now=0) == [("u-0", "msg u-0")]
    assert sched.finish("u-0", now=0) == [("u-1", "msg u-1")]
    assert sched.finish("u-1", now=0) == []
    assert sched.finish("never-submitted", now=0) == []


def test_finish_corrects_the_estimate_with_the_actual_cost(sched):
    submit_many(sched, "u", 1, cost=2.0, weight=2)
    sched.release(now=0)
    sched.finish("u-0", actual_cost=10.0, now=0)
    assert sched.snapshot(now=0)["totals"]["V"] == 0
    # start 0, charged 2/2, corrected by (10 - 2)/2
    assert sched.known("u-0") is None
    assert float(sched._client.hget(sched.prefix + "h", "vt|u")) == pytest.approx(5.0)


def test_requeue_puts_a_job_back_first_and_refunds_its_charge(sched):
    submit_many(sched, "u", 3, cost=4.0)
    released = [j for j, _ in sched.release(now=0)]
    assert released == ["u-0", "u-1", "u-2"]

    assert sched.requeue("u-2")
    assert not sched.requeue("u-2")
    assert sched.known("u-2") == "held"
    assert float(sched._client.hget(sched.prefix + "h", "vt|u")) == pytest.approx(8.0)
    assert sched.finish("u-0", now=0) == [("u-2", "msg u-2")]


def test_a_retry_pays_for_its_attempt_and_rejoins_the_front_of_its_backlog_when_due(sched):
    submit_many(sched, "u", 5, cost=4.0)
    assert [j for j, _ in sched.release(now=0)] == ["u-0", "u-1", "u-2"]

    assert sched.requeue("u-0", actual_cost=1.0, due=10, now=0)
    assert sched.known("u-0") == "delayed"
    # charged 3 x 4 at release, then 1 instead of 4 for the failed attempt
    assert float(sched._client.hget(sched.prefix + "h", "vt|u")) == pytest.approx(9.0)
    # before it is due the freed slot goes to the next job, not to the retry
    assert [j for j, _ in sched.release(now=5)] == ["u-3"]
    # once due it goes ahead of u-4, which waited behind it all along
    assert [j for j, _ in sched.finish("u-1", now=10)] == ["u-0"]
    assert [j for j, _ in sched.finish("u-2", now=10)] == ["u-4"]


def test_cancel_removes_waiting_jobs_only(sched):
    submit_many(sched, "u", 4)
    assert sched.submit("soon", "u", due=10, now=0)
    sched.release(now=0)

    assert not sched.cancel("u-0")  # released: its worker will finish it
    assert sched.cancel("u-3") and sched.cancel("soon")
    assert not sched.cancel("u-3")
    totals = sched.snapshot(now=0)["totals"]
    assert (totals["held"], totals["delayed"], totals["active_keys"]) == (0, 0, 0)
    assert sched.release(now=20) == []


def test_all_state_lives_under_the_lane_hash_tag_and_clear_removes_it(sched, redis_client):
    # Other tests' live workers may share this Redis: look only at what the
    # scheduler names could contain (the lane), wherever it was put.
    def lane_keys() -> set[str]:
        return {n.decode() for n in redis_client.keys("*test-lane*")}

    other = FairScheduler(redis_client, "other-test-lane")
    other.submit("x", "u", now=0)
    submit_many(sched, "u", 5, rate=(1, 1), cap=3, weight=2)
    sched.submit("later", "v", due=5, now=0)
    sched.register_worker("w", 1, now=0)
    sched.release(now=0)

    names = lane_keys()
    assert any(n.startswith("{fair:test-lane}:") for n in names)
    assert all(n.startswith(("{fair:test-lane}:", "{fair:other-test-lane}:")) for n in names)
    sched.clear()
    assert lane_keys() == {n for n in names if n.startswith("{fair:other-test-lane}:")}


def test_next_wakeup_is_none_when_nothing_is_pending(sched):
    assert sched.next_wakeup_in(0) is None
    sched.submit("j", "u", now=0)
    sched.release(now=0)
    assert sched.next_wakeup_in(0) == sched.release_lease_s
    assert sched.next_wakeup_in(sched.release_lease_s + 5) == 0  # overdue: due now


def test_lane_names_that_would_break_the_hash_tag_are_refused(redis_client):
    with pytest.raises(ValueError):
        FairScheduler(redis_client, "cpu}{x")


def test_without_an_explicit_time_every_comparison_uses_redis_s_clock(sched, redis_client):
    """One clock: callers pass no time in production, and the scripts read
    Redis's. A lease, a registration and a delay are all measured on it."""
    redis_now = sched.time()
    assert abs(redis_now - redis_client.time()[0]) <= 1
    sched.register_worker("w", 3, ttl_s=60)
    [(slots, expires)] = sched.live_workers().values()
    assert slots == 3 and redis_now + 59 < expires <= sched.time() + 60
    assert sched.submit("now", "u") and sched.submit("later", "u", delay_s=30)
    assert [j for j, _ in sched.release()] == ["now"]
    [(_, deadline)] = redis_client.zrange(sched.prefix + "inflight", 0, -1, withscores=True)
    assert redis_now + sched.release_lease_s - 1 < deadline <= sched.time() + sched.release_lease_s
    [(_, due)] = redis_client.zrange(sched.prefix + "delayed", 0, -1, withscores=True)
    assert redis_now + 29 < due <= sched.time() + 30
    assert 28 < sched.next_wakeup_in() <= 30  # the delayed job, relative to Redis's clock
    assert sched.start("now") and sched.reap() == []  # nothing expired by Redis's clock


@pytest.mark.parametrize("settings", [
    {"cost": float("nan")}, {"cost": float("inf")}, {"weight": float("nan")}, {"weight": float("inf")},
    {"rate": (float("nan"), 5)}, {"rate": (1.0, float("nan"))}, {"delay_s": float("nan")},
])
def test_values_that_are_not_finite_numbers_are_refused_and_hold_nothing(sched, settings):
    """NaN passes every `<= 0` check and would poison the lane's virtual
    clock for every user (a sibling of the 1e-300 weight)."""
    with pytest.raises(ValueError):
        sched.submit("j", "u", **settings)
    assert sched.release() == []


def test_a_submitters_tag_names_the_first_release_only(sched):
    """Flower is told a held job's message id before the message exists
    (dispatcher/monitor.py), so the first release must use the submitter's
    tag; every later release of the same job (a reaped lease, a revoked
    message handed back) must use a new id, or Celery would drop it as revoked."""
    payload = f"id=job@{RELEASE_TAG}"
    assert sched.submit("job", "k", payload=payload, tag="s1", now=0)
    assert sched.pending_tags(["job", "unknown"]) == [("s1", "k"), None]
    assert sched.release(now=0) == [("job", "id=job@s1")]
    assert sched.pending_tags(["job"]) == [None]

    assert sched.reap(now=sched.release_lease_s + 1) == ["job"]
    [(_, again)] = sched.release(now=sched.release_lease_s + 2)
    assert again.startswith("id=job@") and again != "id=job@s1"

    # A hand-back with a new message and tag: released under that tag, once.
    assert sched.requeue("job", payload=payload, tag="s2", now=sched.release_lease_s + 3)
    assert sched.pending_tags(["job"]) == [("s2", "k")]
    assert sched.release(now=sched.release_lease_s + 4) == [("job", "id=job@s2")]
    # Without one, the release's own tag.
    assert sched.requeue("job", now=sched.release_lease_s + 5)
    [(_, third)] = sched.release(now=sched.release_lease_s + 6)
    assert third not in ("id=job@s1", "id=job@s2", again)


def test_every_placeholder_in_a_message_gets_the_tag_and_nothing_else_changes(sched):
    """A Celery message holds its id in several places (task id, root id,
    correlation id, delivery tag); the release replaces each, as plain text
    (characters that mean something to a Lua pattern or to gsub's
    replacement stay as they are)."""
    payload = (f'{{"id": "j@{RELEASE_TAG}", "root_id": "j@{RELEASE_TAG}", "odd": "100% .*[^$]~release @{RELEASE_TAG}",'
               f' "tail": "{RELEASE_TAG}"}}{RELEASE_TAG}')
    assert sched.submit("j", "k", payload=payload, tag="s%1", now=0)
    assert sched.submit("plain", "k", payload="no placeholder here: 100% ~release", now=0)
    assert sched.release(now=0) == [("j", payload.replace(RELEASE_TAG, "s%1")),
                                    ("plain", "no placeholder here: 100% ~release")]


def test_a_job_submitted_without_a_tag_is_released_under_the_clocks(sched):
    assert sched.submit("plain", "k", payload=f"id=plain@{RELEASE_TAG}", now=0)
    assert sched.pending_tags(["plain"]) == [None]
    [(_, message)] = sched.release(now=12.5)
    assert message == "id=plain@12500000"


def test_a_finish_that_names_its_job_s_key_reads_redis_once_less(private_redis):
    """The key is a hint: named, the job's record, its key's fields and the
    lane's numbers come in one read; wrong or absent, the record's key is
    read as well, and the outcome is the same. Counted on a server of its
    own, which nothing else talks to."""
    sched, redis_client = FairScheduler(private_redis, LANE), private_redis
    submit_many(sched, "u", 6)
    assert [j for j, _ in sched.release(now=0)] == ["u-0", "u-1", "u-2"]

    def reads(**hint) -> tuple[int, list]:
        before = redis_client.info("commandstats")["cmdstat_hmget"]["calls"]
        released = sched.finish(f"u-{reads.n}", actual_cost=1.0, now=0, **hint)
        reads.n += 1
        return redis_client.info("commandstats")["cmdstat_hmget"]["calls"] - before, [j for j, _ in released]
    reads.n = 0

    assert reads(key="u") == (2, ["u-3"])  # record, key and lane; then the next job
    assert reads() == (3, ["u-4"])
    assert reads(key="someone-else") == (3, ["u-5"])
    assert sched.snapshot(now=0)["keys"]["u"]["in_flight"] == 3


def test_a_canceled_job_is_never_released_and_one_submitted_again_once(sched, redis_client):
    """Cancel leaves a stale entry in the middle of the backlog; the job
    submitted again (a retry) gets a live one at the back. The release
    drops the stale entry when it reaches it and releases the job once,
    from its new place; once nothing is waiting, the list goes."""
    submit_many(sched, "alice", 5)
    assert sched.cancel("alice-1") and sched.cancel("alice-3")
    assert sched.snapshot()["keys"]["alice"]["backlog"] == 3
    assert sched.submit("alice-1", "alice", payload="again")
    released = Workers(sched).run(10)
    for job_id in released:
        sched.finish(job_id, now=0)
    assert released == ["alice-0", "alice-2", "alice-4", "alice-1"]
    assert not redis_client.exists(sched.prefix + "q:alice")
    assert sched.snapshot()["keys"] == {}


def test_a_backlog_of_only_stale_entries_goes_at_once(sched, redis_client):
    submit_many(sched, "bob", 3)
    for job_id in ("bob-0", "bob-1", "bob-2"):
        assert sched.cancel(job_id)
    assert not redis_client.exists(sched.prefix + "q:bob")
    assert sched.release(now=0) == [] and sched.snapshot()["totals"]["active_keys"] == 0


def test_the_summary_says_the_lanes_work_in_worker_seconds(sched):
    """What an autoscaler reads, kept by the calls that change it: the
    estimated worker seconds waiting and in flight, the measured seconds
    served (every attempt's, a counter) and the measured / estimated ratio
    of the jobs finished lately."""
    submit_many(sched, "u", 4, cost=10.0)
    assert sched.submit("v-0", "v", cost=2.5, now=0, payload="m", delay_s=60)  # delayed: not waiting yet
    work = lambda: {f: sched.summary(now=0)[f] for f in  # noqa: E731
                    ("waiting_cost_s", "in_flight_cost_s", "served_s", "cost_ratio")}
    assert work() == {"waiting_cost_s": 40.0, "in_flight_cost_s": 0.0, "served_s": 0.0, "cost_ratio": 1}
    sched.release(now=0)  # a window of 3
    assert work() == {"waiting_cost_s": 10.0, "in_flight_cost_s": 30.0, "served_s": 0.0, "cost_ratio": 1}
    sched.finish("u-0", actual_cost=15.0, now=0)  # and u-3 is released into its slot
    assert work() == {"waiting_cost_s": 0.0, "in_flight_cost_s": 30.0, "served_s": 15.0, "cost_ratio": 1.5}
    sched.requeue("u-1", actual_cost=4.0)  # an attempt handed back: served, not a finish
    assert work() == {"waiting_cost_s": 10.0, "in_flight_cost_s": 20.0, "served_s": 19.0, "cost_ratio": 1.5}
    assert sched.cancel("u-1")
    sched.finish("u-2", actual_cost=5.0, now=0)
    summary = sched.summary(now=0)
    assert (summary["waiting_cost_s"], summary["in_flight_cost_s"], summary["served_s"]) == (0.0, 10.0, 24.0)
    assert summary["cost_ratio"] == pytest.approx((15 * (1 - 1 / 256) + 5) / (10 * (1 - 1 / 256) + 10))
