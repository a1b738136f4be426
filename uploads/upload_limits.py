"""Upload size limits enforced while the request streams in, not after.

Django's stock handlers write every file of a request to temporary files
before the view sees any of them, so a check in the view comes after the
disk has taken the whole body (500 files of 2 GiB). `LimitedUploadHandler`
refuses, with the API's JSON 413 (`uploads/api_errors.py`):

1. by Content-Length, before reading a byte: the request is larger than
   FAIRLANE_MAX_REQUEST_BYTES, or the user already has
   FAIRLANE_MAX_USER_INFLIGHT_BYTES of requests in flight (any web process:
   the reservation is in Redis);
2. while streaming: a file passes FAIRLANE_MAX_UPLOAD_BYTES, or the request
   passes FAIRLANE_MAX_FILES_PER_REQUEST files (Django itself reads no
   further than the Content-Length).

What it had written is closed (temporary files delete themselves) and the
user's reservation is given back when the request ends (`release`).
"""
from __future__ import annotations

import logging
import time
import uuid

import redis
from django.conf import settings
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.http import HttpRequest

from project import redis_clients
from uploads.errors import ApplicationError

log = logging.getLogger(__name__)

# A reservation outlives a web process that died mid-request by at most
# this long (no upload of FAIRLANE_MAX_REQUEST_BYTES takes longer than this
# on any link we serve).
RESERVATION_TTL_S = 6 * 3600
_KEY = "fairlane:uploads:inflight:{user_id}"
# Members "<request id>:<bytes>" scored by expiry: drop the expired ones, sum
# the rest, add this request if the sum stays within the limit. Atomic, so
# two web processes cannot both squeeze under it.
_RESERVE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local total = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  total = total + tonumber(string.match(member, ':(%d+)$'))
end
if total + tonumber(ARGV[3]) > tonumber(ARGV[4]) then return total end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[5] .. ':' .. ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return -1
"""


def _too_large(code: str, message: str, **extra) -> ApplicationError:
    return ApplicationError(code, message, status_code=413, extra=extra)


def _redis() -> redis.Redis:
    return redis_clients.client(settings.REDIS_URL)


def _reserve(request: HttpRequest, size: int) -> None:
    """Count `size` bytes against the user's uploads in flight, or refuse.
    Redis being down lets the request through (the per-request limits still
    hold): uploads keep working through an outage, as the rest of the API."""
    user_id = getattr(getattr(request, "user", None), "pk", None)
    if user_id is None:
        return
    member = uuid.uuid4().hex
    key = _KEY.format(user_id=user_id)
    now = time.time()
    limit = settings.FAIRLANE_MAX_USER_INFLIGHT_BYTES
    try:
        busy = _redis().eval(_RESERVE, 1, key, now, now + RESERVATION_TTL_S, size, limit, member, RESERVATION_TTL_S)
    except redis.RedisError as exc:
        log.warning("upload limits: no per-user check, Redis unavailable: %r", exc)
        return
    if busy != -1:
        raise _too_large("too_many_bytes_in_flight",
                         f"You have {busy} bytes of uploads in progress; at most {limit} at once. "
                         "Wait for them to finish, then send this one again.", limit=limit)
    request._fairlane_upload_reservation = (key, f"{member}:{size}")


def release(request: HttpRequest) -> None:
    """Give back the request's reservation (the view calls it at the end of
    every request, whatever happened)."""
    reservation = getattr(request, "_fairlane_upload_reservation", None)
    if reservation is None:
        return
    del request._fairlane_upload_reservation
    try:
        _redis().zrem(*reservation)
    except redis.RedisError as exc:  # it expires with RESERVATION_TTL_S
        log.warning("upload limits: reservation not released: %r", exc)


class LimitedUploadHandler(TemporaryFileUploadHandler):
    """Every file to a temporary file on disk (never memory), within limits."""

    def __init__(self, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self.files = 0
        self.file_bytes = 0
        self.opened = []

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        max_request = settings.FAIRLANE_MAX_REQUEST_BYTES
        if content_length > max_request:
            raise _too_large("request_too_large",
                             f"A request may carry at most {max_request} bytes; this one announces "
                             f"{content_length}. Send the files in several requests.", limit=max_request)
        _reserve(self.request, content_length)
        return None  # the multipart parser goes on, calling the methods below

    def new_file(self, *args, **kwargs) -> None:
        self.files += 1
        self.file_bytes = 0
        if self.files > settings.FAIRLANE_MAX_FILES_PER_REQUEST:
            self._abort(_too_large("too_many_files",
                                   f"A request may carry at most {settings.FAIRLANE_MAX_FILES_PER_REQUEST} files.",
                                   limit=settings.FAIRLANE_MAX_FILES_PER_REQUEST))
        super().new_file(*args, **kwargs)
        self.opened.append(self.file)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self.file_bytes += len(raw_data)
        if self.file_bytes > settings.FAIRLANE_MAX_UPLOAD_BYTES:
            self._abort(_too_large(
                "file_too_large", f"Files larger than {settings.FAIRLANE_MAX_UPLOAD_BYTES} bytes are not accepted: "
                f"{self.file_name}.", files=[self.file_name], limit=settings.FAIRLANE_MAX_UPLOAD_BYTES))
        return super().receive_data_chunk(raw_data, start)

    def _abort(self, error: ApplicationError) -> None:
        """Close (and so delete) every temporary file of this request, then refuse."""
        for f in self.opened:
            f.close()
        raise error
