"""The REST API (DRF): authentication, pagination, errors, throttling,
its OpenAPI schema, and Idempotency-Key answers. Its rates per plan are
limits (limits.py)."""
from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from project.cpu_slices import DEFAULT_SLICE_US, parse_slice_us
from project.settings.environ import env

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's, reading the user's plan in the same query (uploads/limits.py).
        "uploads.limits.PlanTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Newest first by a cursor on created_at: O(page) at any depth, stable
    # while new rows arrive (uploads/pagination.py).
    "DEFAULT_PAGINATION_CLASS": "uploads.pagination.NewestFirstCursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "uploads.api_errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "uploads.api_schema.AutoSchema",  # adds the common error answers
    # Requests a minute per user and route class, from the user's plan
    # (below), shared by every web host through Redis (uploads/throttling.py).
    "DEFAULT_THROTTLE_CLASSES": ["uploads.throttling.PlanRateThrottle"],
    # Anonymous requests are counted by address: the client's as the last
    # of this many proxies in front of the web hosts saw it (X-Forwarded-For),
    # or REMOTE_ADDR with 0, so a client cannot pick its own.
    "NUM_PROXIES": int(env("FAIRLANE_API_PROXIES", "0")),
}
# The OpenAPI 3 schema (/api/schema/) is generated from the views; its docs
# page (/api/docs/, Swagger UI) is served from our static files. Public: the
# schema describes the API, it holds no user data.
SPECTACULAR_SETTINGS = {
    "TITLE": "Fairlane API",
    "DESCRIPTION": "Upload media, follow and control its processing, export and delete it; webhooks and "
                   "notification preferences. Authenticate with `Authorization: Token <token>` (or the "
                   "browser session plus the `X-CSRFToken` header). Every error answers "
                   "`{\"error\": {\"code\", \"message\", ...}}`. See docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"JobStatusEnum": "uploads.models.Job.Status"},
}
# Idempotency-Key answers are kept this long (uploads/idempotency.py): a
# client retrying within a day gets the first answer; after it the key is
# free again. A day is what Stripe keeps and covers any sane retry loop.
FAIRLANE_IDEMPOTENCY_TTL_S = int(env("FAIRLANE_IDEMPOTENCY_TTL_S", str(24 * 3600)))
# The web's front door (project/web_gate.py): Django's threads per web
# process, and how many one client's requests may hold at once (half: the
# rest are free for others whatever one client sends); how long a request
# refused for a while yet is held before its 429 (on a timer, not a
# thread), and how many of one client's (and of all) are held at once; how
# many of one client's requests may wait for a thread.
FAIRLANE_WEB_THREADS = int(env("WEB_THREADS", "4"))
FAIRLANE_WEB_THREADS_PER_CLIENT = int(env("FAIRLANE_WEB_THREADS_PER_CLIENT", str(max(1, FAIRLANE_WEB_THREADS // 2))))
FAIRLANE_WEB_REFUSAL_HOLD_S = float(env("FAIRLANE_WEB_REFUSAL_HOLD_S", "2"))
FAIRLANE_WEB_HELD_PER_CLIENT = int(env("FAIRLANE_WEB_HELD_PER_CLIENT", "256"))
FAIRLANE_WEB_HELD_MOST = int(env("FAIRLANE_WEB_HELD_MOST", "4096"))
FAIRLANE_WEB_WAITING_PER_CLIENT = int(env("FAIRLANE_WEB_WAITING_PER_CLIENT", "256"))
# How long a thread of a process users share (the web, the io-notify lane)
# may compute before another that is back from I/O may take the GIL
# (project/gil_turns.py): CPython's default is 5 ms, paid on every return
# from I/O beside a computing thread.
FAIRLANE_GIL_SWITCH_MS = float(env("FAIRLANE_GIL_SWITCH_MS", "0.5"))
if not 0 < FAIRLANE_GIL_SWITCH_MS <= 100:
    raise ImproperlyConfigured("FAIRLANE_GIL_SWITCH_MS must be above 0 and at most 100")
# The CPU slice the request-serving processes ask the kernel for (the web,
# the embedded Redis and SeaweedFS: project/cpu_slices.py), so their
# wake-ups do not wait for another process's turn to end: 0.1 ms to 100 ms
# (the kernel's bounds), 0 for the kernel's own.
try:
    FAIRLANE_CPU_SLICE_US = parse_slice_us(env("FAIRLANE_CPU_SLICE_US", DEFAULT_SLICE_US))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# A batch poll's estimate reads the user's unfinished work per rate key (a
# grouped aggregate over all of their queued jobs: ~130 ms at 10,000). A web
# process reuses it for this long while the polled batches' counts and
# progress are unchanged, so a user's many open pages cost one aggregate
# per interval, not one per poll (uploads/selectors.py). 0: never reused.
FAIRLANE_ESTIMATE_REUSE_S = float(env("FAIRLANE_ESTIMATE_REUSE_S", "2"))
# A batch poll's whole answer (counts, progress, estimate) that covers at
# least this many files is kept in Redis and reused by every web process
# for FAIRLANE_ESTIMATE_REUSE_S, whatever moved meanwhile; a smaller one
# never is (uploads/batch_summary.py).
FAIRLANE_POLL_REUSE_FILES = int(env("FAIRLANE_POLL_REUSE_FILES", "1000"))
# ... and one interval longer for every this many files it covers past
# them: a user's polls then cost the database about the same time a second
# whatever the size of their batches (uploads/batch_summary.py, reuse_for).
FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL = int(env("FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL", "2500"))
if FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL < 1:
    raise ImproperlyConfigured("FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL must be at least 1")
