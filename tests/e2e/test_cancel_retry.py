"""An operator cancels a batch while some of it is released and running,
then retries two of its jobs: nothing stays stuck behind the cancel.

Before: cancel revoked the job's Celery task id, which every later attempt
reused; Celery keeps revoked ids for hours and drops such messages without
telling the dispatcher, so the canceled jobs kept their window slots until
their release lease ran out, and the retried ones were dropped again.
"""
from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from PIL import Image

import dispatcher
from project.lanes import Lane
from tests.media import make_video
from tests.promise import wait_for
from uploads import services
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def upload(client, files) -> list[str]:
    resp = client.post("/api/uploads/", {"file": files}, format="multipart")
    assert resp.status_code == 202, resp.content
    return [u["job"]["id"] for u in resp.json()["uploads"]]


@pytest.fixture
def sched(monkeypatch) -> dispatcher.FairScheduler:
    """The cpu lane's scheduler in this process, releasing one job beyond the
    slots when it submits (the lane runs without headroom), so that a
    released job waits in the queue for these tests to act on."""
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    monkeypatch.setattr(sched, "headroom", 1)
    return sched


def test_canceled_released_and_running_jobs_free_the_lane_and_retried_ones_run(
        workers, sched, make_user, api_client_for, tmp_path):
    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "x")
    alice, bob = make_user("alice"), make_user("bob")
    video = make_video(tmp_path / "v.mp4", seconds=4, size="640x360")
    handles = [open(video, "rb") for _ in range(8)]
    try:
        jobs = upload(api_client_for(alice), handles)
    finally:
        for h in handles:
            h.close()
    # Two running (both worker slots) and one more released behind them.
    wait_for(lambda: Job.objects.filter(id__in=jobs, status="running").count() == 2, 60, "two jobs running")
    wait_for(lambda: sched.snapshot()["totals"]["in_flight"] == 3, 30, "a full window")

    canceled = services.jobs_cancel(job_ids=jobs, actor=operator)
    assert len(canceled) == 8
    retried = services.jobs_retry(job_ids=jobs[:2], actor=operator)
    assert len(retried) == 2
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), "teal").save(buf, "JPEG")
    buf.name = "one.jpg"
    buf.seek(0)
    [bobs] = upload(api_client_for(bob), [buf])

    # Within seconds, not after a release lease (15 min) or Celery's memory
    # of revoked ids (3 h): the generous bound is for a loaded machine.
    watched = [*jobs[:2], bobs]
    wait_for(lambda: Job.objects.filter(id__in=watched, status="succeeded").count() == 3, 120,
             lambda: f"the retried jobs and the other user's file to succeed: "
                     f"{list(Job.objects.filter(id__in=watched).values_list('status', 'attempts'))}, "
                     f"{[(j, sched.known(j)) for j in watched]}, {sched.snapshot()['totals']}")
    assert set(Job.objects.filter(id__in=jobs[2:]).values_list("status", flat=True)) == {"canceled"}
    # The lane's in-flight count comes back to what really runs: nothing.
    wait_for(lambda: sched.snapshot()["totals"]["in_flight"] == 0
             and not Job.objects.filter(status="running").exists(), 60, "an empty lane")
    for job in Job.objects.filter(id__in=jobs[:2]):
        assert job.attempt_log.get(number=job.attempts).outcome == "succeeded"


def test_a_message_revoked_in_flower_hands_its_job_back_instead_of_holding_a_slot(workers, sched, redis_client):
    """An operator revokes a released message from Flower (the control
    API): Celery discards it without running it. The dispatcher is told, the
    job is released again under a new message id and runs; the window is
    not left holding the discarded message until its lease runs out."""
    from bench.tasks import RUNS_KEY
    from project.celery import app

    for i in range(3):  # two fill both worker slots; the third waits in the queue
        assert dispatcher.enqueue("bench.cpu.spin", [f"spin-{i}", "heavy", 3000], task_id=f"spin-{i}",
                                  fair_key="heavy", cost=3.0)
    # Both slots busy (the workers took two messages), the third released and waiting.
    queue = Lane.CPU_TRANSCODE.value
    wait_for(lambda: redis_client.llen(queue) == 1 and sched.snapshot()["totals"]["in_flight"] == 3, 30,
             "two jobs taken and one released message waiting in the queue")
    [waiting] = [json.loads(m) for m in redis_client.lrange(queue, 0, -1)]
    message_id = waiting["headers"]["id"]
    assert dispatcher.job_id_of(message_id) == waiting["headers"]["argsrepr"].split("'")[1]
    app.control.revoke(message_id)

    job_id = dispatcher.job_id_of(message_id)
    wait_for(lambda: redis_client.hexists(RUNS_KEY, job_id), 60, "the revoked message's job to run all the same")
    wait_for(lambda: len(redis_client.hkeys(RUNS_KEY)) == 3 and sched.snapshot()["totals"]["in_flight"] == 0, 60,
             "every job done and the lane empty")
