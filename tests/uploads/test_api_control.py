"""Users cancel, retry and delete their own jobs, uploads and batches:
through the operator's services and the fair dispatcher, in storage too,
and never anybody else's (404)."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

import dispatcher
import media
from notify import services as notify_services
from project.lanes import Lane
from tests.dispatcher_state import held
from uploads.models import Batch, Job, JobAttempt, Output, Upload

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("cpu_lane_paused")]


@pytest.fixture
def post_upload(api_client_for, django_capture_on_commit_callbacks):
    """Upload through the API with the after-commit work (the submit to the
    dispatcher) run, as it is outside a test's transaction. Scheduled for
    tomorrow, so the dispatcher holds the jobs (delayed) instead of
    releasing them into the paused lane: what it holds, it can withdraw."""

    def post(user, *names: str) -> list[Job]:
        files = [SimpleUploadedFile(name, b"0123456789") for name in names]
        tomorrow = (timezone.now() + timedelta(days=1)).isoformat()
        with django_capture_on_commit_callbacks(execute=True):
            resp = api_client_for(user).post("/api/uploads/", {"file": files, "scheduled_for": tomorrow},
                                             format="multipart")
        assert resp.status_code == 202, resp.content
        return [Job.objects.get(id=u["job"]["id"]) for u in resp.json()["uploads"]]

    return post


@pytest.fixture
def act(api_client_for, django_capture_on_commit_callbacks):
    def call(user, method: str, url: str):
        with django_capture_on_commit_callbacks(execute=True):
            return getattr(api_client_for(user), method)(url)

    return call


def publish_outputs(job: Job, tmp_path: Path, attempt: int = 1, *, record: bool = True) -> str:
    """What a finished attempt leaves in the store: an HLS ladder (master
    playlist, variants, segments) and an MP4, under outputs/<job>/<attempt>/;
    recorded as the job's outputs unless `record` is off (the objects of an
    attempt that did not win, or of one before a retry). Returns the prefix."""
    prefix = media.outputs_prefix(job_id=str(job.id), attempt=attempt)
    local = tmp_path / f"{job.id}-{attempt}"
    for rel in ["hls/master.m3u8", "hls/v0/index.m3u8", "hls/v0/seg0.ts", "hls/v1/seg0.ts", "video.mp4"]:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(b"x")
    media.put_tree(local, prefix)
    if record:
        Output.objects.create(job=job, name="hls", file=f"{prefix}hls/master.m3u8",
                              content_type="application/vnd.apple.mpegurl", size=1)
        Output.objects.create(job=job, name="mp4", file=f"{prefix}video.mp4", content_type="video/mp4", size=1)
        Job.objects.filter(id=job.id).update(status=Job.Status.SUCCEEDED, progress=100)
    return prefix


def stored(prefix: str) -> bool:
    return bool(media.list_prefix(prefix))


def test_cancel_takes_a_queued_job_out_of_the_dispatcher(make_user, post_upload, act):
    alice = make_user("alice")
    [job] = post_upload(alice, "a.mp4")
    assert held(job) == "delayed"
    resp = act(alice, "post", f"/api/jobs/{job.id}/cancel/")
    assert resp.status_code == 200 and resp.json()["status"] == "canceled"
    assert resp.json()["error"]["code"] == "canceled"
    assert held(job) is None


def test_an_ended_job_cannot_be_canceled_and_an_unfinished_one_cannot_be_retried(make_user, post_upload, act):
    alice = make_user("alice")
    [job] = post_upload(alice, "a.mp4")
    resp = act(alice, "post", f"/api/jobs/{job.id}/retry/")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_retryable"
    Job.objects.filter(id=job.id).update(status=Job.Status.SUCCEEDED)
    resp = act(alice, "post", f"/api/jobs/{job.id}/cancel/")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_cancelable"
    assert Job.objects.get(id=job.id).status == Job.Status.SUCCEEDED


def test_retry_queues_a_failed_job_through_the_dispatcher_as_a_fresh_attempt(make_user, post_upload, act):
    alice = make_user("alice")
    [job] = post_upload(alice, "a.mp4")
    act(alice, "post", f"/api/jobs/{job.id}/cancel/")
    Job.objects.filter(id=job.id).update(status=Job.Status.FAILED, error_code="decode_failed", attempts=1)
    resp = act(alice, "post", f"/api/jobs/{job.id}/retry/")
    assert resp.status_code == 202
    body = resp.json()
    assert body["status"] == "queued" and body["error"] is None and body["outputs"] == []
    assert held(job) == "delayed"


def test_nobody_cancels_retries_or_deletes_another_users_job(make_user, post_upload, act):
    alice, bob = make_user("alice"), make_user("bob")
    [job] = post_upload(alice, "a.mp4")
    for method, url in [("post", f"/api/jobs/{job.id}/cancel/"), ("post", f"/api/jobs/{job.id}/retry/"),
                        ("delete", f"/api/jobs/{job.id}/"), ("delete", f"/api/uploads/{job.upload_id}/")]:
        resp = act(bob, method, url)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found", url
    assert Job.objects.get(id=job.id).status == Job.Status.QUEUED and held(job) == "delayed"
    assert media.exists(Upload.objects.get().file.name)


def test_batch_cancel_and_retry_act_on_every_job_of_the_batch_that_can(make_user, post_upload, act, tmp_path):
    alice = make_user("alice")
    jobs = post_upload(alice, "a.mp4", "b.mp4", "c.mp4")
    publish_outputs(jobs[0], tmp_path)
    batch = jobs[0].upload.batch
    body = act(alice, "post", f"/api/batches/{batch}/cancel/").json()
    assert body["counts"] == {"queued": 0, "running": 0, "succeeded": 1, "failed": 0, "canceled": 2}
    assert body["finished"] is True and all(held(j) is None for j in jobs[1:])
    resp = act(alice, "post", f"/api/batches/{batch}/retry/")
    assert resp.status_code == 202
    assert resp.json()["counts"] == {"queued": 2, "running": 0, "succeeded": 1, "failed": 0, "canceled": 0}
    assert all(held(j) == "delayed" for j in jobs[1:])
    assert Job.objects.get(id=jobs[0].id).outputs.count() == 2  # the finished one is left alone


def test_deleting_an_upload_removes_its_job_outputs_exports_and_every_stored_file(make_user, post_upload, act,
                                                                                 tmp_path):
    alice = make_user("alice")
    done, queued = post_upload(alice, "a.mp4", "b.mp4")
    upload_file = done.upload.file.name
    stale = publish_outputs(done, tmp_path, record=False)  # an earlier attempt's objects, left behind
    ladder = publish_outputs(done, tmp_path, attempt=2)
    export = Job.objects.create(owner=alice, kind=Job.Kind.EXPORT, batch=done.upload.batch, lane="cpu-transcode")
    zip_root = publish_outputs(export, tmp_path)
    JobAttempt.objects.create(job=done, number=1, started_at=done.created_at)

    assert act(alice, "delete", f"/api/uploads/{done.upload_id}/").status_code == 204

    assert not media.exists(upload_file) and not stored(ladder) and not stored(stale) and not stored(zip_root)
    assert not stored(media.job_prefix(job_id=str(done.id)))
    assert not Job.objects.filter(id__in=[done.id, export.id]).exists()
    assert not Output.objects.filter(job_id=done.id).exists() and not JobAttempt.objects.exists()
    # The other upload of the batch stays, and so does the batch.
    assert Job.objects.get(id=queued.id).status == Job.Status.QUEUED
    assert media.exists(queued.upload.file.name)
    assert Batch.objects.filter(id=done.upload.batch).exists()


def test_deleting_an_unfinished_job_cancels_it_in_the_dispatcher_first(make_user, post_upload, act):
    alice = make_user("alice")
    [job] = post_upload(alice, "a.mp4")
    assert held(job) == "delayed"
    assert act(alice, "delete", f"/api/jobs/{job.id}/").status_code == 204
    assert held(job) is None and not Upload.objects.exists() and not Job.objects.exists()


def test_deleting_a_batch_removes_all_of_it(make_user, post_upload, act, tmp_path):
    alice = make_user("alice")
    jobs = post_upload(alice, "a.mp4", "b.mp4")
    roots = [publish_outputs(job, tmp_path) for job in jobs]
    batch = jobs[0].upload.batch
    assert act(alice, "delete", f"/api/batches/{batch}/").status_code == 204
    assert not any(stored(root) for root in roots)
    assert not Upload.objects.exists() and not Job.objects.exists() and not Batch.objects.exists()
    assert act(alice, "get", f"/api/batches/{batch}/").status_code == 404


def test_deleting_an_export_job_keeps_the_batch(make_user, post_upload, act, tmp_path):
    alice = make_user("alice")
    [job] = post_upload(alice, "a.mp4")
    export = Job.objects.create(owner=alice, kind=Job.Kind.EXPORT, batch=job.upload.batch, lane="cpu-transcode")
    zip_root = publish_outputs(export, tmp_path)
    assert act(alice, "delete", f"/api/jobs/{export.id}/").status_code == 204
    assert not stored(zip_root) and not Job.objects.filter(id=export.id).exists()
    assert Job.objects.filter(id=job.id).exists() and media.exists(job.upload.file.name)


def _batch_cancel_cost(user, post_upload, act, count: int) -> tuple[list[dict], list[Job], list]:
    """Upload `count` files, cancel their batch through the API with its
    after-commit work run, and return the database statements that took,
    the jobs, and what lifecycle.job_finished's receivers heard."""
    from django.test.utils import CaptureQueriesContext

    from uploads import lifecycle

    jobs = post_upload(user, *(f"f{i}.mp4" for i in range(count)))
    heard: list = []
    lifecycle.job_finished.connect(heard.append, many=lambda events: heard.append(list(events)))
    try:
        with CaptureQueriesContext(connection) as queries:
            resp = act(user, "post", f"/api/batches/{jobs[0].upload.batch}/cancel/")
    finally:
        lifecycle.job_finished.disconnect(heard.append)
    assert resp.status_code == 200, resp.content
    return queries.captured_queries, jobs, heard


def test_a_batch_cancel_takes_the_same_statements_whatever_the_batch_s_size(make_user, post_upload, act):
    """Issue 32: a 5,000-job cancel must not hold a web thread for minutes.
    The waiting jobs end in a few set-based statements, the dispatcher
    withdraws them in pipelined rounds and their ending is owed to their
    owner by one notify task (notify.jobs_canceled), not one each: 3 and 40
    jobs cost the same number of statements, and every job is canceled,
    withdrawn, announced once and has its open attempt closed."""
    from tests.workers import lane_paused

    small, _, _ = _batch_cancel_cost(make_user("small"), post_upload, act, 3)
    bob = make_user("bob")
    with lane_paused("io-notify"):  # the owner's notify tasks stay where the cancel put them
        large, jobs, heard = _batch_cancel_cost(bob, post_upload, act, 40)
        notify = dispatcher.scheduler(Lane.IO_NOTIFY)
        [at] = {j.finished_at for j in Job.objects.filter(id__in=[j.id for j in jobs])}
        assert notify.known(notify_services._canceled_task_id(bob.id, at)) is not None
        assert not any(notify.known(f"notify-job-{j.id}-canceled") for j in jobs)
    assert len(large) == len(small)
    assert set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True)) == {"canceled"}
    assert all(held(j) is None for j in jobs)
    [events] = heard  # one announcement of them all
    assert sorted(e.job_id for e in events) == sorted(str(j.id) for j in jobs)
    assert {(e.owner_id, e.status, e.finished_at) for e in events} == {(bob.id, "canceled", at)}
    assert Job.objects.filter(id__in=[j.id for j in jobs], notify_pending=True).count() == 40  # the outbox
    assert JobAttempt.objects.filter(job__in=jobs).count() == 0


@pytest.mark.skipif("connection.vendor != 'postgresql'",
                    reason="row locks: SQLite has none (it locks the whole database)")
def test_a_large_cancel_locks_its_jobs_a_chunk_at_a_time_and_ends_them_together(
        make_user, post_upload, act, monkeypatch):
    """A worker starting or finishing a job waits for the transaction that
    holds its row, so a cancel holds at most BULK_CHUNK rows at once, each
    chunk in a transaction of its own; the jobs still end at one time, and
    their ending is still one notify task."""
    from tests.workers import lane_paused
    from uploads import services

    monkeypatch.setattr(services, "BULK_CHUNK", 4)
    bob = make_user("bob")
    with lane_paused("io-notify"):
        statements, jobs, heard = _batch_cancel_cost(bob, post_upload, act, 10)
        locks = [q["sql"] for q in statements if q["sql"].startswith("SELECT") and "FOR UPDATE" in q["sql"]
                 and '"uploads_job"."status" IN' in q["sql"]]
        assert len(locks) == 3, locks  # 4 + 4 + 2
        [at] = {j.finished_at for j in Job.objects.filter(id__in=[j.id for j in jobs])}
        notify = dispatcher.scheduler(Lane.IO_NOTIFY)
        assert notify.known(notify_services._canceled_task_id(bob.id, at)) is not None
    assert set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True)) == {"canceled"}
    assert all(held(j) is None for j in jobs)
    assert sorted(e.job_id for events in heard for e in events) == sorted(str(j.id) for j in jobs)


def test_a_cancel_ends_waiting_running_and_reaped_jobs_alike(make_user, post_upload, act):
    """The set-based path takes the jobs that are waiting and never started;
    a running job (and one a reap put back, started once) ends through
    job_finish as before; each one's open attempt is closed with it."""
    alice = make_user("alice")
    waiting, running, reaped = post_upload(alice, "a.mp4", "b.mp4", "c.mp4")
    now = timezone.now()
    Job.objects.filter(id=running.id).update(status=Job.Status.RUNNING, started_at=now, attempts=1)
    Job.objects.filter(id=reaped.id).update(started_at=now, attempts=1)
    for job in (running, reaped, waiting):
        JobAttempt.objects.create(job=job, number=1, started_at=now)
    body = act(alice, "post", f"/api/batches/{waiting.upload.batch}/cancel/").json()
    assert body["counts"]["canceled"] == 3
    for job in (waiting, running, reaped):
        job.refresh_from_db()
        assert (job.status, job.error_code, job.lease_expires_at) == ("canceled", "canceled", None)
        assert job.finished_at and job.error_message.startswith("Canceled by")
        assert JobAttempt.objects.get(job=job).outcome == "canceled"
    assert running.process_ms is not None and waiting.process_ms is None


def test_a_batch_retry_takes_the_same_statements_whatever_the_batch_s_size(make_user, post_upload, act):
    """The retry of a canceled batch is set-based too: one UPDATE of the
    jobs, their removed outputs and parts, one submit of them all."""
    from django.test.utils import CaptureQueriesContext

    costs = []
    for name, count in (("small", 3), ("large", 40)):
        user = make_user(name)
        jobs = post_upload(user, *(f"f{i}.mp4" for i in range(count)))
        batch = jobs[0].upload.batch
        assert act(user, "post", f"/api/batches/{batch}/cancel/").status_code == 200
        with CaptureQueriesContext(connection) as queries:
            assert act(user, "post", f"/api/batches/{batch}/retry/").status_code == 202
        costs.append(len(queries))
        assert set(Job.objects.filter(upload__batch=batch).values_list("status", flat=True)) == {"queued"}
        assert all(held(j) == "delayed" for j in jobs)
    assert costs[0] == costs[1]
