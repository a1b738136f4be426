"""Fixtures for the notify tests: a real loopback webhook receiver, users
with endpoints, and short retry settings for the worker processes.

The worker processes read their settings from the environment when they
start. Conftests are imported while tests are collected, before any test
(and so any worker) starts, hence the settings below reach every worker of
the run: retries after about 0.3 s instead of 30 s, endpoints disabled after
ten failures. The allow-loopback switch comes from tests/services_plugin.py.
This process's settings are already loaded; tests override them with the
`settings` fixture where they need to.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("NOTIFY_RETRY_BASE_S", "0.3")
os.environ.setdefault("NOTIFY_MAX_ATTEMPTS", "4")
os.environ.setdefault("NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES", "10")
os.environ.setdefault("NOTIFY_WEBHOOK_DISABLE_AFTER_S", "0")


@pytest.fixture
def fast_retries(settings):
    """The same short retry settings for services called in this process."""
    settings.NOTIFY_RETRY_BASE_S = 0.3
    settings.NOTIFY_MAX_ATTEMPTS = 4
    settings.NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES = 3
    settings.NOTIFY_WEBHOOK_DISABLE_AFTER_S = 0
    settings.NOTIFY_WEBHOOK_ALLOW_LOOPBACK = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    return settings


@pytest.fixture
def no_io_worker(redis_client):
    """These tests play the io worker themselves (they call the service its
    task calls); the session's real io worker, when it is up, must not take
    the same messages first."""
    from tests.workers import lane_paused

    with lane_paused("io-notify"):
        yield
        redis_client.flushdb()  # what the test left queued is not the worker's to find


@pytest.fixture
def receiver():
    from tests.notify.receiver import Receiver

    with Receiver() as r:
        yield r


@pytest.fixture
def make_endpoint():
    """An endpoint straight in the database (registration has its own tests)."""
    from notify import signing
    from notify.models import Endpoint

    def make(owner, url: str, *, events=("job.succeeded", "job.failed", "batch.completed"), **fields) -> Endpoint:
        return Endpoint.objects.create(owner=owner, url=url, events=list(events), secret=signing.secret_generate(),
                                       **fields)

    return make


@pytest.fixture
def make_batch():
    """An upload batch of jobs in the given statuses, owned by `owner`."""
    import uuid

    from django.utils import timezone

    from uploads.models import Job, Upload

    def make(owner, statuses: list[str]) -> list[Job]:
        batch, jobs = uuid.uuid4(), []
        for i, status in enumerate(statuses):
            upload = Upload.objects.create(owner=owner, batch=batch, filename=f"file-{i}.mp4", file="x", size=1)
            finished = timezone.now() if status in ("succeeded", "failed", "canceled") else None
            error = {"error_code": "not_media", "error_message": "Not a media file."} if status == "failed" else {}
            jobs.append(Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status=status,
                                           finished_at=finished, task_id=str(uuid.uuid4()), **error))
        return jobs

    return make
