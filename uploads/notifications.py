"""Telling a user their job ended. The idempotency key (job, event, channel)
makes a redelivered task a no-op instead of a second email."""
from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from project import metrics
from project.lanes import Lane
from uploads.models import Job, Notification

log = logging.getLogger(__name__)


def notification_send_job_finished(*, job_id: str) -> Notification | None:
    started = timezone.now()
    job = Job.objects.select_related("owner", "upload").filter(id=job_id).first()
    if job is None or job.status not in Job.TERMINAL:
        return None
    if not job.owner.email:
        log.info("job %s: owner %s has no email address; nothing to send", job_id, job.owner_id)
        return None
    key = f"job:{job.id}:{job.status}:email"
    try:
        with transaction.atomic():
            note, _ = Notification.objects.get_or_create(
                idempotency_key=key,
                defaults={"job": job, "event": f"job.{job.status}", "recipient": job.owner.email},
            )
    except IntegrityError:  # a concurrent duplicate created it first
        note = Notification.objects.get(idempotency_key=key)
    if note.status == Notification.Status.SENT:
        return note
    context = {
        "job": job,
        "results_url": settings.FAIRLANE_BASE_URL.rstrip("/") + reverse("upload-page") + f"#job-{job.id}",
    }
    message = EmailMultiAlternatives(
        subject=f"[Fairlane] {job.upload.filename}: {job.status}",
        body=render_to_string("uploads/email/job_finished.txt", context),
        to=[job.owner.email],
        headers={"X-Fairlane-Idempotency-Key": key},
    )
    message.attach_alternative(render_to_string("uploads/email/job_finished.html", context), "text/html")
    message.send()
    note.status = Notification.Status.SENT
    note.sent_at = timezone.now()
    note.save(update_fields=["status", "sent_at"])
    metrics.observe_job(
        lane=Lane.IO_NOTIFY, kind="email", outcome="sent",
        wait_s=(started - job.finished_at).total_seconds() if job.finished_at else None,
        process_s=(note.sent_at - started).total_seconds(),
    )
    return note
