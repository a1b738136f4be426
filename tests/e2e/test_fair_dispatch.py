"""Fair dispatch with real workers, real Redis and the real database."""
from __future__ import annotations

import json

import pytest

import dispatcher
from bench.tasks import RUNS_KEY
from project.celery import app
from project.lanes import Lane
from tests.media import make_video
from tests.promise import wait_for
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def runs(redis_client) -> dict[str, dict]:
    return {k.decode(): json.loads(v) for k, v in redis_client.hgetall(RUNS_KEY).items()}


def test_a_light_user_overtakes_a_heavy_backlog(workers, redis_client):
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    sched.clear()
    for i in range(40):
        dispatcher.enqueue("bench.cpu.spin", [f"heavy-{i}", "heavy", 100], task_id=f"heavy-{i}", fair_key="heavy", cost=0.1)
    wait_for(lambda: len(runs(redis_client)) >= 4, 30, "the heavy backlog to be under way")
    assert dispatcher.enqueue("bench.cpu.spin", ["light-0", "light", 100], task_id="light-0", fair_key="light",
                              cost=0.1)
    # What had left the heavy backlog by the time the light job arrived (an
    # upper bound: the snapshot is taken a moment after the submit).
    released_before_light = 40 - sched.snapshot()["keys"]["heavy"]["backlog"]
    wait_for(lambda: len(runs(redis_client)) == 41, 60, "all 41 jobs")
    done = runs(redis_client)
    heavy_starts = sorted(r["start"] for k, r in done.items() if k.startswith("heavy"))
    light_start = done["light-0"]["start"]
    started_before_light = sum(s < light_start for s in heavy_starts)
    # FIFO would run the light job last (40 heavy jobs first). Fair dispatch
    # releases it next: only the heavy jobs released before it arrived (at
    # most one more, released by a finish racing the submit) start first,
    # however slow the machine is.
    assert started_before_light <= released_before_light + 1, (started_before_light, released_before_light)
    assert started_before_light < 20


def test_a_delivered_message_is_covered_by_the_dispatcher_s_lease_not_by_a_copy_in_the_broker(workers, redis_client):
    """kombu's acknowledgement emulation is off on fair lanes (settings,
    docs/reliability.md "Leases"): a running job's only record is the
    dispatcher's lease, not also a copy of its message in kombu's `unacked`
    hash, which cost 8 Redis commands per job."""
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    sched.clear()
    assert dispatcher.enqueue("bench.cpu.spin", ["leased-0", "leased", 2000], task_id="leased-0", fair_key="leased",
                              cost=2.0)
    wait_for(lambda: sched.known("leased-0") == "running", 30, "the job to run (its start reported)")
    assert redis_client.hlen("unacked") == 0 and redis_client.zcard("unacked_index") == 0
    wait_for(lambda: "leased-0" in runs(redis_client), 30, "the job to finish")
    assert sched.known("leased-0") is None


def test_every_accepted_job_completes_when_redis_is_flushed_mid_run(workers, redis_client, make_user,
                                                                    api_client_for, tmp_path):
    user = make_user("flushy")
    client = api_client_for(user)
    video = make_video(tmp_path / "v.mp4", seconds=1)
    handles = [open(video, "rb") for _ in range(8)]
    resp = client.post("/api/uploads/", {"file": handles}, format="multipart")
    for h in handles:
        h.close()
    assert resp.status_code == 202
    ids = [u["job"]["id"] for u in resp.json()["uploads"]]
    wait_for(lambda: Job.objects.filter(id__in=ids, status="succeeded").exists(), 60, "a first job to finish")
    redis_client.flushdb()  # the broker's queues, unacked messages and every held job are gone
    app.send_task("project.fair_reconcile")  # what beat does every minute
    wait_for(lambda: Job.objects.filter(id__in=ids, status__in=Job.TERMINAL).count() == len(ids), 90,
             "every job to finish after the flush")
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {"succeeded"}
    assert all(j.attempts == 1 for j in Job.objects.filter(id__in=ids))


def test_a_scheduled_job_is_held_until_it_is_due(workers, make_user, api_client_for, tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    user = make_user("later")
    client = api_client_for(user)
    video = make_video(tmp_path / "v.mp4", seconds=1)
    due = timezone.now() + timedelta(seconds=5)
    with open(video, "rb") as fh:
        resp = client.post("/api/uploads/", {"file": fh, "scheduled_for": due.isoformat()}, format="multipart")
    assert resp.status_code == 202
    job_id = resp.json()["uploads"][0]["job"]["id"]
    wait_for(lambda: Job.objects.filter(id=job_id, status="succeeded").exists(), 30, "the scheduled job")
    job = Job.objects.get(id=job_id)
    assert job.started_at >= due
    # Released by the workers' ticker when due (it wakes for the due time,
    # at most FAIR_TICK_S = 1 s late), not by beat's poll a minute later.
    assert (job.started_at - due).total_seconds() < 10
    assert job.wait_ms < 10_000  # measured from when it was due, not from the upload
