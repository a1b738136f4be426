"""A chunked job's parts (uploads/parts.py) against the real database and
the real fair scheduler: the split, the one finalizer, what a failed,
lost or canceled part does to its parent, and what the user sees. These
tests play the workers; tests/e2e/test_chunked_video.py runs real ones."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

import dispatcher
from project.lanes import Lane
from uploads import attempts, parts, selectors, services
from uploads.models import Job, JobAttempt, Output, Upload
from uploads.services import OutputFile

pytestmark = pytest.mark.django_db

PLAN = {"chunks": [[0, 2], [2, 2], [4, 1]]}


@pytest.fixture
def sched(redis_client, cpu_lane_paused):
    return dispatcher.scheduler(Lane.CPU_TRANSCODE)


@pytest.fixture
def owner(make_user):
    return make_user("owner")


@pytest.fixture
def split(owner, sched, django_capture_on_commit_callbacks) -> Job:
    """A running parent whose first attempt has split it into three chunks and an audio part."""
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="long.mp4", file="x", size=1)
    parent = Job.objects.create(upload=upload, owner=owner, lane=Lane.CPU_TRANSCODE, queued_at=timezone.now(),
                                kind=Job.Kind.VIDEO, cost_estimate=100.0)
    services.job_start(job_id=str(parent.id))
    with django_capture_on_commit_callbacks(execute=True):
        assert parts.job_split(job_id=str(parent.id), attempt=1, plan=PLAN, chunk_costs=[40.0, 40.0, 20.0],
                               audio_cost=1.0)
    parent.refresh_from_db()
    return parent


def part(parent: Job, kind: str, index: int | None = None) -> Job:
    return Job.objects.get(parent=parent, part=kind, part_index=index)


def succeed(job: Job, capture, name: str = "segments") -> None:
    started = services.job_start(job_id=str(job.id))
    with capture(execute=True):
        assert services.job_succeed(job_id=str(job.id), attempt=started.attempts, outputs=[
            OutputFile(name=name, path=f"outputs/{job.id}/1/x", content_type="x", size=1, metadata={})])


def test_the_split_makes_parts_of_the_same_owner_that_the_dispatcher_holds(split, owner, sched):
    kids = list(Job.objects.filter(parent=split).order_by("created_at"))
    assert [(k.part, k.part_index) for k in kids] == [("audio", 0), ("chunk", 0), ("chunk", 1), ("chunk", 2)]
    assert {k.owner_id for k in kids} == {owner.id} and {k.status for k in kids} == {"queued"}
    assert all(k.upload_id is None for k in kids)  # the user's batches and uploads never count them
    assert None not in sched.known_many([str(k.id) for k in kids])
    # the parent waits for them: running, without a lease (the sweep leaves it alone), its attempt "split"
    assert (split.status, split.lease_expires_at, split.media_info["chunks"]) == ("running", None, PLAN)
    assert JobAttempt.objects.get(job=split).outcome == "split"
    assert list(selectors.jobs_for_user(user=owner)) == [split]


def test_the_splitting_attempts_lease_keeper_cannot_give_the_parent_a_lease_back(split):
    assert services.job_lease_renew(job_id=str(split.id), attempt=1) is False
    split.refresh_from_db()
    assert split.lease_expires_at is None


def test_the_last_part_to_finish_queues_one_finalizer_which_publishes_the_parent(
        split, sched, django_capture_on_commit_callbacks):
    for kid in Job.objects.filter(parent=split).order_by("created_at"):
        assert not Job.objects.filter(parent=split, part="finalize").exists()
        succeed(kid, django_capture_on_commit_callbacks)
    finalizer = part(split, "finalize")
    assert finalizer.status == "queued" and sched.known(str(finalizer.id)) is not None
    split.refresh_from_db()
    assert split.status == "running" and split.progress == 99
    succeed(finalizer, django_capture_on_commit_callbacks, name="hls")
    split.refresh_from_db()
    assert (split.status, split.progress, split.notify_pending) == ("succeeded", 100, True)
    assert [o.name for o in Output.objects.filter(job=split)] == ["hls"]
    # the user hears about the parent only
    assert not Job.objects.filter(parent=split, notify_pending=True).exists()


def test_a_part_that_fails_for_good_fails_the_parent_and_cancels_the_rest(split, django_capture_on_commit_callbacks):
    chunk = part(split, "chunk", 1)
    started = services.job_start(job_id=str(chunk.id))
    with django_capture_on_commit_callbacks(execute=True):
        services.job_fail(job_id=str(chunk.id), code="decode_failed", message="Bad frame.",
                          attempt=started.attempts)
    split.refresh_from_db()
    assert (split.status, split.error_code, split.error_message) == ("failed", "decode_failed", "Bad frame.")
    assert {k.part_index: k.status for k in Job.objects.filter(parent=split, part="chunk")} == {
        0: "canceled", 1: "failed", 2: "canceled"}
    assert part(split, "audio", 0).status == "canceled"


def test_canceling_the_job_cancels_its_parts(split, owner, sched, django_capture_on_commit_callbacks):
    running = part(split, "chunk", 0)
    services.job_start(job_id=str(running.id))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.jobs_cancel(job_ids=[split.id], actor=owner) == [split]
    assert set(Job.objects.filter(parent=split).values_list("status", flat=True)) == {"canceled"}
    queued = part(split, "chunk", 2)
    assert sched.known(str(queued.id)) is None  # withdrawn from the backlog
    # the running one stops at its next progress report
    with pytest.raises(attempts.AttemptLost):
        attempts.Attempt(job=running, number=1).progress(10)


def test_a_chunk_whose_worker_was_lost_runs_again_alone(split, django_capture_on_commit_callbacks):
    lost = part(split, "chunk", 1)
    services.job_start(job_id=str(lost.id))
    done = part(split, "chunk", 0)
    succeed(done, django_capture_on_commit_callbacks)
    Job.objects.filter(id=lost.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert attempts.jobs_recover_expired() == 1
    lost.refresh_from_db()
    done.refresh_from_db()
    split.refresh_from_db()
    assert (lost.status, lost.attempts) == ("queued", 1)
    assert JobAttempt.objects.get(job=lost).outcome == "lost"
    assert (done.status, done.attempts) == ("succeeded", 1)  # not run again
    assert split.status == "running" and split.attempts == 1  # nor the whole video


def test_retrying_a_failed_chunked_job_starts_over_without_its_old_parts(split, owner,
                                                                        django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.job_fail(job_id=str(split.id), code="x", message="x")
        assert services.jobs_retry(job_ids=[split.id], actor=owner) == [split]
    assert not Job.objects.filter(parent=split).exists()
    split.refresh_from_db()
    assert split.status == "queued"


def test_an_ended_part_is_not_retried_on_its_own(split, owner, django_capture_on_commit_callbacks):
    chunk = part(split, "chunk", 0)
    with django_capture_on_commit_callbacks(execute=True):
        services.job_fail(job_id=str(chunk.id), code="decode_failed", message="x")
        assert services.jobs_retry(job_ids=[chunk.id], actor=owner) == []
    chunk.refresh_from_db()
    assert chunk.status == "failed"


def test_the_parent_shows_its_running_parts_progress_weighted_by_their_cost(split):
    chunk = part(split, "chunk", 0)  # 40 of the 101 estimated seconds
    started = services.job_start(job_id=str(chunk.id))
    attempts.Attempt(job=started, number=started.attempts).progress(50)
    split.refresh_from_db()
    assert split.progress == int(40 * 50 / 101)
