"""The Celery router: every task's lane, decided here and nowhere else.

Celery calls `route_task` for each `apply_async`/`send_task` (celery/app/routes.py).
Options given at call time or with `queue=` on the task decorator would win
over a router, so no task in this project sets a queue: tests/project/test_routing.py
checks that. Unknown tasks fail loudly instead of landing on the default
`celery` queue that no worker consumes.
"""
from __future__ import annotations

from typing import Any

from project.lanes import Lane

# Task name -> lane. Task names are fixed (`name=` on the decorator) so a
# rename cannot orphan queued messages.
TASK_LANES: dict[str, Lane] = {
    "transcoding.job_run": Lane.CPU_TRANSCODE,
    "exports.job_run": Lane.CPU_TRANSCODE,
    "notify.job_finished": Lane.IO_NOTIFY,
    "notify.jobs_canceled": Lane.IO_NOTIFY,
    "notify.job_playable": Lane.IO_NOTIFY,
    "notify.deliver": Lane.IO_NOTIFY,
    "project.fair_reconcile": Lane.IO_NOTIFY,
    "uploads.direct_sweep": Lane.IO_NOTIFY,
    # Celery's own periodic cleanup of django-celery-results rows.
    "celery.backend_cleanup": Lane.IO_NOTIFY,
}

# Tasks that exist only in benchmarks and tests, routed by prefix so the bench
# can add tasks without touching this table.
PREFIX_LANES: dict[str, Lane] = {
    "bench.cpu.": Lane.CPU_TRANSCODE,
    "bench.io.": Lane.IO_NOTIFY,
}


class UnroutedTaskError(LookupError):
    """A task has no lane: fix TASK_LANES rather than let it hit the default queue."""


def lane_for(task_name: str) -> Lane:
    if task_name in TASK_LANES:
        return TASK_LANES[task_name]
    for prefix, lane in PREFIX_LANES.items():
        if task_name.startswith(prefix):
            return lane
    raise UnroutedTaskError(f"task {task_name!r} has no lane in project.routing.TASK_LANES")


def route_task(name: str, args: Any, kwargs: Any, options: dict, task: Any = None, **kw: Any) -> dict[str, str]:
    """Celery router signature; returns the lane's queue for every task."""
    return {"queue": lane_for(name).value}
