"""`Idempotency-Key` for the POSTs that create things (uploads, exports).

A client that sends the same request again with the same key (it timed out,
the connection dropped) gets the first answer, replayed, and nothing is
created twice. How:

- The key's row (uploads.models.IdempotencyKey, unique per user, endpoint
  and key) is inserted in the same transaction as the work, before it, and
  holds the answer when that transaction commits. So a key either has its
  answer or does not exist: a request that fails (an error answer, an
  exception, a killed process) rolls the row back with its work, and the
  client may simply try again with the same key.
- Two requests with the same key at the same moment: the second one's
  insert waits on the unique index until the first commits (PostgreSQL; on
  SQLite the write lock taken at BEGIN IMMEDIATE serializes them earlier),
  then finds the row and replays its answer. One creates, both get the
  same answer.
- The same key with a different request (other files, other parameters) is
  a client bug: 422 `idempotency_key_reused`, nothing done. What is compared
  is a SHA-256 of the parameters and of each file's field, name, size and
  content type, not of the files' bytes: hashing gigabytes again on every
  upload to catch a client that reuses a key for a same-named, same-sized
  but different file is not worth it.
- Only successful (2xx) answers are kept. An error may not repeat (a limit
  that was reached, a batch not finished yet), so the key stays free for a
  corrected retry.
- Keys expire after settings.FAIRLANE_IDEMPOTENCY_TTL_S (a day): a key seen
  again after that starts afresh. Expired rows are removed when their owner
  next sends a key; nothing else reads them.
"""
from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.utils import encoders
from rest_framework.response import Response

from uploads.errors import ApplicationError
from uploads.models import IdempotencyKey

HEADER = "Idempotency-Key"
# Long enough for a UUID or any client's request id; printable ASCII only.
MAX_KEY_LENGTH = 255


def request_fingerprint(request: Request) -> str:
    """What the request asks for: method, path, form or JSON fields, and
    each file's field, name, size and content type (not its bytes)."""
    files = sorted((field, f.name or "", f.size, f.content_type or "")
                   for field, items in request.FILES.lists() for f in items)
    if hasattr(request.data, "lists"):
        data = sorted((k, v) for k, v in request.data.lists() if k not in request.FILES)
    else:
        data = request.data
    raw = json.dumps([request.method, request.path, data, files], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()


def _valid_key(request: Request) -> str | None:
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise ApplicationError("invalid_idempotency_key",
                               f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, e.g. a UUID.")
    return key


class _Discard(Exception):
    """Carries a non-2xx answer out of the transaction, rolling the key back."""

    def __init__(self, response: Response):
        self.response = response


def _replay(record: IdempotencyKey, fingerprint: str) -> Response:
    if record.request_hash != fingerprint:
        raise ApplicationError(
            "idempotency_key_reused", f"This {HEADER} was used for a different request; use a new key for a "
            "new request (a key identifies one request and its retries).", status_code=422)
    return Response(record.response_body, status=record.status_code, headers={"Idempotent-Replayed": "true"})


def _claim(owner, scope: str, key: str, fingerprint: str) -> IdempotencyKey | Response:
    """Insert the key's row, or answer from the row that holds it."""
    now = timezone.now()
    IdempotencyKey.objects.filter(owner=owner, expires_at__lte=now).delete()
    try:
        with transaction.atomic():  # a savepoint: a duplicate must not break the outer transaction
            return IdempotencyKey.objects.create(
                owner=owner, scope=scope, key=key, request_hash=fingerprint, status_code=0, response_body={},
                created_at=now, expires_at=now + timedelta(seconds=settings.FAIRLANE_IDEMPOTENCY_TTL_S))
    except IntegrityError:
        # Committed by an earlier request (or a concurrent one we waited for).
        return _replay(IdempotencyKey.objects.get(owner=owner, scope=scope, key=key), fingerprint)


def idempotent(scope: str) -> Callable:
    """Decorate an APIView's `post`: with an Idempotency-Key header, the
    work and its answer are one transaction keyed per user and `scope`."""

    def decorate(post: Callable[..., Response]) -> Callable[..., Response]:
        @functools.wraps(post)
        def wrapper(view, request: Request, *args, **kwargs) -> Response:
            key = _valid_key(request)
            if key is None:
                return post(view, request, *args, **kwargs)
            fingerprint = request_fingerprint(request)
            try:
                with transaction.atomic():
                    claimed = _claim(request.user, scope, key, fingerprint)
                    if isinstance(claimed, Response):
                        return claimed
                    response = post(view, request, *args, **kwargs)
                    if not 200 <= response.status_code < 300:
                        raise _Discard(response)
                    # As the client saw it (UUIDs, times as strings).
                    body = json.loads(json.dumps(response.data, cls=encoders.JSONEncoder))
                    claimed.status_code, claimed.response_body = response.status_code, body
                    claimed.save(update_fields=["status_code", "response_body"])
                    return response
            except _Discard as discarded:
                return discarded.response

        return wrapper

    return decorate
