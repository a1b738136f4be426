"""Bulk work in paced chunks: a 5,000-job cancel, retry or submit gives the
host back between its chunks.

Such an operation (each of its chunks a transaction, or a call to the
dispatcher's Redis) is seconds of CPU on the host that everyone's requests
share: the web's Python, PostgreSQL's backend and Redis together. Done at
once it takes the core from every other user's requests for as long as it
runs, and in bench-isolation the light users' slowest uploads were those
that met one (docs/benchmarks.md). Paced, it works at most
FAIRLANE_BULK_DUTY of its wall time and sleeps the rest between chunks
(its thread holds no lock and no transaction then), so another user's
request meets a host that is mostly free, and the operation's longer wall
time is charged to its own user's budget of the web's time
(uploads/throttling.py), not to theirs. An operation of one chunk (every
light user's) never waits.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from django.conf import settings
from django.db import connection

T = TypeVar("T")


def paced(chunks: Iterable[T], *, duty: float | None = None, clock: Callable[[], float] | None = None,
          sleep: Callable[[float], None] | None = None) -> Iterator[T]:
    """Yield `chunks` one by one; before each but the first, sleep until the
    time spent working on those before (from each yield until the next
    item is asked for) is at most `duty` (FAIRLANE_BULK_DUTY) of the time
    since the first. No pause after the last: the caller's answer is not
    held up, and none inside a transaction (an upload's delete cancels its
    jobs in its own): a pause there would hold its locks."""
    duty = settings.FAIRLANE_BULK_DUTY if duty is None else duty
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    started, worked = clock(), 0.0
    for n, chunk in enumerate(chunks):
        if n and duty < 1 and not connection.in_atomic_block:
            pause = worked / duty - (clock() - started)
            if pause > 0:
                sleep(pause)
        began = clock()
        yield chunk
        worked += clock() - began
