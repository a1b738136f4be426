"""cpu-transcode tasks: interfaces only; the work is in transcoding/services.py."""
from __future__ import annotations

from celery import shared_task

from transcoding import services


@shared_task(name="transcoding.job_run")
def job_run(job_id: str) -> None:
    services.job_transcode(job_id=job_id)
