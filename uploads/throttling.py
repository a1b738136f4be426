"""API request rates, per user and per route class, shared by every web host.

Every API request is of one route class:

    read    every GET (the pages' own polling too)
    upload  the rest of uploading: creating direct uploads, signing their
            parts, completing, giving up, and POST /api/uploads/ (a claim or
            a multipart upload); views say so with `throttle_scope`
    replay  replaying a webhook delivery: a request to a receiver the user chose
    write   every other POST, PATCH and DELETE

A user's requests of a class are held to their plan's rate for it
(api_<class>s_per_min; FAIRLANE_API_<CLASS>S_PER_MIN by default:
uploads/limits.py); anonymous ones (only the schema and its docs page take
them) to FAIRLANE_API_ANON_PER_MIN per address. Past it the answer is 429
`throttled`, with `Retry-After` (whole seconds, at least 1) and the same in
the body's `retry_after`. One user's requests never count against another's.

Counting requests does not bound what they cost: one batch list takes 5 ms,
another (over 10,000 jobs) 100 ms, a 5,000-job cancel 8 s, and a user within
their rates could keep the web's threads busy for everyone (bench-isolation).
So a user's API requests also share one budget of the web's time, their
plan's api_seconds_per_min (FAIRLANE_API_SECONDS_PER_MIN): each request
that passed is charged, after its answer, the seconds it spent in Django,
and a request is refused (429 `throttled`, route class `seconds`) while the
user is more than a minute's budget ahead. The charge comes after, so one
long request is never cut short; the next ones wait until it is paid.

How. A rate of N a minute is a GCRA bucket (the generic cell rate
algorithm, as notify/ratelimit.py keeps one per webhook endpoint): one Redis
key per user and class holds the "theoretical arrival time" (TAT). A
request passes when max(TAT, now) + 60/N s is at most a minute from now,
and moves TAT there; so N requests may come at once, then one every 60/N s,
and a refused one changes nothing and learns exactly when the next passes.
One script call per request, atomic: no two web hosts can both take the
last place, and its cost does not grow with the rate or with other users.
(DRF's SimpleRateThrottle keeps each key's timestamps as a list in the
cache, read and written back whole by every request: N floats each time,
and two hosts that read the same list both pass.) A key lives at most a
minute after its last request.

The clock is the web host's (`timer`, DRF's hook, which the tests drive):
hosts keep NTP time, and one ahead by d seconds lets a user through at most
d / (60/N) requests early. Redis unavailable, requests pass (logged): the
API works through an outage, and the limits counted in the database hold.

A refusal costs next to nothing the second time. A refused request learns
exactly when the next one would pass, and until then every request of that
user and class is refused (another host's requests can only move the time
later). So each web process remembers, by the request's credentials as sent
(its Authorization header and session cookie, both), until when they are
refused for each class (`KnownRefusals`), and `KnownRefusalMiddleware`
answers a request whose credentials and class are refused for a while yet
with the same 429, before Django loads a session, authenticates, or asks
Redis: no query, no Redis call. One user polling a thousand pages past their
rate costs the web tier a dictionary lookup per request, not a request's
work, and the threads stay free for everyone else. Only credentials a view
authenticated and refused are remembered, so nobody can be refused by what
another user sends; an entry lasts at most a minute (a plan raised meanwhile
applies from its end, and a token deleted meanwhile is answered 429, not 401,
until then), and a process remembers at most REMEMBERED_MOST of them.
The web's front door (project/web_gate.py) asks the same before a request
takes a thread (`known_refusal`) and holds it on a timer before its 429,
and keys its turns by the user each credentials were found to be
(`KnownUsers`, which the throttle fills).
"""
from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle

from project import redis_clients
from uploads import limits

if TYPE_CHECKING:  # DRF's views import this module (DEFAULT_THROTTLE_CLASSES)
    from rest_framework.request import Request
    from rest_framework.views import APIView

log = logging.getLogger(__name__)

READ, WRITE, UPLOAD, REPLAY = limits.API_CLASSES
ANONYMOUS = "anonymous"
SECONDS = "seconds"  # the web's time for all of a user's API requests
KEY_PREFIX = "fairlane:throttle:"
PERIOD_US = 60_000_000  # rates are per minute
# KEYS[1] the bucket; KEYS[2], if given, the user's bucket of the web's time,
# which must not be more than a minute ahead either. ARGV now and the
# interval between requests (60/N s), both in whole microseconds (exact in
# Lua's doubles). Returns {0, 0} (passed) or {the microseconds until a
# request would pass, 1 if the web's time is what is spent}.
_GCRA = """
local now, interval, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if KEYS[2] then
  local spent = tonumber(redis.call('GET', KEYS[2]) or '0')
  if spent - now > period then
    return {spent - now - period, 1}
  end
end
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now) + interval
if tat - now > period then
  return {tat - now - period, 0}
end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
return {0, 0}
"""
# KEYS[1] the user's bucket of the web's time; ARGV now and what the request
# cost it (its seconds scaled to the plan's: 60 / seconds a minute), whole
# microseconds. A GCRA whose interval is the request's cost.
_CHARGE = """
local now = tonumber(ARGV[1])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now) + tonumber(ARGV[2])
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
return 0
"""


@dataclass(frozen=True)
class Refusal:
    """What a refused request was held to, for its answer (uploads/api_errors.py)."""

    route_class: str
    per_min: int


def _client(url: str) -> redis.Redis:
    return redis_clients.client(url, timeout_s=1)  # shorter: every API request waits on it


@functools.lru_cache(maxsize=4)
def _script(url: str):
    return _client(url).register_script(_GCRA)


@functools.lru_cache(maxsize=4)
def _charge_script(url: str):
    return _client(url).register_script(_CHARGE)


def route_class(request: Request, view: APIView) -> str:
    """The request's route class: a read, or what its view says its other
    methods are (`throttle_scope`), a write by default."""
    if request.method in SAFE_METHODS:
        return READ
    return getattr(view, "throttle_scope", None) or WRITE


def _path_route_class(method: str, path: str) -> str | None:
    """`route_class` before a view is chosen: from the URL's view class
    (DRF's as_view keeps it as `cls`); None for a path that is no view."""
    if method in SAFE_METHODS:
        return READ
    try:
        match = resolve(path)
    except Resolver404:
        return None
    return getattr(getattr(match.func, "cls", None), "throttle_scope", None) or WRITE


REMEMBERED_MOST = 10_000


class KnownRefusals:
    """Until when each credentials' requests of a class are refused, on this
    web process (the module's docstring says why that is exact)."""

    def __init__(self) -> None:
        # credentials -> {route class: (refused until, by the throttle's clock; the rate)}
        self._until: dict[tuple[str, str], dict[str, tuple[float, int]]] = {}

    @staticmethod
    def credentials(request: HttpRequest) -> tuple[str, str]:
        """What authenticates the request, as sent: both, as DRF tries both."""
        return request.META.get("HTTP_AUTHORIZATION", ""), request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")

    def remember(self, request: HttpRequest, name: str, per_min: int, until: float) -> None:
        if len(self._until) >= REMEMBERED_MOST:
            now = PlanRateThrottle.timer()
            self._until = {who: live for who, classes in list(self._until.items())
                           if (live := {n: e for n, e in classes.items() if e[0] > now})}
            if len(self._until) >= REMEMBERED_MOST:
                self._until.pop(next(iter(self._until)))  # the longest remembered
        self._until.setdefault(self.credentials(request), {})[name] = (until, per_min)

    def refused(self, credentials: tuple[str, str], method: str, path: str) -> tuple[Refusal, float] | None:
        """(the refusal, seconds it has left) if requests with these
        credentials are refused for the route class of `method` on `path`
        for a while yet."""
        classes = self._until.get(credentials)
        if not classes:
            return None
        now = PlanRateThrottle.timer()
        for name in (SECONDS, _path_route_class(method, path)):
            until, per_min = classes.get(name, (0.0, 0))
            left = until - now
            if 0 < left <= PERIOD_US / 1_000_000:
                return Refusal(name, per_min), left
            classes.pop(name, None)  # over, or a clock that went back
        return None

    def clear(self) -> None:
        self._until.clear()


known_refusals = KnownRefusals()


class KnownUsers:
    """Whose each credentials are, as the throttle found them authenticated,
    on this web process: so that project/web_gate.py gives a user one turn
    however many sessions or tokens their requests come with. At most
    REMEMBERED_MOST, the least recently seen forgotten first."""

    def __init__(self) -> None:
        self._users: dict[tuple[str, str], int] = {}

    def remember(self, request: HttpRequest, user_id: int) -> None:
        credentials = KnownRefusals.credentials(request)
        if self._users.pop(credentials, None) is None and len(self._users) >= REMEMBERED_MOST:
            self._users.pop(next(iter(self._users)), None)
        self._users[credentials] = user_id

    def user_of(self, credentials: tuple[str, str]) -> int | None:
        return self._users.get(credentials)

    def clear(self) -> None:
        self._users.clear()


known_users = KnownUsers()


def known_refusal(credentials: tuple[str, str], method: str, path: str) -> tuple[float, Callable[[int], dict]] | None:
    """What project/web_gate.py asks before a request takes a thread: the
    seconds a refusal of these credentials' request has left, and its
    answer's body for a Retry-After of n seconds; None if it is not refused."""
    known = known_refusals.refused(credentials, method, path)
    if known is None:
        return None
    refusal, left = known
    return left, lambda retry_after: {"error": {"code": "throttled", **refusal_details(refusal, retry_after)}}


class KnownRefusalMiddleware:
    """Answers an API request whose credentials are refused for its route
    class (or for the web's time) for a while yet, before the session,
    authentication or Redis (under bin/web the front door, project/web_gate.py,
    has held and answered most of them before a thread; this answers the
    rest, and all of them under any other server); and charges a request that passed with the
    time it took (settings.MIDDLEWARE: after security headers and static
    files, so that the time is nearly all of the request's in Django)."""

    clock = time.perf_counter  # what a request's time is read from, which tests replace

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith("/api/"):
            return self.get_response(request)
        known = known_refusal(KnownRefusals.credentials(request), request.method, request.path_info)
        if known is not None:
            left, body = known
            retry_after = max(1, math.ceil(left))
            return JsonResponse(body(retry_after), status=429, headers={"Retry-After": str(retry_after)})
        started = self.clock()
        response = self.get_response(request)
        took = self.clock() - started
        charge = getattr(request, "api_seconds_charge", None)  # set by the throttle when it let it pass
        if charge is not None:
            _charge(charge, took)
        return response


def _charge(charge: tuple[str, int], seconds: float) -> None:
    """The user's bucket of the web's time takes `seconds` of a plan that
    allows `per_min` seconds a minute."""
    key, per_min = charge
    try:
        _charge_script(settings.REDIS_URL)(keys=[key], args=[int(PlanRateThrottle.timer() * 1_000_000),
                                                             math.ceil(seconds * PERIOD_US / per_min)])
    except redis.RedisError as exc:
        log.warning("API rates: a request's time not counted, Redis unavailable: %r", exc)


class PlanRateThrottle(BaseThrottle):
    """DRF's throttle for every API view (settings.REST_FRAMEWORK): the
    user's plan's rate for the request's route class, counted in Redis."""

    timer = time.time  # as DRF's SimpleRateThrottle: the clock, which tests replace

    def allow_request(self, request: Request, view: APIView) -> bool:
        user = request.user
        seconds_key = seconds_per_min = None
        if user is not None and user.is_authenticated:
            known_users.remember(request._request, user.pk)
            name, who, plan = route_class(request, view), f"user:{user.pk}", limits.limits_for(user_id=user.pk)
            per_min, seconds_per_min = plan.api_per_min[name], plan.api_seconds_per_min
            seconds_key = f"{KEY_PREFIX}{SECONDS}:{who}"
        else:
            name, who, per_min = ANONYMOUS, f"ip:{self.get_ident(request)}", settings.FAIRLANE_API_ANON_PER_MIN
        now_us = int(self.timer() * 1_000_000)
        try:
            wait_us, spent = _script(settings.REDIS_URL)(
                keys=[f"{KEY_PREFIX}{name}:{who}", *([seconds_key] if seconds_key else [])],
                args=[now_us, PERIOD_US // per_min, PERIOD_US])
        except redis.RedisError as exc:
            log.warning("API rates: not counted, Redis unavailable: %r", exc)
            return True
        self.wait_s = wait_us / 1_000_000
        if not wait_us:
            if seconds_key:
                request._request.api_seconds_charge = (seconds_key, seconds_per_min)
            return True
        if spent:
            name, per_min = SECONDS, seconds_per_min
        request.throttle_refusal = Refusal(name, per_min)
        if name != ANONYMOUS:
            known_refusals.remember(request._request, name, per_min, now_us / 1_000_000 + self.wait_s)
        return False

    def wait(self) -> float:
        return self.wait_s


def refusal_details(refusal: Refusal | None, retry_after: int) -> dict:
    """The body of a 429 `throttled` beside its code: a message for people,
    `retry_after` (the seconds of its Retry-After header), and the route
    class and rate it was held to (`refusal`, the request's `throttle_refusal`)."""
    details = {"retry_after": retry_after}
    if refusal is None:
        return {"message": f"Too many requests; try again in {retry_after} s.", **details}
    if refusal.route_class == ANONYMOUS:
        why = f"Too many requests from your address: {refusal.per_min:,} a minute are allowed"
    elif refusal.route_class == SECONDS:
        why = (f"Your API requests took too much of the web's time: your plan allows {refusal.per_min:,} s "
               f"of them a minute")
    else:
        why = f"Too many {refusal.route_class} requests: your plan allows {refusal.per_min:,} a minute"
    return {"message": f"{why}. Try again in {retry_after} s.", "route_class": refusal.route_class,
            "limit": refusal.per_min, **details}


__all__ = ["ANONYMOUS", "KEY_PREFIX", "SECONDS", "KnownRefusalMiddleware", "KnownRefusals", "KnownUsers",
           "PlanRateThrottle", "READ", "REPLAY", "Refusal", "UPLOAD", "WRITE", "known_refusal", "known_refusals",
           "known_users", "refusal_details", "route_class"]
