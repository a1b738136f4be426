"""The staff page shows the dispatcher's live state per lane and user."""
from __future__ import annotations

import json

import pytest

import dispatcher
from project.lanes import Lane
from tests.workers import worker_name_clash

pytestmark = pytest.mark.django_db


@pytest.fixture
def held_jobs(make_user, cpu_lane_paused):
    """Ten jobs of one user on cpu-transcode; a rate limit of one job per
    thousand seconds keeps nine of them held while the test looks."""
    alice = make_user("alice")
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    ids = [f"admin-test-{i}" for i in range(10)]
    payload = json.dumps({"task": "bench.cpu.noop", "args": ["x", "alice"]})
    for job_id in ids:
        sched.submit(job_id, str(alice.id), payload=payload, weight=3.0, rate=(0.001, 1.0))
    sched.release()  # one job (a live worker's ticker may have released it first)
    yield alice, ids
    for job_id in ids:
        sched.cancel(job_id)
        sched.finish(job_id)


def test_fairness_page_shows_backlog_in_flight_and_weight_per_user(held_jobs, admin_client):
    alice, _ = held_jobs
    resp = admin_client.get("/admin/fairness/")
    assert resp.status_code == 200
    cpu = next(lane for lane in resp.context["lanes"] if lane["lane"] == "cpu-transcode")
    row = next(k for k in cpu["keys"] if k["key"] == str(alice.id))
    assert row["user"] == "alice"
    assert (row["backlog"], row["in_flight"], row["weight"]) == (9, 1, 3.0)
    assert cpu["totals"]["held"] >= 9
    assert b"alice" in resp.content and b"io-notify" in resp.content


def test_fairness_page_is_for_staff_only(client, make_user):
    client.force_login(make_user("not-staff"))
    resp = client.get("/admin/fairness/")
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]


def test_fairness_page_shows_recent_share_of_worker_time_and_waits(admin_client, make_user, redis_client):
    import uuid

    from django.utils import timezone

    from uploads.models import Job, Upload

    now = timezone.now()
    for name, process_ms, waits in (("busy", 3000, [100, 200, 300]), ("quiet", 1000, [50])):
        user = make_user(name)
        upload = Upload.objects.create(owner=user, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
        for wait in waits:
            Job.objects.create(upload=upload, owner=user, lane="cpu-transcode", status="succeeded", wait_ms=wait,
                               process_ms=process_ms // len(waits), started_at=now, finished_at=now)
    cpu = next(lane for lane in admin_client.get("/admin/fairness/").context["lanes"] if lane["lane"] == "cpu-transcode")
    rows = {row["user"]: row for row in cpu["keys"]}
    assert rows["busy"]["share_pct"] == 75.0 and rows["quiet"]["share_pct"] == 25.0
    assert (rows["busy"]["wait_p50_ms"], rows["busy"]["wait_p99_ms"]) == (200, 300)
    assert rows["busy"]["state"] == "idle" and rows["busy"]["backlog"] == 0


def test_the_data_view_gives_per_minute_shares_and_wait_p99_over_the_last_hour(admin_client, make_user,
                                                                               redis_client):
    """Jobs 5 and 20 minutes ago: each minute's share is of the worker time
    that minute; waits land in the minute their job started; minutes without
    a job are empty (null), not zero."""
    import uuid
    from datetime import timedelta

    from django.utils import timezone

    from uploads.models import Job, Upload

    now = timezone.now()
    users = {name: make_user(name) for name in ("busy", "quiet")}
    for name, minutes_ago, process_ms, wait_ms in (("busy", 5, 3000, 100), ("quiet", 5, 1000, 700),
                                                   ("busy", 20, 1000, 40)):
        user = users[name]
        upload = Upload.objects.create(owner=user, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
        at = now - timedelta(minutes=minutes_ago)
        Job.objects.create(upload=upload, owner=user, lane="cpu-transcode", status="succeeded", wait_ms=wait_ms,
                           process_ms=process_ms, started_at=at, finished_at=at)
    history = admin_client.get("/admin/fairness/data/").json()["history"]["cpu-transcode"]
    assert len(history["t"]) == 61 and history["t"] == sorted(history["t"])
    minute = {ago: max(i for i, t in enumerate(history["t"]) if t <= (now - timedelta(minutes=ago)).timestamp())
              for ago in (5, 20)}
    busy, quiet = history["users"]["busy"], history["users"]["quiet"]
    assert (busy["share_pct"][minute[5]], quiet["share_pct"][minute[5]]) == (75.0, 25.0)
    assert (busy["share_pct"][minute[20]], quiet["share_pct"][minute[20]]) == (100.0, 0.0)
    assert (busy["wait_p99_ms"][minute[5]], quiet["wait_p99_ms"][minute[5]], busy["wait_p99_ms"][minute[20]]) == (
        100, 700, 40)
    assert quiet["wait_p99_ms"][minute[20]] is None and busy["share_pct"][0] is None


def test_the_admin_index_links_the_fairness_page_and_states_are_words(admin_client, held_jobs):
    assert b'href="/admin/fairness/"' in admin_client.get("/admin/").content
    lanes = admin_client.get("/admin/fairness/data/").json()["lanes"]
    states = {row["state"] for lane in lanes for row in lane["keys"]}
    assert states and not states & {"in_flight_only", "active", "capped", "throttled"}


def test_the_page_names_a_worker_refused_because_another_live_process_has_its_name(admin_client):
    """Two processes started with one node name: the second's slots do not
    count (scheduler.register_worker); the staff page says so, per lane."""
    name = "cpu@page-clash-test"
    with worker_name_clash(name) as (holder, refused):
        lanes = {lane["lane"]: lane for lane in admin_client.get("/admin/fairness/data/").json()["lanes"]}
        assert lanes["cpu-transcode"]["worker_clashes"] == [{"name": name, "registered": holder, "refused": refused}]
        assert lanes["io-notify"]["worker_clashes"] == []
    assert all(not lane["worker_clashes"] for lane in admin_client.get("/admin/fairness/data/").json()["lanes"])


def test_the_per_user_table_pages_most_work_first_and_finds_users_by_name(admin_client, make_user, cpu_lane_paused):
    """120 users with work: 50 a page, those with the most waiting first;
    a search shows the users whose names match, whatever page they are on.
    The ranking reads every key in steps (keys_with_work), never in one
    call; the totals come from the lane's summary."""
    from dispatcher.admin_page import PAGE_ROWS

    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    users = [make_user(f"pager-{i:03d}") for i in range(120)]
    with sched.client.pipeline(transaction=False) as pipe:
        for i, user in enumerate(users):
            for j in range(1 + i % 7):  # 1 to 7 jobs waiting
                sched.submit(f"page-{i}-{j}", str(user.id), payload="m", client=pipe)
        pipe.execute()

    def cpu(**query) -> dict:
        lanes = admin_client.get("/admin/fairness/data/", query).json()["lanes"]
        return next(lane for lane in lanes if lane["lane"] == "cpu-transcode")

    first, last = cpu(page=1), cpu(page=3)
    assert (first["page"], first["pages"], len(first["keys"]), len(last["keys"])) == (1, 3, PAGE_ROWS, 20)
    backlogs = [row["backlog"] for row in first["keys"]]
    assert backlogs == sorted(backlogs, reverse=True) and backlogs[0] >= 6
    assert min(backlogs) >= max(row["backlog"] for row in last["keys"])
    assert first["totals"]["users_with_work"] == 120
    assert first["totals"]["held"] == sum(1 + i % 7 for i in range(120)) - first["totals"]["in_flight"]
    found = cpu(search="pager-07")
    assert sorted(row["user"] for row in found["keys"]) == [f"pager-{i:03d}" for i in range(70, 80)]
    assert cpu(page=99)["page"] == 3  # past the end: the last page
