"""The job table is written on every step of every job (created, started,
its progress, finished, notified), and a change of status is never a
heap-only update: each such write touches every index of the table. So no
index of it may be one another index already serves: an index whose
columns lead another's (PostgreSQL answers from the longer one) costs
every job's every status change a write for nothing, on the database host
that all users' requests share (issue 32)."""
from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def _indexes(table: str) -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {name: c["columns"] for name, c in constraints.items()
            if c["index"] and not c["unique"] and not c["primary_key"] and c["columns"]}


def test_no_index_of_the_job_table_leads_another():
    indexes = _indexes("uploads_job")
    led = sorted((short, long) for short, columns in indexes.items() for long, more in indexes.items()
                 if len(columns) < len(more) and more[:len(columns)] == columns)
    assert led == [], led


def test_the_job_table_still_serves_the_owners_and_the_lanes_lookups():
    """What the dropped indexes served, each still led by its column."""
    leading = {tuple(columns[:1]) for columns in _indexes("uploads_job").values()}
    assert {("owner_id",), ("status",), ("task_id",), ("upload_id",), ("parent_id",)} <= leading, leading
