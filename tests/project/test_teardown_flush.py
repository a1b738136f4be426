"""The flush after a transactional test outlives a deadlock (tests/flush.py).
CI met it once: pytest-django's TRUNCATE held one table and waited for a
session worker's transaction, whose COMMIT (a deferred foreign key's check)
waited for that table; PostgreSQL ended the TRUNCATE, and the next test
started on the last one's rows. Built here on purpose, with two tables
taken in the TRUNCATE's own order."""
from __future__ import annotations

import re
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection, connections

from tests.flush import DEADLOCK, TRIES, deadlocked, retried_on_deadlock
from tests.promise import wait_for_lock_wait
from uploads.models import Batch

pytestmark = pytest.mark.django_db(transaction=True)


def _flush_recorded(attempts: list[BaseException | None]):
    def flush(_case) -> None:
        try:
            call_command("flush", verbosity=0, interactive=False, reset_sequences=False)
        except CommandError as error:
            attempts.append(error)
            raise
        attempts.append(None)

    return flush


def test_a_flush_ended_by_a_deadlock_is_run_again_and_empties_the_tables(make_user):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's deadlock (SQLite's flush waits for its one write lock)")
    [statement] = sql_flush(no_style(), connection, allow_cascade=False)
    tables = re.findall(r'"([^"]+)"', statement)
    first, last = tables[0], tables[-1]
    Batch.objects.create(owner=make_user("left-behind"), name="rows the flush must remove")
    holding, closing, closed = threading.Event(), threading.Event(), threading.Event()
    other: dict[str, BaseException] = {}

    def worker_like() -> None:
        """Holds the TRUNCATE's last table, then asks for its first."""
        try:
            with connections["default"].cursor() as cursor:
                # Its check fires long after the flush's (1 s): the flush is the victim.
                cursor.execute("SET deadlock_timeout = '20s'")
                cursor.execute("BEGIN")
                cursor.execute(f'LOCK TABLE "{last}" IN ROW EXCLUSIVE MODE')
                holding.set()
                closing.wait(60)
                cursor.execute(f'LOCK TABLE "{first}" IN ROW SHARE MODE')
                cursor.execute("COMMIT")
        except BaseException as error:  # noqa: BLE001 - reported below
            other["error"] = error
        finally:
            closed.set()
            connections["default"].close()

    attempts: list[BaseException | None] = []
    outcome: dict[str, BaseException] = {}

    def flusher() -> None:
        try:
            retried_on_deadlock(_flush_recorded(attempts))(None)
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["error"] = error
        finally:
            connections["default"].close()

    holder = threading.Thread(target=worker_like)
    holder.start()
    assert holding.wait(30)
    flush = threading.Thread(target=flusher)
    flush.start()

    wait_for_lock_wait("TRUNCATE%", "the flush to wait for the held table", 30)
    closing.set()
    flush.join(120)
    holder.join(60)
    assert not flush.is_alive() and closed.is_set()
    assert "error" not in other, other
    assert "error" not in outcome, outcome
    assert len(attempts) == 2 and deadlocked(attempts[0]) and attempts[1] is None, attempts
    assert not Batch.objects.exists()


def test_a_flush_that_fails_otherwise_is_not_run_again():
    calls = []

    def broken(_case) -> None:
        calls.append(1)
        raise CommandError("the database isn't running") from ValueError("no server")

    with pytest.raises(CommandError):
        retried_on_deadlock(broken)(None)
    assert calls == [1]


def test_a_flush_deadlocked_every_time_gives_up_after_its_tries():
    calls = []

    class Deadlock(Exception):
        sqlstate = DEADLOCK

    def always(_case) -> None:
        calls.append(1)
        raise CommandError("couldn't be flushed") from Deadlock()

    with pytest.raises(CommandError):
        retried_on_deadlock(always)(None)
    assert len(calls) == TRIES
