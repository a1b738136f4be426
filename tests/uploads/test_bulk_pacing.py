"""Issue 32: a batch's cancel, retry or submit of thousands of jobs is paced
(project/pacing.py): it sleeps between its chunks, each chunk done and
handed to the dispatcher before the pause, and never pauses inside a
transaction (an upload's delete). The pauses are recorded, not slept."""
from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.utils import timezone

from project import pacing
from tests.backlogs import files_with_jobs
from tests.dispatcher_state import held
from uploads import services
from uploads.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("cpu_lane_paused")]


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
    monkeypatch.setattr(services, "BULK_CHUNK", 4)
    alice = make_user("alice")
    _, jobs = files_with_jobs(alice, 10)
    # Due tomorrow: held by the dispatcher (none released), so a cancel withdraws them.
    Job.objects.update(scheduled_for=timezone.now() + timedelta(days=1))
    assert services.jobs_enqueue(job_ids=[job.id for job in jobs]) == 10
    pauses.taken.clear()  # the submit's own (below)
    pauses.look.at = lambda: (list(Job.objects.filter(id__in=[j.id for j in jobs]).order_by("created_at")
                                   .values_list("status", flat=True)), [held(j) for j in jobs])

    assert len(services.jobs_cancel(job_ids=[job.id for job in jobs], actor=alice)) == 10
    (first_statuses, first_held), (second_statuses, _) = pauses.taken
    assert first_statuses == ["canceled"] * 4 + ["queued"] * 6
    assert first_held[:4] == [None] * 4 and None not in first_held[4:]  # withdrawn with its chunk
    assert second_statuses == ["canceled"] * 8 + ["queued"] * 2
    assert set(Job.objects.values_list("status", flat=True)) == {"canceled"}


def test_a_delete_cancels_its_jobs_in_its_transaction_without_a_pause(make_user, monkeypatch, pauses, settings):
    monkeypatch.setattr(services, "BULK_CHUNK", 4)
    alice = make_user("alice")
    uploads, jobs = files_with_jobs(alice, 10)
    services.jobs_enqueue(job_ids=[job.id for job in jobs])
    pauses.taken.clear()
    assert services.uploads_delete(uploads=uploads, actor=alice) == 10
    assert pauses.taken == [] and not Job.objects.exists()


def test_a_large_submit_hands_each_chunk_to_the_lane_before_its_pause(make_user, monkeypatch, pauses):
    monkeypatch.setattr(services, "BULK_CHUNK", 2)
    alice = make_user("alice")
    _, jobs = files_with_jobs(alice, 5)
    pauses.look.at = lambda: [held(j) for j in jobs]
    assert services.jobs_enqueue(job_ids=[job.id for job in jobs]) == 5
    first, second = pauses.taken
    assert None not in first[:2] and first[2:] == [None] * 3
    assert None not in second[:4] and second[4:] == [None]
    assert None not in [held(j) for j in jobs]


def test_a_retry_pauses_between_its_statements_inside_its_own_transaction_only(
        make_user, monkeypatch, pauses, settings):
    """Its one transaction holds only the owner's row and their ended jobs,
    so it pauses in it; nested in another transaction it does not."""
    monkeypatch.setattr(services, "BULK_CHUNK", 4)
    alice = make_user("alice")
    _, jobs = files_with_jobs(alice, 10, statuses=("failed",))
    ids = [job.id for job in jobs]
    pauses.look.at = lambda: (connection.in_atomic_block, list(
        Job.objects.filter(id__in=ids).order_by("created_at").values_list("status", flat=True)))

    with transaction.atomic():  # someone else's transaction around it: no pause in it
        assert len(services.jobs_retry(job_ids=ids, actor=alice)) == 10
    # Only the two between its three submits to the dispatcher, after the commit.
    assert [in_transaction for in_transaction, _ in pauses.taken] == [False, False]
    assert set(Job.objects.values_list("status", flat=True)) == {"queued"}

    Job.objects.update(status="failed")
    services.jobs_cancel(job_ids=ids, actor=alice)  # out of the dispatcher, as a failure leaves them
    Job.objects.update(status="failed")
    pauses.taken.clear()
    assert len(services.jobs_retry(job_ids=ids, actor=alice)) == 10
    # Two pauses between the retry's three chunks of statements, in its
    # transaction, each chunk's jobs queued before; then the submits' two.
    (in_first, first), (in_second, second), *submits = pauses.taken
    assert in_first and in_second and [in_transaction for in_transaction, _ in submits] == [False, False]
    assert first == ["queued"] * 4 + ["failed"] * 6
    assert second == ["queued"] * 8 + ["failed"] * 2
    assert set(Job.objects.values_list("status", flat=True)) == {"queued"}
