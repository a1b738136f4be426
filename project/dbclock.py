"""The database's clock, for times that several hosts compare.

Worker hosts' clocks disagree (by minutes on a badly kept host). A running
attempt's lease is written by its worker and judged by a sweep on any other
host, and a job's wait is measured from when the web host queued it to when
a worker started it: if each used its own clock, a host 120 s ahead would
see every other host's leases as expired, and waits would be off by the
skew. Every such time is the database's (`now()` there), read once per
service call; the fair dispatcher uses Redis's clock for its own
comparisons in the same spirit (dispatcher/scheduler.py).
"""
from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection
from django.db.models.functions import Now

__all__ = ("Now", "db_now")


def db_now() -> datetime:
    """The database's current time (aware, UTC). One query (~0.1 ms)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT statement_timestamp()")
        else:  # SQLite: its clock is this machine's; one machine, one clock
            cursor.execute("SELECT STRFTIME('%Y-%m-%d %H:%M:%f', 'now')")
        value = cursor.fetchone()[0]
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
