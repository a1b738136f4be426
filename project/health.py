"""GET /healthz: is everything a job needs reachable? 200 when all is up,
503 otherwise, with what is down. Worker reachability is a broadcast ping,
answered by each worker per lane (`cpu@host`, `io@host`)."""
from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from project.celery import app
from project.lanes import Lane

# Worker name prefixes per lane, as the Procfile names them.
LANE_WORKER_PREFIX = {Lane.CPU_TRANSCODE: "cpu@", Lane.IO_NOTIFY: "io@"}
PING_TIMEOUT_S = 1.0


def _database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True}
    except Exception as exc:  # any driver error means "down"
        return {"ok": False, "error": type(exc).__name__}


def _redis() -> dict:
    try:
        with app.connection_for_write() as conn:
            conn.default_channel.client.ping()
        return {"ok": True}
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}


def _workers() -> dict:
    try:
        replies = app.control.ping(timeout=PING_TIMEOUT_S) or []
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}
    names = sorted(name for reply in replies for name in reply)
    lanes = {lane.value: [n for n in names if n.startswith(prefix)] for lane, prefix in LANE_WORKER_PREFIX.items()}
    return {"ok": all(lanes.values()), "lanes": lanes}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "redis": _redis()}
    checks["workers"] = _workers() if checks["redis"]["ok"] else {"ok": False, "error": "redis down"}
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse({"ok": ok, **checks}, status=200 if ok else 503)
