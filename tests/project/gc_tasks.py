"""A task that tells its test how many objects its worker froze, and its
GIL switch interval (tests/project/test_shared_processes.py)."""
from __future__ import annotations

import gc
import json
import sys

import redis
from celery import shared_task
from django.conf import settings


@shared_task(name="bench.io.frozen_objects", ignore_result=True)
def frozen_objects(key: str) -> None:
    seen = {"frozen": gc.get_freeze_count(), "switch_interval": sys.getswitchinterval()}
    redis.Redis.from_url(settings.FAIR_REDIS_URL).set(key, json.dumps(seen), ex=300)
