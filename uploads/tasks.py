"""io-notify tasks: interfaces only."""
from __future__ import annotations

from celery import shared_task

from uploads import notifications


@shared_task(name="uploads.notify_job_finished")
def notify_job_finished(job_id: str) -> None:
    notifications.notification_send_job_finished(job_id=job_id)
