"""The one way work enters a lane.

Services call `enqueue` with a job id and the fairness key (the owning
user); the router picks the lane. Celery task ids are derived from the job
id so that a re-enqueue of the same job is recognisable everywhere (Flower,
TaskResult, the fair dispatcher).
"""
from __future__ import annotations

from project.celery import app


def enqueue(task_name: str, *, job_id: str, fair_key: str, cost: float = 1.0, task_id: str | None = None) -> str:
    """Submit `task_name(job_id)`; returns the Celery task id."""
    task_id = task_id or job_id
    app.send_task(task_name, args=[job_id], task_id=task_id)
    return task_id
