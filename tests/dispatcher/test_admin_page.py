"""The staff page shows the dispatcher's live state per lane and user."""
from __future__ import annotations

import json

import pytest

import dispatcher
from project.lanes import Lane

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
