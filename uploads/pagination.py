"""Every API list: newest first, by an opaque cursor on `created_at`.

Why a cursor and not page numbers: a page is `WHERE created_at < <position>
ORDER BY created_at DESC LIMIT n + 1`, which walks the (owner, -created_at)
index from the position, so page 2,000 of a user's 100,000 jobs costs what
page 1 costs (OFFSET would read and drop every row before it, and a COUNT
every request). And it is stable while rows arrive: new jobs appear at the
head, so a client walking `next` links never sees a row twice or misses
one, which page numbers cannot promise while the upload page adds jobs.
"""
from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination

from uploads.errors import ApplicationError


class NewestFirstCursorPagination(CursorPagination):
    ordering = "-created_at"
    page_size_query_param = "page_size"
    # Enough for a page that shows a whole batch of files; small enough that
    # one request's serialization stays cheap.
    max_page_size = 200

    def decode_cursor(self, request) -> Cursor | None:
        """DRF's, plus a check of the position: the cursor is client input,
        and its position reaches the page query as a time. DRF checks only
        the offset and direction; a position that is no instant would fail
        there, or already in parse_datetime (2026-02-30, hour 25), or when
        converted to UTC for the database (9999-12-31T23:59:59-23:59 is in
        year 10000): each was a 500. The position goes on as the instant in
        UTC, written as the cursors we hand out write it."""
        try:
            cursor = super().decode_cursor(request)
        except NotFound as exc:
            raise self._invalid() from exc
        if cursor is None or cursor.position is None:
            return cursor
        return cursor._replace(position=str(self._instant(cursor.position)))

    @classmethod
    def _instant(cls, position: str) -> datetime:
        try:
            parsed = parse_datetime(position)
            if parsed is None or parsed.utcoffset() is None:  # not a time, or no zone: not one of ours
                raise cls._invalid()
            return parsed.astimezone(dt_timezone.utc)
        except (ValueError, OverflowError) as exc:  # a well-formed impossible date; out of datetime's years
            raise cls._invalid() from exc

    @staticmethod
    def _invalid() -> ApplicationError:
        return ApplicationError("invalid_cursor", "The cursor is not one this API gave out: follow the list's "
                                                  "`next` and `previous` links as they are.")
