"""pytest-django's flush after a transactional test (TRUNCATE of every
table), made to outlive a deadlock with a real worker's commit.

The session's workers stay up between tests and may still be recording
what a test left behind (a job the test ended in-process is announced on
the io-notify lane, say) when the flush starts. The TRUNCATE takes its
tables one by one; a worker's transaction holding one of them and, at its
COMMIT, asking for another (a deferred foreign key's check) closes a
cycle, and PostgreSQL ends one of the two. When that is the flush, the
next test starts on the last one's rows. The flush is whole or nothing,
so it is simply run again; the worker's commit went through meanwhile.
`_workers_settle` (conftest) waits for the workers a test asked for; this
covers what it cannot see."""
from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import CommandError

DEADLOCK = "40P01"  # PostgreSQL's SQLSTATE for "deadlock detected"
TRIES = 5


def deadlocked(error: BaseException | None) -> bool:
    """Whether PostgreSQL's deadlock is somewhere in the error's causes."""
    while error is not None:
        if getattr(error, "sqlstate", None) == DEADLOCK:
            return True
        error = error.__cause__
    return False


def retried_on_deadlock(teardown: Callable) -> Callable:
    """TransactionTestCase._fixture_teardown, run again (up to TRIES in all)
    while its flush is the victim of a deadlock."""

    def fixture_teardown(self) -> None:
        for attempt in range(1, TRIES + 1):
            try:
                return teardown(self)
            except CommandError as error:
                if attempt == TRIES or not deadlocked(error):
                    raise

    return fixture_teardown
