"""Every log line about a job carries its job id, user id, task id, lane and
attempt, without passing them to each logger call.

The fields live in a ContextVar: Celery signals bind the task's (task id,
lane) around each task, services bind the job's (job id, user id, attempt)
once they know it, and `ContextFilter` copies them onto every record. A
ContextVar is per thread, so the threads pool keeps its tasks apart.
"""
from __future__ import annotations

import logging
from contextvars import ContextVar

from celery import signals

FIELDS = ("job_id", "user_id", "task_id", "lane", "attempt")
_context: ContextVar[dict[str, object]] = ContextVar("fairlane_log_context", default={})


def bind(**fields: object) -> None:
    """Add fields to the current context (until `clear`)."""
    _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})


def clear() -> None:
    _context.set({})


def current() -> dict[str, object]:
    return dict(_context.get())


class ContextFilter(logging.Filter):
    """Puts the bound fields on the record (JSON logs get them as keys) and a
    compact `ctx` string for the plain format."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get()
        for name in FIELDS:
            setattr(record, name, ctx.get(name))
        record.ctx = " ".join(f"{k}={ctx[k]}" for k in FIELDS if k in ctx)
        return True


@signals.task_prerun.connect
def _bind_task(task_id: str, task, **kwargs) -> None:
    from project.routing import UnroutedTaskError, lane_for

    try:
        lane = lane_for(task.name).value
    except UnroutedTaskError:
        lane = None
    clear()
    bind(task_id=task_id, lane=lane)


@signals.task_postrun.connect
def _unbind_task(**kwargs) -> None:
    clear()
