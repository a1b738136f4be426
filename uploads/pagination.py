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

from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from django.utils.dateparse import parse_datetime

from uploads.errors import ApplicationError


class NewestFirstCursorPagination(CursorPagination):
    ordering = "-created_at"
    page_size_query_param = "page_size"
    # Enough for a page that shows a whole batch of files; small enough that
    # one request's serialization stays cheap.
    max_page_size = 200

    def decode_cursor(self, request) -> Cursor | None:
        """DRF's, plus a check of the position: the cursor is client input,
        and a position that is not a time would reach the database lookup
        as one (a ValidationError there is a 500)."""
        try:
            cursor = super().decode_cursor(request)
        except NotFound as exc:
            raise self._invalid() from exc
        if cursor is not None and cursor.position is not None and parse_datetime(cursor.position) is None:
            raise self._invalid()
        return cursor

    @staticmethod
    def _invalid() -> ApplicationError:
        return ApplicationError("invalid_cursor", "The cursor is not one this API gave out: follow the list's "
                                                  "`next` and `previous` links as they are.")
