"""The project's Celery app, consuming one more queue (FAIRLANE_TEST_QUEUE):
for a worker that must see no job but the test's own. A lane's worker would
also run what other tests left in that lane (a webhook's retry, say)."""
from __future__ import annotations

import os

from kombu import Queue

from project.celery import app

app.conf.task_queues = (*app.conf.task_queues, Queue(os.environ["FAIRLANE_TEST_QUEUE"]))
