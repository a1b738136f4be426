"""Released jobs whose message was lost with its worker are offered again in
seconds (FairScheduler.holding, lua/_lib.lua `recover_orphans`), and the
lane's health numbers say when a lane holds work and moves nothing
(FairScheduler.health). Real Redis, explicit times."""
from __future__ import annotations

import json

import pytest
import redis

from dispatcher import FairScheduler
from dispatcher.message import RELEASE_TAG

LANE = "test-lost"
QUEUE = "test-lost-queue"
TTL, MARGIN = 8.0, 1.0


@pytest.fixture
def sched(redis_client: redis.Redis) -> FairScheduler:
    """Window: default 2 + headroom 0, messages pushed to QUEUE."""
    redis_client.delete(QUEUE)
    return FairScheduler(redis_client, LANE, headroom=0, default_window=2, release_lease_s=900, queue=QUEUE)


def message(job_id: str) -> str:
    """A stored message as dispatcher/message.py builds it, as far as the
    recovery reads it: the task id in the headers."""
    return json.dumps({"body": "e30=", "headers": {"id": f"{job_id}@{RELEASE_TAG}", "root_id": "other@1"},
                       "properties": {"delivery_tag": f"{job_id}@{RELEASE_TAG}"}})


def submit(sched: FairScheduler, *job_ids: str, now: float = 0.0) -> None:
    for job_id in job_ids:
        assert sched.submit(job_id, "alice", payload=message(job_id), now=now)


def take(sched: FairScheduler) -> str:
    """A worker takes the oldest message (BRPOP's end); returns its job id."""
    raw = sched.client.rpop(QUEUE)
    return json.loads(raw)["headers"]["id"].rpartition("@")[0]


def report(sched: FairScheduler, token: str, held: list[str], now: float) -> list[str]:
    return sched.holding(token, held, ttl_s=TTL, margin_s=MARGIN, every_s=0, now=now)


def test_a_message_lost_with_its_worker_is_offered_again_after_its_report_lapses(sched):
    submit(sched, "j1", "j2", "j3")
    assert [j for j, _ in sched.release(now=0)] == ["j1", "j2"]
    assert report(sched, "a", [], 0) == [] and report(sched, "b", [], 0) == []
    lost = take(sched)  # worker a takes j1 and is killed: nobody will run or finish it
    assert report(sched, "a", [lost], 1) == []
    kept = take(sched)  # worker b has j2 and lives
    # a's report stands until it is TTL old; b keeps reporting
    assert report(sched, "b", [kept], 3) == []
    assert report(sched, "b", [kept], 6) == []
    assert report(sched, "b", [kept], 9.5) == []  # a's report lapsed: j1 is found missing, marked
    assert sched.known("j1") == "released"
    assert report(sched, "b", [kept], 10) == []  # within the margin of the mark: not yet
    assert report(sched, "b", [kept], 11) == ["j1"]
    assert sched.known("j1") == "held" and sched.known("j2") == "released"
    # back at the front: the freed slot takes it again, before j3
    assert [j for j, _ in sched.release(now=11)] == ["j1"]


def test_a_message_waiting_in_the_queue_or_held_by_a_live_worker_is_never_taken_back(sched):
    submit(sched, "j1", "j2")
    sched.release(now=0)
    held = take(sched)
    for t in range(0, 60, 3):
        assert report(sched, "w", [held], t) == []
    assert sched.known("j1") == "released" and sched.known("j2") == "released"
    assert sched.client.llen(QUEUE) == 1


def test_a_worker_that_has_not_reported_since_the_mark_holds_recovery_back(sched):
    """It may have taken the message just before the mark and not have said
    so yet: nothing goes back until it has reported past the mark plus the
    margin, or its report has lapsed."""
    submit(sched, "j1")
    sched.release(now=0)
    report(sched, "slow", [], 0)
    taken = take(sched)  # by "slow", which has not reported since
    assert report(sched, "fast", [], 2) == []  # marked missing at 2
    assert report(sched, "fast", [], 4) == []  # slow's last report (0) is older than the mark
    assert report(sched, "slow", [taken], 5) == []  # and now it says it has it
    assert report(sched, "fast", [], 7) == []
    assert sched.known("j1") == "released"


def test_a_running_job_is_left_to_its_lease(sched):
    submit(sched, "j1")
    sched.release(now=0)
    take(sched)
    assert sched.start("j1", now=0.5)
    for t in (1, 5, 9, 12):
        assert report(sched, "other", [], t) == []
    assert sched.known("j1") == "running"


def test_a_mark_belongs_to_one_release(sched):
    """Found missing, then put back by its lease and released again: the new
    message is judged on its own, not by the old release's mark."""
    submit(sched, "j1")
    sched.release(now=0)
    take(sched)
    report(sched, "w", [], 1)  # marked missing at 1
    assert sched.reap(now=901) == ["j1"]  # its release lease ran out first
    sched.release(now=901)
    take(sched)  # the new message, taken by a worker that reports next
    assert report(sched, "v", [], 901.2) == []  # not the old mark's: missing from now
    assert sched.known("j1") == "released"


def test_the_looks_are_taken_at_most_once_per_interval_for_the_lane(sched):
    submit(sched, "j1")
    sched.release(now=0)
    take(sched)
    every = dict(ttl_s=TTL, margin_s=MARGIN, every_s=5)
    assert sched.holding("w", [], now=1, **every) == []  # a look: marked
    assert sched.holding("w", [], now=3, **every) == []  # no look: 2 s after the last
    assert sched.known("j1") == "released"
    assert sched.holding("w", [], now=6, **every) == ["j1"]


def test_a_message_not_of_ours_in_the_queue_is_ignored(sched):
    sched.client.lpush(QUEUE, "not json", json.dumps({"headers": {}}), json.dumps([1, 2]))
    submit(sched, "j1")
    sched.release(now=0)
    assert report(sched, "w", [], 1) == []
    assert report(sched, "w", [], 3) == []
    assert sched.known("j1") == "released"  # its message is in the queue
    assert sched.client.llen(QUEUE) == 4


def test_the_staff_view_of_jobs_in_flight_tells_queued_held_running_and_missing(sched):
    submit(sched, "j1", "j2")
    sched.release(now=0)
    taken = take(sched)  # j1
    report(sched, "w1", [taken], 1)
    submit(sched, "j3", now=1)
    assert sched.finish("j1", now=2) == [("j3", message("j3").replace(RELEASE_TAG, "2000000"))]
    assert sched.start("j2", now=2)
    take(sched)  # j2's message: started already (its start and the take need not be in order)
    # j3 stays in the queue
    report(sched, "w1", [], 3)
    entries = {e["id"]: e for e in sched.inflight(ttl_s=TTL, now=3)}
    assert entries["j2"]["state"] == "running" and entries["j3"]["state"] == "released"
    assert entries["j3"]["queued"] is True and entries["j3"]["missing_s"] == -1
    assert entries["j3"]["lease_s"] == pytest.approx(899)
    assert entries["j2"]["holder"] == "" and entries["j3"]["key"] == "alice"
    sched.client.rpop(QUEUE)  # j3 taken by a worker that dies before it reports
    report(sched, "w1", [], 4)
    assert sched.inflight(ttl_s=TTL, now=5)[0] | {"lease_s": 0} == {
        "id": "j3", "key": "alice", "state": "released", "lease_s": 0, "queued": False, "holder": "",
        "missing_s": 1}


def test_progress_moves_with_releases_starts_heartbeats_and_finishes_only(sched):
    assert sched.health(now=0)["progress_at"] == 0  # first asked: counts from now
    submit(sched, "j1", "j2", "j3", now=1)
    assert sched.health(now=2)["progress_at"] == 0  # a submit is not progress
    sched.release(now=3)
    assert sched.health(now=4) | {"now": 0} == {
        "eligible": 1, "in_flight": 2, "window": 2, "progress_at": 3, "now": 0, "missing": 0}
    sched.start("j1", now=5)
    assert sched.health(now=5)["progress_at"] == 5
    sched.heartbeat(["j1"], now=7)
    assert sched.health(now=8)["progress_at"] == 7
    sched.heartbeat(["j2"], now=9)  # released, not running: no lease renewed, no progress
    assert sched.health(now=9)["progress_at"] == 7
    sched.finish("j1", now=10)
    assert sched.health(now=10)["progress_at"] == 10
    sched.finish("nobody", now=11)  # unknown: nothing moved
    assert sched.health(now=11)["progress_at"] == 10
