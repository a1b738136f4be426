"""A user's requests hold at most half of a web process's threads at once.

Every user shares the web processes' threads (the Procfile's gunicorn: 2
processes x WEB_THREADS). Rates (uploads/throttling.py) bound how many
requests a user sends a minute, not how long each holds its thread: a
user's thousand open pages polling at once, or a few slow requests (a
5,000-job batch's cancel), would hold every thread, and every other user's
requests would wait in the listen queue behind them (bench-isolation).

So this middleware counts each user's requests in progress in this process
and answers the one past FAIRLANE_WEB_USER_THREADS at once, 429 `busy` with
`Retry-After: 1`, before its view runs: the refusal costs a dictionary
lookup, and the other half of the threads stays for everyone else. Per
process, not shared through Redis: a thread is a process's, and a count that
outlived a killed process could never be taken back.

Who a request is: the user of its API token (looked up once per token and
process, as DRF's TokenAuthentication would) or of its session (Django's
AuthenticationMiddleware, before this one). Anonymous requests are not
counted here: the few routes that take them are rated per address. Nor are
the signed links' routes (UNCOUNTED): what they serve is authorised by the
link, not the user, and is fetched by players, `<img>` tags and upload
parts, which cannot wait out a 429; with object storage the store serves
their bytes, not the web.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

RETRY_AFTER_S = 1
# Signed output links and live playlists (uploads/delivery.py, uploads/live.py),
# upload parts sent to the web on disk storage (media/urls), static files.
UNCOUNTED = ("/o/", "/store/", "/static/")


@functools.lru_cache(maxsize=10_000)
def _token_user(key: str) -> int | None:
    """The user id of an API token (None: no such token). A rotated token
    keeps its user here, which is harmless: DRF refuses it in the view."""
    from rest_framework.authtoken.models import Token

    return Token.objects.filter(key=key).values_list("user_id", flat=True).first()


def user_of(request: HttpRequest) -> int | None:
    """The id of the user a request speaks for, None when anonymous."""
    auth = request.META.get("HTTP_AUTHORIZATION", "")
    if auth.startswith("Token "):
        key = auth[len("Token "):].strip()
        return _token_user(key) if 0 < len(key) <= 64 else None
    user = getattr(request, "user", None)
    return user.pk if user is not None and user.is_authenticated else None


class UserThreadBound:
    """Django middleware: see the module's docstring."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.most = settings.FAIRLANE_WEB_USER_THREADS
        self.held: dict[int, int] = {}
        self.lock = threading.Lock()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user_id = None if request.path.startswith(UNCOUNTED) else user_of(request)
        if user_id is None:
            return self.get_response(request)
        with self.lock:
            held = self.held.get(user_id, 0)
            if held >= self.most:
                return _busy(request, self.most)
            self.held[user_id] = held + 1
        try:
            return self.get_response(request)
        finally:
            with self.lock:
                left = self.held.pop(user_id) - 1
                if left:
                    self.held[user_id] = left


def _busy(request: HttpRequest, most: int) -> HttpResponse:
    message = (f"Too many of your requests at once: at most {most} run at a time on each web process. "
               f"Try again in {RETRY_AFTER_S} s.")
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": {"code": "busy", "message": message, "retry_after": RETRY_AFTER_S}},
                                status=429)
    else:
        response = HttpResponse(message, status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
