"""GET /healthz: is everything a job needs reachable? 200 when all is up,
503 otherwise, with which check failed.

Anyone may call it, often (load balancers, uptime checks, attackers), so it
costs one short round trip per check and waits on nothing: SELECT 1, a
Redis PING, and the worker registrations the fair dispatcher already keeps
(each worker renews its own every third of FAIR_WORKER_TTL_S, 8 s; one that stops is gone within it). It used to broadcast a Celery ping and wait
a full second for the replies, so a few requests a second filled the web
server's threads.

A lane can have live workers and still move nothing (every slot of its
window held by jobs that will never run): each lane is also checked for
progress (dispatcher/health.py). A lane with work to move that has
released, started, renewed or finished nothing for FAIR_STALL_S (60 s) is
`stalled`, and the answer is 503, whatever the registrations say. This is
a check of the whole system, for monitoring and deploys; a load balancer
that wants to know whether this web process answers needs only a 2xx or
503 from it, and should not drain every web host because a lane stalled:
give it `?scope=web`, which checks only what a web request needs (the
database and Redis).

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


def _redis_workers_and_lanes(detailed: bool, *, web_only: bool) -> dict:
    try:
        dispatcher.scheduler(Lane.CPU_TRANSCODE).client.ping()
        if web_only:
            return {"redis": {"ok": True}}
        # Expired against the dispatcher's own clock (live_workers' default).
        live = {lane: dispatcher.scheduler(lane).live_workers() for lane in FAIR_LANES}
        return {"redis": {"ok": True}, "workers": workers_check(live, detailed=detailed),
                "lanes": lanes_check(detailed=detailed)}
    except Exception as exc:  # any client error means "down"
        failed = {"redis": _failed(exc, detailed)}
        return failed if web_only else {**failed, "workers": {"ok": False}, "lanes": {"ok": False}}


def lanes_check(*, detailed: bool) -> dict:
    """Each fair lane moves: not stalled (dispatcher/health.py)."""
    lanes = {}
    for lane in sorted(FAIR_LANES):
        h = dispatcher.lane_health(lane)
        lanes[lane.value] = {
            "ok": not h.stalled, "state": "stalled" if h.stalled else "moving" if h.has_work else "idle",
            "idle_s": h.idle_s, "in_flight": h.in_flight, "window": h.window, "waiting_users": h.waiting_users,
            "lost_messages_pending": h.lost_pending,
        } if detailed else not h.stalled
    return {"ok": all((lane["ok"] if detailed else lane) for lane in lanes.values()), "lanes": lanes}


def _detailed(request: HttpRequest) -> bool:
    return has_metrics_token(request) or (request.user.is_authenticated and request.user.is_staff)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    detailed = _detailed(request)
    web_only = request.GET.get("scope") == "web"
    checks = {"database": _database(detailed), **_redis_workers_and_lanes(detailed, web_only=web_only)}
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse({"ok": ok, **checks}, status=200 if ok else 503)
