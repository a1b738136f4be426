"""Flower's held jobs say whose they are: the owner, as before, and the
organisation the job was submitted in (its group), by name. Read on the
event exchange itself, as Flower receives them (the stream of
tests/dispatcher/test_monitor.py)."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from dispatcher import monitor
from organisations import members_move, organisation_create
from tests.dispatcher.test_monitor import stream  # noqa: F401 (the fixture)
from tests.event_stream import task_event_batches
from tests.promise import wait_for
from uploads import services
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db


def test_a_held_job_is_announced_with_its_owner_and_organisation(stream, make_user, cpu_lane_paused,  # noqa: F811
                                                                 settings):
    settings.FAIRLANE_EVENT_FLUSH_S = 0.1
    alice = make_user("alice")
    members_move(user_ids=[alice.pk], organisation=organisation_create(name="Northwind Studio"))
    upload = Upload.objects.create(owner=alice, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=alice, lane="cpu-transcode", status=Job.Status.QUEUED,
                             scheduled_for=timezone.now() + timedelta(hours=1))  # held until then
    services.jobs_enqueue(job_ids=[job.id])

    def announced() -> list[dict]:
        stream.batches += task_event_batches(stream.pubsub)
        return [e for batch in stream.batches for e in batch if str(e.get("uuid", "")).startswith(f"{job.id}@")]

    [sent] = wait_for(announced, 30, "the held job's task-sent event")
    assert sent["kwargs"] == "{'owner': 'alice', 'organisation': 'Northwind Studio'}"
    monitor.flush()
