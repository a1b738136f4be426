"""The batch summary at 2,000 files, through the real mail path (the
delivery service, Django's SMTP backend, an SMTP server): the counts, the
failed files up to the limit and how many more, one link to the batch's
page; short whatever the batch's size."""
from __future__ import annotations

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
