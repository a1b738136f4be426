"""Bulk work in paced chunks: a 5,000-job cancel, retry or submit gives the
host back between its chunks (uploads/services.BULK_CHUNK jobs each).

Such an operation (each of its chunks a transaction, or a call to the
dispatcher's Redis) is seconds of CPU on the host that everyone's requests
share: the web's Python, PostgreSQL's backend and Redis together. Done at
once it takes the core from every other user's requests for as long as it
runs, and in bench-isolation the light users' slowest uploads were those
that met one (docs/benchmarks.md). Paced, it works at most
FAIRLANE_BULK_DUTY of its wall time and sleeps the rest between chunks
(its thread holds no transaction then but a retry's own, whose locks
nobody but the same user waits for), so another user's
request meets a host that is mostly free, and the operation's longer wall
time is charged to its own user's budget of the web's time
(uploads/throttling.py), not to theirs. An operation of one chunk (every
light user's) never waits.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from django.conf import settings
from django.db import connection

T = TypeVar("T")


def paced(items: Sequence[T], size: int, *, own_transaction: bool = False, duty: float | None = None,
          clock: Callable[[], float] | None = None,
          sleep: Callable[[float], None] | None = None) -> Iterator[Sequence[T]]:
    """Yield `items` in chunks of `size`; before each but the first, sleep
    until the time spent working on those before (from each yield until
    the next chunk is asked for) is at most `duty` (FAIRLANE_BULK_DUTY) of
    the time since the first. No pause after the last: the caller's answer is not
    held up.

    No pause inside a transaction (an upload's delete cancels its jobs in
    its own): a pause would hold its locks, which a worker may be waiting
    for. `own_transaction`: the caller's one transaction, not nested in
    another, holds only locks nobody but the same user waits for (a
    retry: the user's row and their ended jobs), so it may pause in it."""
    duty = settings.FAIRLANE_BULK_DUTY if duty is None else duty
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    started, worked = clock(), 0.0
    for start in range(0, len(items), size):
        if start and duty < 1 and len(connection.atomic_blocks) <= (1 if own_transaction else 0):
            pause = worked / duty - (clock() - started)
            if pause > 0:
                sleep(pause)
        began = clock()
        yield items[start:start + size]
        worked += clock() - began
