"""Many files with their jobs, written in two statements: the other users'
backlogs the cost tests set a user's queries beside."""
from __future__ import annotations

import uuid
from collections.abc import Sequence

from uploads.models import Job, Upload


def files_with_jobs(owner, n: int, *, batch: uuid.UUID | None = None, statuses: Sequence[str] = ("queued",),
                    ext: str = ".png") -> tuple[list[Upload], list[Job]]:
    """n uploads of the owner's, each with its transcode job, in `batch`
    (a batch of its own each when None), their statuses taken in turn."""
    uploads = Upload.objects.bulk_create(
        Upload(owner=owner, batch=batch or uuid.uuid4(), filename=f"{owner.username}-{i}{ext}", file="x", size=1)
        for i in range(n))
    jobs = Job.objects.bulk_create(Job(upload=u, owner=owner, lane="cpu-transcode", status=statuses[i % len(statuses)])
                                   for i, u in enumerate(uploads))
    return uploads, jobs
