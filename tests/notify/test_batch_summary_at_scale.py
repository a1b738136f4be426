"""The batch summary at 2,000 files, through the real mail path (the
delivery service, Django's SMTP backend, an SMTP server): the counts, the
failed files up to the limit and how many more, one link to the batch's
page; short whatever the batch's size."""
from __future__ import annotations

import datetime
import re
import uuid
from email import message_from_bytes, policy

import pytest
from aiosmtpd.controller import Controller
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.ports import free_port
from notify import services
from notify.models import Delivery
from tests.backlogs import files_with_jobs
from tests.rows_read import rows_read
from uploads.models import Batch, Job, Upload

pytestmark = pytest.mark.django_db
FILES, FAILED, CANCELED = 2000, 25, 40


def test_a_2000_file_batch_summary_lists_the_failures_up_to_the_limit_and_links_the_batch(make_user, settings):
    settings.FAIRLANE_BASE_URL = "https://fairlane.example"
    alice = make_user("alice")
    batch = Batch.objects.create(owner=alice)
    uploads = Upload.objects.bulk_create(
        Upload(owner=alice, batch=batch.id, filename=f"clip-{i:04d}.mp4", file="x", size=1) for i in range(FILES))
    statuses = ["failed"] * FAILED + ["canceled"] * CANCELED + ["succeeded"] * (FILES - FAILED - CANCELED)
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        Job(upload=u, owner=alice, lane="cpu-transcode", status=s, finished_at=now, task_id=str(uuid.uuid4()),
            error_code="not_media" if s == "failed" else "",
            error_message=f"Not a media file ({u.filename})." if s == "failed" else "")
        for u, s in zip(uploads, statuses))

    # Every job's notify task asks whether the batch is complete: a bounded
    # number of queries, not one per file.
    with CaptureQueriesContext(connection) as queries:
        services.job_event_process(job_id=str(jobs[-1].id), status="succeeded")
    assert len(queries) < 40

    received = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's naming)
            received.append(envelope)
            return "250 OK"

    smtp = Controller(Handler(), hostname="127.0.0.1", port=free_port())
    smtp.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
    try:
        delivery = Delivery.objects.get(channel="email")
        assert services.delivery_attempt(delivery_id=str(delivery.id), seq=0) == "succeeded"
    finally:
        smtp.stop()
    [envelope] = received
    message = message_from_bytes(envelope.content, policy=policy.default)
    assert message["Subject"] == f"[Fairlane] {FILES} file(s) done, {FAILED} failed"
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    listed = settings.NOTIFY_BATCH_FAILURES_LISTED
    counts = re.search(r"are done: (.*)\.", text).group(1).split(", ")
    assert sorted(counts) == sorted([f"{CANCELED} canceled", f"{FAILED} failed",
                                     f"{FILES - FAILED - CANCELED} succeeded"])
    failures = [line for line in text.splitlines() if line.startswith("- clip-")]
    assert failures == [f"- clip-{i:04d}.mp4 (not_media: Not a media file (clip-{i:04d}.mp4).)" for i in range(listed)]
    assert f"...and {FAILED - listed} more." in text
    batch_url = f"https://fairlane.example/batches/{batch.id}/"
    # One link to the results (the batch's page) and the settings link: no link per file.
    assert re.findall(r"https://\S+", text) == [batch_url, "https://fairlane.example/notifications/"]
    assert re.findall(r'href="([^"]+)"', html) == [batch_url, "https://fairlane.example/notifications/"]
    assert len(text.splitlines()) < 40


def _canceled_together(owner, count: int, *, at) -> list[Job]:
    """`count` jobs of one batch that one cancel ended at `at`, their ending still owed."""
    batch = Batch.objects.create(owner=owner)
    uploads = Upload.objects.bulk_create(Upload(owner=owner, batch=batch.id, filename=f"f{i}.png", file="x", size=1)
                                         for i in range(count))
    return Job.objects.bulk_create(
        Job(upload=u, owner=owner, lane="cpu-transcode", status="canceled", finished_at=at, notify_pending=True,
            task_id=str(uuid.uuid4()), error_code="canceled", error_message="Canceled.") for u in uploads)


def test_jobs_canceled_together_are_told_in_statements_that_do_not_grow_with_their_number(make_user):
    """Issue 32: a hostile user's 5,000-job cancel was 5,000 notify tasks,
    each asking for the batch's summary and, the batch being complete,
    counting all 5,000 jobs again: a minute of the notify worker and the
    database on both cores of the host every light user shares. The jobs a
    cancel ends together are one task, in the same statements for 3 jobs
    as for 300, one summary per batch, every outbox flag cleared; told
    twice, the second finds nothing owed."""
    from notify.models import Event

    at = timezone.now()
    costs = {}
    for name, count in (("small", 3), ("large", 300)):
        owner = make_user(name)
        jobs = _canceled_together(owner, count, at=at)
        with CaptureQueriesContext(connection) as queries:
            assert services.jobs_canceled_process(owner_id=owner.id, finished_at=at.isoformat()) == count
        costs[name] = len(queries)
        [summary] = Event.objects.filter(owner=owner, type="batch.completed")
        assert summary.payload["data"]["batch"]["counts"] == {"canceled": count}
        assert not Job.objects.filter(id__in=[j.id for j in jobs], notify_pending=True).exists()
        with CaptureQueriesContext(connection) as again:
            assert services.jobs_canceled_process(owner_id=owner.id, finished_at=at) == 0
        assert len(again) == 1 and Event.objects.filter(owner=owner).count() == 1
    assert costs["large"] == costs["small"], costs


def test_a_told_batch_summary_is_not_counted_again(make_user):
    """Every job ending after its batch's summary was published (a cancel
    ends them all at once) asks for it: the published key is checked before
    the counts, which read the whole batch."""
    owner = make_user("alice")
    jobs = _canceled_together(owner, 50, at=timezone.now())
    assert services.batch_summary_publish(batch=jobs[0].upload.batch, owner=owner) is not None
    with CaptureQueriesContext(connection) as queries:
        assert services.batch_summary_publish(batch=jobs[0].upload.batch, owner=owner) is None
    assert len(queries) == 2, [q["sql"] for q in queries]


def test_the_reconciler_owes_a_lost_group_of_canceled_jobs_one_task(make_user, settings):
    """The outbox of a cancel whose group task was lost (Redis down at its
    commit) is found by the reconciler and submitted as the one group task
    again, not as one task per job; a group whose task is held is left."""
    import dispatcher
    from project.lanes import Lane
    from tests.workers import lane_paused

    settings.FAIR_RECONCILE_MIN_AGE_S = 0
    owner = make_user("alice")
    at = timezone.now() - datetime.timedelta(seconds=5)
    jobs = _canceled_together(owner, 20, at=at)
    notify = dispatcher.scheduler(Lane.IO_NOTIFY)
    with lane_paused("io-notify"):
        assert services.job_notifications_reconcile() == 1
        assert notify.known(services._canceled_task_id(owner.id, at)) is not None
        assert not any(notify.known(f"notify-job-{j.id}-canceled") for j in jobs)
        assert services.job_notifications_reconcile() == 0  # held: owed once


@pytest.mark.parametrize("canceled_alone", [False, True])
def test_a_held_group_costs_the_reconciler_one_id_however_many_jobs_it_has(make_user, settings, monkeypatch,
                                                                          canceled_alone):
    """Issue 32 (a pass whose cost grows with one user's rows): a 5,000-job
    cancel whose group task waits behind its owner's deliveries was read in
    full, every job's task id asked of Redis, on every pass. Now a held
    group is one row and one id, for 3 jobs as for 1,200 (over a page). A
    group whose task is lost is owed it again, unless each of its jobs has
    a task of its own (canceled alone): then nothing is owed."""
    import dispatcher
    from project.lanes import Lane
    from tests.workers import lane_paused

    settings.FAIR_RECONCILE_MIN_AGE_S = 0
    notify = dispatcher.scheduler(Lane.IO_NOTIFY)
    asked: list[int] = []
    real = type(notify).known_many

    def counted(self, job_ids):
        asked.append(len(job_ids))
        return real(self, job_ids)

    monkeypatch.setattr(type(notify), "known_many", counted)
    with lane_paused("io-notify"):
        for count in (3, 1200):
            owner = make_user(f"alice-{count}")
            at = timezone.now() - datetime.timedelta(seconds=5)
            jobs = _canceled_together(owner, count, at=at)
            if canceled_alone:  # each job's own task is held: the group owes nothing
                plans = services.plans_for({owner.id})
                for job in jobs:
                    assert services.job_finished_notify(job_id=str(job.id), owner_id=owner.id, status="canceled",
                                                        plans=plans)
                assert services.job_notifications_reconcile() == 0
                assert notify.known(services._canceled_task_id(owner.id, at)) is None
            else:
                assert services.job_notifications_reconcile() == 1  # its task lost: owed again, once
                assert notify.known(services._canceled_task_id(owner.id, at)) is not None
                asked.clear()
                assert services.job_notifications_reconcile() == 0
                assert asked == [1]  # the held group's task id, and nothing of its jobs
            Job.objects.filter(owner=owner).update(notify_pending=False)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's plans")
def test_whether_a_batch_has_ended_is_asked_without_reading_other_users_jobs(make_user):
    """Every job that ends asks whether its batch has. Asked of the batch
    alone, PostgreSQL met the batch's unfinished job only after walking other
    users' unfinished jobs, or their uploads (8-12 ms a job with 20,000 to
    100,000 of them queued); asked of the owner's jobs, it reads the
    owner's."""
    bob = make_user("bob")  # a big backlog, written first: first in every walk
    files_with_jobs(bob, 10_000)
    alice = make_user("alice")
    batch = uuid.uuid4()
    _, jobs = files_with_jobs(alice, 2000, batch=batch, statuses=["succeeded"])
    Job.objects.filter(pk=jobs[-1].pk).update(status="queued")  # one still to run, the last
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE uploads_job; ANALYZE uploads_upload")
    with CaptureQueriesContext(connection) as queries:
        assert services.batch_summary_publish(batch=batch, owner=alice) is None
    (check,) = [q["sql"] for q in queries if "uploads_job" in q["sql"]]
    # At most each of alice's jobs and its upload: fewer than bob's alone.
    assert rows_read(check) <= 2 * 2000 + 10, check


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's plans")
def test_whether_a_batch_has_ended_reads_a_few_rows_whatever_its_owners_other_unfinished_jobs(make_user):
    """Every job that ends asks it (job_event_process). Asked through the
    owner's unfinished jobs, it walked those of the owner's other batches
    first: 14 ms a job in bench-isolation, beside 5,000 jobs scheduled for
    later (issue 32). One index probe whatever the owner holds elsewhere."""
    owner = make_user("alice")
    files_with_jobs(owner, 5000, batch=Batch.objects.create(owner=owner).id, statuses=["queued"])  # first: walked first
    running = Batch.objects.create(owner=owner)
    files_with_jobs(owner, 300, batch=running.id, statuses=["succeeded"] * 299 + ["running"])
    ended = Batch.objects.create(owner=owner)
    files_with_jobs(owner, 300, batch=ended.id, statuses=["succeeded"])
    # A batch made by the version before 0019 during the rollout: its jobs
    # have no batch of their own, and one of them is still waiting.
    before = Batch.objects.create(owner=owner)
    _, old = files_with_jobs(owner, 3, batch=before.id, statuses=["succeeded", "succeeded", "queued"])
    Job.objects.filter(id__in=[j.id for j in old]).update(batch=None)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    for batch, told in ((running.id, False), (ended.id, True), (before.id, False)):
        with CaptureQueriesContext(connection) as queries:
            assert (services.batch_summary_publish(batch=batch, owner=owner) is not None) == told
        check = queries.captured_queries[0]["sql"]
        assert "status" in check and rows_read(check) <= 10, (rows_read(check), check)
    Job.objects.filter(id=old[2].id).update(status="succeeded")
    assert services.batch_summary_publish(batch=before.id, owner=owner) is not None
