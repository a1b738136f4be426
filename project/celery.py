"""The Celery app: configuration from Django settings (namespace CELERY),
tasks discovered in the installed apps, and the lanes declared explicitly so
that `task_create_missing_queues = False` can catch typos."""
from __future__ import annotations

import os
import warnings

from celery import Celery, signals
from celery.exceptions import SecurityWarning
from kombu import Exchange, Queue

from project.lanes import Lane

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("fairlane")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each lane its own direct exchange: a queue declared without one is bound
# to the default queue's (io-notify), which is what a worker's banner then
# shows for cpu-transcode. Messages go to the queue itself either way.
app.conf.task_queues = tuple(Queue(lane.value, Exchange(lane.value, type="direct"), routing_key=lane.value)
                             for lane in Lane)
# Nothing is meant to reach the default queue; if the router is bypassed the
# task still lands on a lane a worker consumes, not on `celery`.
app.conf.task_default_queue = Lane.IO_NOTIFY.value
app.autodiscover_tasks()
# Periodic maintenance (beat): settings.CELERY_BEAT_SCHEDULE.

PICKLE = {"pickle", "application/x-python-serialize"}


@signals.celeryd_init.connect
def _root_warning_off_without_pickle(conf, **kwargs) -> None:
    """A worker started as root (a container, `make run` as root) warns that
    it should not be: the danger it names is a message deserialized by
    pickle, which runs what the message says with root's rights. Ours
    accept JSON only (CELERY_ACCEPT_CONTENT), and with pickle accepted
    Celery refuses to start as root at all; so the warning says nothing a
    user could act on here. Sent before Celery checks (celery/apps/worker.py)."""
    if not PICKLE & set(conf.accept_content):
        warnings.filterwarnings("ignore", message="You're running the worker with superuser privileges",
                                category=SecurityWarning)


@signals.worker_ready.connect
def _ready_to_share(**kwargs) -> None:
    """The io-notify lane's threads share one process, and with it every
    user's deliveries: its start-up objects leave the collector's full
    passes, and its threads take short GIL turns, as the web's do
    (project/gc_pauses.py, project/gil_turns.py). Sent in the worker's main
    process once its pool is up; a prefork pool's children are forked by
    then and keep their own, one job at a time each."""
    from project.gc_pauses import freeze_startup_objects
    from project.gil_turns import shorten_gil_turns

    freeze_startup_objects()
    shorten_gil_turns()


# Connects the log context's worker signals (task id and lane on every line).
# The fair dispatcher connects its own when Django loads its app
# (dispatcher/apps.py), so the dispatcher never imports this module.
from project import logcontext  # noqa: E402,F401
