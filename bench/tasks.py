"""Synthetic jobs of known cost for the fairness benchmark and tests, as
tasks of the project's Celery app (the fair mode). The bodies are in
bench/recorder.py, shared with the plain Celery apps of bench/plain_celery.py.

They record when they ran in Redis (not the database) so that measuring them
adds nothing the plain-Celery baseline would not pay. `spin` burns CPU for
its cost; `noop` measures pure dispatch overhead. Routed by the `bench.cpu.` /
`bench.io.` prefixes.
"""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from bench import recorder
from bench.recorder import RUNS_KEY, client

__all__ = ("RUNS_KEY", "client", "noop", "spin")

recorder.redis_url = lambda: settings.FAIR_REDIS_URL
spin = shared_task(name="bench.cpu.spin", ignore_result=True)(recorder.spin)
noop = shared_task(name="bench.cpu.noop", ignore_result=True)(recorder.noop)
