"""Two Celery apps without any of Fairlane's hooks, the baselines of
bench/fairness.py, configured as the project's workers are (acks_late,
prefetch 1, JSON, task events on, `task-sent` events on) and nothing else: no
router, no result backend, no signals, no Django. Celery would otherwise
install its Django fixup in any app when DJANGO_SETTINGS_MODULE is set (the
benchmark sets it for the fair worker): the worker would set up the project
and with it Fairlane's task hooks, a finish script per job that the
baseline must not pay (`fixups=()`).

- `fifo_app`: one queue, first in first out: what plain Celery gives.
- `per_user_app`: a queue per user, as a Celery user would build fairness
  without a dispatcher: the submitter adds `user.<key>` to the workers'
  consumers (`app.control.add_consumer`) the first time it sees a user and
  sends that user's jobs there; kombu's Redis transport serves the queues a
  worker consumes round-robin.

Workers: `celery -A bench.plain_celery:fifo_app worker -Q bench-fifo` and
`celery -A bench.plain_celery:per_user_app worker -Q bench-users`.
"""
from __future__ import annotations

import os

from celery import Celery

from bench import recorder

FIFO_QUEUE = "bench-fifo"
# A per-user worker must consume something before the first user appears.
PER_USER_IDLE_QUEUE = "bench-users"


def user_queue(key: str) -> str:
    return f"user.{key}"


def _app(name: str, default_queue: str) -> Celery:
    app = Celery(name, broker=os.environ.get("REDIS_URL", "redis://127.0.0.1:6390/0"), fixups=())
    app.conf.update(
        task_default_queue=default_queue,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # As in project/settings/: Flower sees every task.
        task_send_sent_event=True,
        worker_send_task_events=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    recorder.register(app)
    return app


fifo_app = _app("bench-fifo", FIFO_QUEUE)
per_user_app = _app("bench-per-user", PER_USER_IDLE_QUEUE)
