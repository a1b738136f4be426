"""Periodic passes over many rows, in bounded steps that resume where the
last pass stopped.

A reconciler runs in a worker's ticker thread, beside the renewal of that
worker's registration (FAIR_WORKER_TTL_S, renewed every third of it): a pass
that reads every queued job at once (1.6 s at 100,000 on PostgreSQL, around
400,000 longer than a registration lives) would let live workers drop out of
the window. So a pass reads rows in keyset pages of `batch` by primary key,
stops once its `budget_s` is spent, and leaves its place in Redis, shared by
every host, so that the next pass (any worker's: the turn rotates) goes on
from there and wraps around at the end. Each page is one query and one
bounded Redis read; no lock or Redis call lasts longer than a page.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from django.db.models import QuerySet

# Rows per page, and the time a pass may take (a third of the shortest
# registration TTL a deployment would set, with room to spare).
BATCH = 1000
BUDGET_S = 1.0
_CURSOR = "fairlane:pass-cursor:{name}"


def pages(name: str, rows: QuerySet, *, batch: int = BATCH, budget_s: float = BUDGET_S,
          order: str = "pk") -> Iterator[list]:
    """Pages of `rows` (ordered by `order` here, the primary key unless
    given: models, values_list rows whose first value is the `order`
    field, or flat values of it; `order` must be unique among the rows, as
    an aggregate of the primary key per group is) from where the pass called
    `name` stopped last, until the budget is spent or the end is reached
    (the next pass starts from the beginning again)."""
    import dispatcher
    from project.lanes import Lane

    client = dispatcher.scheduler(Lane.CPU_TRANSCODE).client
    key = _CURSOR.format(name=name)
    cursor = client.get(key)
    deadline = time.monotonic() + budget_s
    while True:
        page_rows = rows.order_by(order)
        if cursor is not None:
            page_rows = page_rows.filter(**{f"{order}__gt": cursor.decode()})
        page = list(page_rows[:batch])
        if page:
            yield page
        if len(page) < batch:
            client.delete(key)  # at the end: the next pass starts over
            return
        last = page[-1]  # a model, a values_list row (its `order` value first) or a flat value
        cursor = str(getattr(last, order) if hasattr(last, order) else last[0] if isinstance(last, tuple)
                     else last).encode()
        client.set(key, cursor, ex=24 * 3600)
        if time.monotonic() >= deadline:
            return
