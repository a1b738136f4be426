"""The Celery app: configuration from Django settings (namespace CELERY),
tasks discovered in the installed apps, and the lanes declared explicitly so
that `task_create_missing_queues = False` can catch typos."""
from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

from project.lanes import Lane

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("fairlane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(lane.value, routing_key=lane.value) for lane in Lane)
# Nothing is meant to reach the default queue; if the router is bypassed the
# task still lands on a lane a worker consumes, not on `celery`.
app.conf.task_default_queue = Lane.IO_NOTIFY.value
app.autodiscover_tasks()
# Periodic maintenance (beat): settings.CELERY_BEAT_SCHEDULE.

# Connects the log context's worker signals (task id and lane on every line).
# The fair dispatcher connects its own when Django loads its app
# (dispatcher/apps.py), so the dispatcher never imports this module.
from project import logcontext  # noqa: E402,F401
