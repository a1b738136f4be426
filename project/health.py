"""GET /healthz: is everything a job needs reachable? 200 when all is up,
503 otherwise, with which check failed.

Anyone may call it, often (load balancers, uptime checks, attackers), so it
costs one short round trip per check and waits on nothing: SELECT 1, a
Redis PING, and the worker registrations the fair dispatcher already keeps
(each worker renews its own every third of FAIR_WORKER_TTL_S, 8 s; one that stops is gone within it). It used to broadcast a Celery ping and wait
a full second for the replies, so a few requests a second filled the web
server's threads.

Workers register only when fair dispatch is on (FAIR_DISPATCH_ENABLED=0,
plain Celery, is for benchmarks): without it, no lane has a live worker.

Everyone gets ok/not ok per check. The workers' names (host names) and
slots, and the errors' types, are for staff or a caller
with the metrics token (`Authorization: Bearer $METRICS_TOKEN`).
"""
from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

import dispatcher
from project.lanes import FAIR_LANES, Lane
from project.metrics import has_metrics_token

LiveWorkers = dict[Lane, dict[str, tuple[int, float]]]  # lane -> name -> (slots, registration expires at)


def _failed(exc: Exception, detailed: bool) -> dict:
    return {"ok": False, "error": type(exc).__name__} if detailed else {"ok": False}


def _database(detailed: bool) -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True}
    except Exception as exc:  # any driver error means "down"
        return _failed(exc, detailed)


def workers_check(live: LiveWorkers, *, detailed: bool) -> dict:
    """Each lane needs at least one live worker."""
    lanes = {}
    for lane in sorted(FAIR_LANES):
        workers = live.get(lane, {})
        lanes[lane.value] = {"ok": bool(workers), "workers": {
            name: {"slots": slots} for name, (slots, _) in sorted(workers.items())}} if detailed else bool(workers)
    ok = all((lane["ok"] if detailed else lane) for lane in lanes.values())
    return {"ok": ok, "lanes": lanes}


def _redis_and_workers(detailed: bool) -> tuple[dict, dict]:
    try:
        dispatcher.scheduler(Lane.CPU_TRANSCODE).client.ping()
        # Expired against the dispatcher's own clock (live_workers' default).
        live = {lane: dispatcher.scheduler(lane).live_workers() for lane in FAIR_LANES}
    except Exception as exc:  # any client error means "down"
        return _failed(exc, detailed), {"ok": False}
    return {"ok": True}, workers_check(live, detailed=detailed)


def _detailed(request: HttpRequest) -> bool:
    return has_metrics_token(request) or (request.user.is_authenticated and request.user.is_staff)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    detailed = _detailed(request)
    redis_check, workers = _redis_and_workers(detailed)
    checks = {"database": _database(detailed), "redis": redis_check, "workers": workers}
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse({"ok": ok, **checks}, status=200 if ok else 503)
