"""Issue 32: a batch's cancel, retry or submit of thousands of jobs is paced
(project/pacing.py): it sleeps between its chunks, each chunk done and
handed to the dispatcher before the pause, and never pauses inside a
transaction (an upload's delete). The pauses are recorded, not slept."""
from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

import dispatcher
from project import pacing
from project.lanes import Lane
from tests.backlogs import files_with_jobs
from uploads import services
from uploads.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("cpu_lane_paused")]


def held(jobs) -> list[str | None]:
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    return [sched.known(str(job.id)) for job in jobs]


@pytest.fixture
def pauses(monkeypatch):
    """Each pause paced() would take: what `look` saw then (not slept)."""
    taken: list = []
    look = SimpleNamespace(at=lambda: None)
    monkeypatch.setattr(pacing, "time", SimpleNamespace(monotonic=time.monotonic,
                                                        sleep=lambda seconds: taken.append(look.at())))
    return SimpleNamespace(taken=taken, look=look)


def test_a_cancel_pauses_between_its_chunks_each_done_before_its_pause(make_user, monkeypatch, pauses, settings):
    settings.FAIRLANE_BULK_DUTY = 0.5
    monkeypatch.setattr(services, "CANCEL_CHUNK", 4)
    alice = make_user("alice")
    _, jobs = files_with_jobs(alice, 10)
    # Due tomorrow: held by the dispatcher (none released), so a cancel withdraws them.
    Job.objects.update(scheduled_for=timezone.now() + timedelta(days=1))
    assert services.jobs_enqueue(job_ids=[job.id for job in jobs]) == 10
    assert pauses.taken == []  # one chunk of the dispatcher's: no pause
    pauses.look.at = lambda: (list(Job.objects.filter(id__in=[j.id for j in jobs]).order_by("created_at")
                                   .values_list("status", flat=True)), held(jobs))

    assert len(services.jobs_cancel(job_ids=[job.id for job in jobs], actor=alice)) == 10
    (first_statuses, first_held), (second_statuses, _) = pauses.taken
    assert first_statuses == ["canceled"] * 4 + ["queued"] * 6
    assert first_held[:4] == [None] * 4 and None not in first_held[4:]  # withdrawn with its chunk
    assert second_statuses == ["canceled"] * 8 + ["queued"] * 2
    assert set(Job.objects.values_list("status", flat=True)) == {"canceled"}


def test_a_delete_cancels_its_jobs_in_its_transaction_without_a_pause(make_user, monkeypatch, pauses, settings):
    monkeypatch.setattr(services, "CANCEL_CHUNK", 4)
    alice = make_user("alice")
    uploads, jobs = files_with_jobs(alice, 10)
    services.jobs_enqueue(job_ids=[job.id for job in jobs])
    assert services.uploads_delete(uploads=uploads, actor=alice) == 10
    assert pauses.taken == [] and not Job.objects.exists()


def test_a_large_submit_hands_each_chunk_to_the_lane_before_its_pause(make_user, monkeypatch, pauses):
    monkeypatch.setattr(services, "SUBMIT_CHUNK", 2)
    alice = make_user("alice")
    _, jobs = files_with_jobs(alice, 5)
    pauses.look.at = lambda: held(jobs)
    assert services.jobs_enqueue(job_ids=[job.id for job in jobs]) == 5
    first, second = pauses.taken
    assert None not in first[:2] and first[2:] == [None] * 3
    assert None not in second[:4] and second[4:] == [None]
    assert None not in held(jobs)
