"""Timestamps of a job's hand-over, written by a worker that imports this
module (`--include bench.handover_probe`) for bench/handover.py.

One line per event, `<time.time()> <pid> <event> <task id>`, appended to
the file named by BENCH_HANDOVER_LOG with one write(2) each (atomic for
lines this short under O_APPEND, so the parent and its children share the
file). Events: `received` (the worker's main process has the message),
`prerun` (the child is about to run the task), `success` (the task body
returned), `postrun` (every other task_postrun receiver has run: in the fair
mode, the dispatcher's finish call).

The child's receivers are connected at worker_process_init, after every
module of the worker is loaded, so they run after the dispatcher's own
(Celery calls a signal's receivers in the order they were connected). No
Django, no Fairlane: the plain baseline's worker imports this too.
"""
from __future__ import annotations

import os
import time

from celery import signals

_fd: int | None = None


def _mark(event: str, task_id: str) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["BENCH_HANDOVER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{time.time():.6f} {os.getpid()} {event} {task_id}\n".encode())


@signals.task_received.connect
def _received(request=None, **kwargs) -> None:
    _mark("received", request.id)


def _prerun(task_id: str = "", **kwargs) -> None:
    _mark("prerun", task_id)


def _success(sender=None, **kwargs) -> None:
    _mark("success", sender.request.id)


def _postrun(task_id: str = "", **kwargs) -> None:
    _mark("postrun", task_id)


@signals.worker_process_init.connect
def _connect_child(**kwargs) -> None:
    signals.task_prerun.connect(_prerun, weak=False)
    signals.task_success.connect(_success, weak=False)
    signals.task_postrun.connect(_postrun, weak=False)
