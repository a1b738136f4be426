"""A task that tells its test how many objects its worker froze
(tests/project/test_gc_pauses.py)."""
from __future__ import annotations

import gc

import redis
from celery import shared_task
from django.conf import settings


@shared_task(name="bench.io.frozen_objects", ignore_result=True)
def frozen_objects(key: str) -> None:
    redis.Redis.from_url(settings.FAIR_REDIS_URL).set(key, gc.get_freeze_count(), ex=300)
