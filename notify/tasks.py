"""io-notify tasks: interfaces only (notify/services.py does the work)."""
from __future__ import annotations

from celery import shared_task

from notify import services


@shared_task(name="notify.job_finished", ignore_result=True)
def job_finished(job_id: str, status: str) -> None:
    services.job_event_process(job_id=job_id, status=status)


@shared_task(name="notify.jobs_canceled", ignore_result=True)
def jobs_canceled(owner_id: int, finished_at: str) -> int:
    return services.jobs_canceled_process(owner_id=owner_id, finished_at=finished_at)


@shared_task(name="notify.job_playable", ignore_result=True)
def job_playable(job_id: str) -> None:
    services.job_playable_process(job_id=job_id)


@shared_task(name="notify.deliver", ignore_result=True)
def deliver(delivery_id: str, seq: int, reserved: bool = False) -> str:
    return services.delivery_attempt(delivery_id=delivery_id, seq=seq, reserved=reserved)
