"""Emails rendered from templates (plain text and HTML) for each event type."""
from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string

from notify.models import Event

TEMPLATES = {
    "job.playable": "job_playable",
    "job.succeeded": "job_finished",
    "job.failed": "job_finished",
    "batch.completed": "batch_completed",
    "endpoint.disabled": "endpoint_disabled",
}


def _subject(event: Event) -> str:
    data = event.payload["data"]
    if event.type == "batch.completed":
        batch = data["batch"]
        failed = batch["counts"].get("failed", 0)
        tail = f", {failed} failed" if failed else ""
        named = f"{batch['name']}: " if batch.get("name") else ""
        return f"[Fairlane] {named}{batch['total']} file(s) done{tail}"
    if event.type == "endpoint.disabled":
        return "[Fairlane] A webhook endpoint was disabled"
    job = data["job"]
    if event.type == "job.playable":
        return f"[Fairlane] {job['filename']}: ready to watch"
    return f"[Fairlane] {job['filename']}: {job['status']}"


def email_build(*, event: Event, to: str, username: str) -> EmailMultiAlternatives:
    """The message for `event`, ready to send (no database access after this)."""
    name = TEMPLATES[event.type]
    context = {"username": username, "event": event, "data": event.payload["data"],
               "base_url": settings.FAIRLANE_BASE_URL.rstrip("/")}
    message = EmailMultiAlternatives(
        subject=_subject(event), body=render_to_string(f"notify/email/{name}.txt", context), to=[to],
        headers={"X-Fairlane-Event-Id": event.webhook_id},
    )
    message.attach_alternative(render_to_string(f"notify/email/{name}.html", context), "text/html")
    return message
