"""Per-user limits on what users share, held in their plan (uploads.Profile).

The fair dispatcher shares worker time; these bound what else one user can
take of what everyone shares:

    max_queued_jobs        jobs queued, scheduled or running: each is held in
                           the dispatcher's Redis until it runs
    max_webhook_endpoints  webhook endpoints: every event is one delivery per
                           endpoint, held in Redis until sent (notify)
    max_pending_uploads    direct uploads in progress (uploads/direct.py)
    max_pending_bytes      the bytes those may hold
    api_<class>s_per_min   API requests a minute per route class
                           (uploads/throttling.py)

A plan's empty value means the setting's default (DEFAULTS), read when used,
so a changed setting reaches every plan without a value of its own. Values
are validated where plans are edited (project/plans.py) and checked again
here: a bad one stored anyway falls back to its default for that user only.

Counting is race-free across web hosts: a service that creates what a limit
counts takes the user's lock (`owner_lock`: their row, for its short
transaction), counts, and refuses before it has created anything or creates
it all. Each count reads the user's own rows through an index (jobs by
(owner, status), endpoints and uploads by owner), so its cost grows with what
the user has, which the limit bounds, and never with other users. A refusal
is a 429 naming the limit and the count; it creates nothing and touches
nothing already accepted.

A request reads each user's plan once (`PlanOncePerRequestMiddleware`):
its throttle, its first look and its check under the lock would otherwise
each read it, and on a busy database host every round trip waits for the
core (bench-isolation: a claim's 19 queries, 4 of them the same plan). With
a token, that once is the token's own query (`PlanTokenAuthentication`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from project import plans
from uploads.errors import ApplicationError
from uploads.models import Job, Profile

log = logging.getLogger(__name__)

# A plan's limit -> the setting that is its default.
DEFAULTS = {
    "max_queued_jobs": "FAIRLANE_MAX_QUEUED_JOBS",
    "max_webhook_endpoints": "NOTIFY_MAX_WEBHOOK_ENDPOINTS",
    "max_pending_uploads": "FAIRLANE_MAX_PENDING_UPLOADS",
    "max_pending_bytes": "FAIRLANE_MAX_USER_PENDING_BYTES",
    "api_reads_per_min": "FAIRLANE_API_READS_PER_MIN",
    "api_writes_per_min": "FAIRLANE_API_WRITES_PER_MIN",
    "api_uploads_per_min": "FAIRLANE_API_UPLOADS_PER_MIN",
    "api_replays_per_min": "FAIRLANE_API_REPLAYS_PER_MIN",
    "api_seconds_per_min": "FAIRLANE_API_SECONDS_PER_MIN",
}
# The API's route classes (uploads/throttling.py), each with its rate in the plan.
API_CLASSES = ("read", "write", "upload", "replay")


@dataclass(frozen=True)
class Limits:
    queued_jobs: int
    webhook_endpoints: int
    pending_uploads: int
    pending_bytes: int
    api_per_min: Mapping[str, int]  # by route class (API_CLASSES)
    api_seconds_per_min: int  # the web's time for all of them together


# The plans read in this request, by user (None outside a request: a task
# reads the plan each time).
_read: ContextVar[dict[int, Limits] | None] = ContextVar("fairlane_plans_read", default=None)


class PlanOncePerRequestMiddleware:
    """Each user's plan is read at most once in a request, whoever asks."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _read.set({})
        try:
            return self.get_response(request)
        finally:
            _read.reset(token)


def limits_for(*, user_id: int) -> Limits:
    """The user's limits: their plan's values, the settings' defaults for
    the empty ones (and for a user without a plan), and for a value that
    breaks its bounds (stored before they were enforced, or written around
    them), with a warning. One query, by the plan's unique user, and in a
    request none after the first."""
    read = _read.get()
    if read is not None and user_id in read:
        return read[user_id]
    return _kept(user_id, _limits_of(user_id, Profile.objects.filter(user_id=user_id).first()))


def _kept(user_id: int, limits: Limits) -> Limits:
    """`limits`, kept for the rest of the request (outside one: not kept)."""
    read = _read.get()
    if read is not None:
        read[user_id] = limits
    return limits


class PlanTokenAuthentication(TokenAuthentication):
    """DRF's TokenAuthentication, whose one query also reads the user's plan
    for the rest of the request (limits_for): every API request asks for it
    (its throttle), and on a busy database host each round trip waits for
    the core twice. Its refusals are DRF's own."""

    def authenticate_credentials(self, key: str) -> tuple[AbstractBaseUser, Token]:
        model = self.get_model()
        try:
            token = model.objects.select_related("user", "user__fair_profile").get(key=key)
        except model.DoesNotExist:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        # No profile: the reverse one-to-one raises, an AttributeError.
        _kept(token.user_id, _limits_of(token.user_id, getattr(token.user, "fair_profile", None)))
        return token.user, token


def _limits_of(user_id: int, profile: Profile | None) -> Limits:
    values = dict.fromkeys(DEFAULTS)
    if profile is not None:
        bad = plans.reset_invalid(profile, DEFAULTS)
        if bad:
            log.warning("plan of user %s has invalid %s; the defaults are used instead", user_id, ", ".join(bad))
        values = {field: getattr(profile, field) for field in DEFAULTS}
    got = {field: getattr(settings, DEFAULTS[field]) if value is None else value for field, value in values.items()}
    return Limits(queued_jobs=got["max_queued_jobs"], webhook_endpoints=got["max_webhook_endpoints"],
                  pending_uploads=got["max_pending_uploads"], pending_bytes=got["max_pending_bytes"],
                  api_per_min={name: got[f"api_{name}s_per_min"] for name in API_CLASSES},
                  api_seconds_per_min=got["api_seconds_per_min"])


def owner_lock(user_ids: Iterable[int]) -> None:
    """Serialise, until the end of the caller's transaction, every request
    that counts against these users' limits, on any web host. PostgreSQL:
    their rows locked FOR NO KEY UPDATE (in id order, so two callers never
    wait on each other crosswise), which leaves other transactions free to
    insert rows that refer to them (a worker's notification events). SQLite
    takes the whole write lock at BEGIN anyway (transaction_mode IMMEDIATE)."""
    assert connection.in_atomic_block, "a lock outside a transaction ends at once"
    ids = sorted(set(user_ids))
    if ids:
        list(get_user_model().objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
             .values_list("pk", flat=True))


def refuse_over(*, code: str, limit: int, count: int, adding: int, message: str, status_code: int = 429,
                **extra) -> None:
    """Refuse when `adding` more would take `count` past `limit`: `code`
    with `message` (formatted with limit, count and adding), and the
    numbers, so that a client can tell how much would fit."""
    if adding > 0 and count + adding > limit:
        raise ApplicationError(code, message.format(limit=limit, count=count, adding=adding),
                               status_code=status_code,
                               extra={"limit": limit, "count": count, "requested": adding, **extra})


def queued_jobs_count(*, owner_id: int) -> int:
    """The user's jobs queued, scheduled (queued with a time) or running;
    the parts of a long video are not counted: they are made of a job
    already accepted, and a refusal may not lose it."""
    return Job.objects.filter(owner_id=owner_id, status__in=Job.UNFINISHED, parent__isnull=True).count()


def queued_jobs_check(*, adding: Mapping[int, int], first_look: bool = False) -> None:
    """`adding[user]` more jobs for each user must fit their max_queued_jobs,
    or none is created (429 too_many_queued_jobs). Called in the transaction
    that creates them (or queues them again): it locks the users
    (owner_lock) until that commits. `first_look`: no lock, no transaction
    needed; a request that will store files or ask the store to complete
    them is refused before that work, and the check under the lock decides.
    (A lock taken there would be held through that work when the request
    is one transaction: an Idempotency-Key's.)"""
    if not first_look:
        owner_lock(adding)
    for owner_id in sorted(adding):
        refuse_over(code="too_many_queued_jobs", limit=limits_for(user_id=owner_id).queued_jobs,
                    count=queued_jobs_count(owner_id=owner_id), adding=adding[owner_id],
                    message="At most {limit:,} of your jobs may be queued, scheduled or running at once: you "
                            "have {count:,}, and this would add {adding:,}. Nothing was created; try again once "
                            "some have finished, or cancel some.")


__all__ = ["API_CLASSES", "DEFAULTS", "Limits", "limits_for", "owner_lock", "queued_jobs_check",
           "queued_jobs_count", "refuse_over"]
