"""What happens to jobs, announced for the apps that react to it.

The job lifecycle (uploads/services.py) does not call notifications or
exports: they use uploads (its models, its services), and a call back would
close a circle of imports. So uploads announces what happened, and each
app that cares subscribes in its `AppConfig.ready` (notify/apps.py,
exports/apps.py), as django-celery-results listens to Celery's signals
without Celery knowing it exists. uploads imports neither app
(tests/uploads/test_lifecycle.py checks its every module).

Each announcement is a Django `Signal` carrying one typed, frozen event
(`Hook`): receivers take the event, nothing else. They are sent where the
direct calls used to be, so the timing is the same: after the commit of
the transaction that made them true (never for a change that rolled back),
and in the order receivers connected. A receiver that raises is logged
and does not stop the others, nor the caller, whose change has committed
already: each event has an outbox in the database for what must not be
lost (`Job.notify_pending`, with notify's reconciler; an export's
checkpoint, with the bucket's lifecycle rule for multipart uploads).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from django.dispatch import Signal

E = TypeVar("E")
log = logging.getLogger(__name__)


class Hook(Generic[E]):
    """One kind of announcement: a Signal whose only argument is an `E`."""

    def __init__(self, event_type: type[E]) -> None:
        self.event_type = event_type
        self._signal = Signal()

    def connect(self, receiver: Callable[[E], object],
                many: Callable[[list[E]], object] | None = None) -> None:
        """Call `receiver` with every event sent from now on. Connecting the
        same function again changes nothing (ready() may run twice).
        `many`: what hears the events of one `send_many` at once (one query
        or one round trip for all, where `receiver` would make one each);
        without it `receiver` hears them one by one."""
        self._signal.connect(_Receiver(receiver, many), sender=self.event_type, weak=False,
                             dispatch_uid=_uid(receiver))

    def disconnect(self, receiver: Callable[[E], object]) -> None:
        self._signal.disconnect(sender=self.event_type, dispatch_uid=_uid(receiver))

    def send(self, event: E) -> None:
        """Tell every receiver, in the order they connected; one that raises
        is logged (Django's send_robust) and the rest still hear."""
        self._check(event)
        self._signal.send_robust(sender=self.event_type, event=event)

    def send_many(self, events: list[E]) -> None:
        """`send` for many events at once (a batch's 5,000 jobs canceled in
        one transaction): each receiver hears all of them before the next
        does, through its `many` when it has one."""
        for event in events:
            self._check(event)
        if events:
            self._signal.send_robust(sender=self.event_type, events=list(events))

    def _check(self, event: object) -> None:
        if not isinstance(event, self.event_type):
            raise TypeError(f"{type(event).__name__} sent where {self.event_type.__name__} is announced")


def _uid(receiver: Callable) -> str:
    # hash, not id: a bound method is a new object at each access, equal to the last
    return f"{getattr(receiver, '__module__', '')}.{getattr(receiver, '__qualname__', '')}:{hash(receiver)}"


class _Receiver:
    """A receiver as Signal calls it (sender and keywords), called with the event alone."""

    def __init__(self, receiver: Callable, many: Callable | None = None) -> None:
        self.receiver, self.many = receiver, many
        self.__qualname__ = getattr(receiver, "__qualname__", repr(receiver))  # send_robust's log names it

    def __call__(self, sender: type, event: object = None, events: list | None = None, **kwargs) -> None:
        if events is None:
            self.receiver(event)
        elif self.many is not None:
            self.many(events)
        else:
            for one in events:  # as send_robust would: one that raises is logged, the next still heard
                try:
                    self.receiver(one)
                except Exception:
                    log.exception("%s failed on %r", self.__qualname__, one)


@dataclass(frozen=True)
class JobFinished:
    """A job its owner sees (not a part of a chunked video, whose parent
    is announced instead) has ended: succeeded, failed or canceled. Sent
    after the commit of the transaction that ended it, once per ending (a
    retried job that ends again is announced again). The row's
    `notify_pending`, set in that transaction, is the outbox: notify clears
    it once the ending has become its events, and its reconciler finds the
    endings whose announcement was lost."""

    job_id: str
    owner_id: int
    status: str  # a terminal Job.Status
    # When it ended, where the sender has it: the jobs a cancel ends
    # together share it, and notify announces them as one group by it.
    finished_at: datetime | None = None


@dataclass(frozen=True)
class JobPlayable:
    """A video its owner sees can be watched while it is still being
    processed: its first segments are stored (transcoding/live.py). Sent
    after the commit that set the job's `playable_at`, once per run of the
    job. What must not be lost of it is kept by the job's ending: notify
    publishes a missing job.playable before the job.succeeded it makes."""

    job_id: str
    owner_id: int


@dataclass(frozen=True)
class JobRestarted:
    """A failed or canceled job was retried: its rows start again from
    nothing, and the objects of its attempts so far have been deleted.
    Sent after the commit of the retry, with the checkpoint the job had,
    so that the app whose work wrote it can let go of what it names
    (exports: an unfinished multipart upload)."""

    job_id: str
    checkpoint: dict


job_finished: Hook[JobFinished] = Hook(JobFinished)
job_playable: Hook[JobPlayable] = Hook(JobPlayable)
job_restarted: Hook[JobRestarted] = Hook(JobRestarted)
