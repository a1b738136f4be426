"""insert_many writes what bulk_create writes, on the database under test."""
from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from project.bulk_insert import insert_many
from project.lanes import Lane
from uploads.models import Batch, Job, Upload

pytestmark = pytest.mark.django_db


def _rows(owner, batch, tag: str) -> tuple[list[Upload], list[Job]]:
    uploads = [Upload(owner=owner, batch=batch, filename=f"{tag}-{i}.png", size=1000 + i,
                      client_content_type="image/png", file=f"uploads/{tag}/{i}") for i in range(3)]
    jobs = [Job(upload=u, owner=owner, lane=Lane.CPU_TRANSCODE, queued_at=timezone.now(), cost_estimate=0.5 + i,
                checkpoint={"k": [i, "v"]}) for i, u in enumerate(uploads)]
    return uploads, jobs


def _comparable(values: dict) -> dict:
    """A row's values without what differs by construction (keys, times, names)."""
    skip = {"id", "upload_id", "created_at", "queued_at", "filename", "file", "task_id"}
    return {k: v for k, v in values.items() if k not in skip}


def test_insert_many_writes_the_rows_bulk_create_writes(make_user):
    owner = make_user("bulk")
    batch = Batch.objects.create(id=uuid.uuid4(), owner=owner, created_at=timezone.now(), name="b")
    ours, our_jobs = _rows(owner, batch.id, "ours")
    theirs, their_jobs = _rows(owner, batch.id, "theirs")
    insert_many(Upload, ours)
    insert_many(Job, our_jobs)
    Upload.objects.bulk_create(theirs)
    Job.objects.bulk_create(their_jobs)

    for model, a, b in ((Upload, ours, theirs), (Job, our_jobs, their_jobs)):
        mine = [model.objects.filter(pk=o.pk).values().get() for o in a]
        django = [model.objects.filter(pk=o.pk).values().get() for o in b]
        assert [_comparable(r) for r in mine] == [_comparable(r) for r in django]
        assert all(r["created_at"] is not None for r in mine)  # auto_now_add, as bulk_create sets it
    assert [j.checkpoint for j in Job.objects.filter(pk__in=[j.pk for j in our_jobs]).order_by("cost_estimate")] == [
        {"k": [i, "v"]} for i in range(3)]
    assert all(not o._state.adding for o in ours + our_jobs)


def test_insert_many_refuses_rows_without_their_keys(make_user):
    owner = make_user("bulk-keys")
    upload = Upload(owner=owner, filename="a.png", size=1, file="uploads/x")
    upload.pk = None
    with pytest.raises(ValueError, match="primary key"):
        insert_many(Upload, [upload])
    assert not Upload.objects.filter(file="uploads/x").exists()
