"""Where a slow request's time went, logged as it ends.

A request that took FAIRLANE_SLOW_REQUEST_MS or more (0: none) is logged
("fairlane.slow", WARNING) with what an operator needs to tell one kind of
slowness from another: its wait at the front door for a thread
(project/web_gate.py, which hands it over in a header of its own), its
time in Django, its thread's CPU time in that, and its database calls
(how many, their time, the slowest one's). A light user's request slowed
by a busy database host shows many small queries each waiting for the
core; one held up by a lock or a plan shows one slow query; one waiting
for a thread shows the front door (bench-isolation, issue 32, reads these).

The header is the front door's only: it removes any the client sent
before it adds its own, and a request that did not come through it has
none (shown as "-").
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

log = logging.getLogger("fairlane.slow")
_clock = time.perf_counter  # a request's time in Django (the tests drive it)

# The front door's wait for a thread, in whole milliseconds (web_gate.py sets it).
GATE_WAIT_HEADER = "x-fairlane-gate-wait-ms"
_GATE_WAIT_META = "HTTP_" + GATE_WAIT_HEADER.upper().replace("-", "_")


class _Calls:
    """The database calls of one request: their number, time and slowest."""

    def __init__(self) -> None:
        self.count, self.seconds, self.slowest, self.slowest_sql = 0, 0.0, 0.0, ""

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            took = time.perf_counter() - started
            self.count += 1
            self.seconds += took
            if took > self.slowest:
                self.slowest, self.slowest_sql = took, sql


class SlowRequestLog:
    """Django middleware (first in MIDDLEWARE, so it sees the others' time)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        threshold_s = settings.FAIRLANE_SLOW_REQUEST_MS / 1000
        if threshold_s <= 0:
            return self.get_response(request)
        calls = _Calls()
        started, cpu_started = _clock(), time.thread_time()
        with connection.execute_wrapper(calls):
            response = self.get_response(request)
        took = _clock() - started
        if took >= threshold_s:
            user = getattr(request, "user", None)
            log.warning(
                'slow request: "%s %s" %s user %s: %.0f ms in Django (front door wait %s ms), CPU %.0f ms, '
                "database %.0f ms in %d queries (slowest %.0f ms: %s)", request.method, request.path,
                response.status_code, getattr(user, "pk", None) or "-", took * 1000,
                _gate_wait(request), (time.thread_time() - cpu_started) * 1000, calls.seconds * 1000, calls.count,
                calls.slowest * 1000, " ".join(calls.slowest_sql.split())[:120] or "-")
        return response


def _gate_wait(request: HttpRequest) -> str:
    value = request.META.get(_GATE_WAIT_META, "")
    return value if value.isdigit() else "-"


__all__ = ["GATE_WAIT_HEADER", "SlowRequestLog"]
