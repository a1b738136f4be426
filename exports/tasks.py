"""cpu-transcode tasks for exports: interfaces only; the work is in exports/services.py."""
from __future__ import annotations

from celery import shared_task

from exports import services
from uploads.attempts import JobFailed


@shared_task(name="exports.job_run", bind=True, throws=(JobFailed,))
def job_run(self, job_id: str) -> str | None:
    # Returns dispatcher.HANDED_BACK when the job is owed another run; raises
    # JobFailed when this delivery failed the job, so Flower shows FAILURE.
    soft_limit = (self.request.timelimit or (None, None))[1]
    return services.job_export(job_id=job_id, hostname=self.request.hostname or "", soft_limit_s=soft_limit,
                             task_id=self.request.id or "")
