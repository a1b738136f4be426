"""The worker's consumer, with task events sent in batches rather than one
Redis PUBLISH each.

Celery buffers a worker's task events (task-received, task-started,
task-succeeded, ...) and publishes them as one `task.multi` message, but it
flushes that buffer on every turn of its event loop, so each event still
costs a PUBLISH and a round trip in the loop, between a task's result and
the next message's fetch: 3 of the 6 Redis commands Celery itself spends on
a job (`make bench-fairness`, no-op jobs). This consumer flushes at most
every FAIRLANE_EVENT_FLUSH_S (0.1 s by default) instead, or when
Celery's own buffer limit (24 events) is reached first. Flower and other
event receivers read `task.multi` like single events; they see a task's
state change up to that much later. Worker events (online, heartbeat,
offline) are not buffered by Celery and are unchanged.

Installed with `worker_consumer` (project/settings/); the loop is
Celery's, only the moment of the flush changes. Events still buffered when
the consumer shuts down are flushed then, so the last tasks' ends reach
Flower. When the broker connection fails, Celery cancels the loop's timer
entries and starts a new event dispatcher: the events buffered in the old
one (up to FAIRLANE_EVENT_FLUSH_S of them) are lost, as up to one loop
turn's are with Celery's own flushing, and the next event arms a new timer.
"""
from __future__ import annotations

import threading
import time

from celery.worker.consumer import Consumer as CeleryConsumer
from django.conf import settings


class Consumer(CeleryConsumer):
    """Celery's consumer; buffered task events leave at most every FAIRLANE_EVENT_FLUSH_S."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._event_flush_lock = threading.Lock()
        self._event_flush_armed_at: float | None = None  # monotonic; None: no flush timer pending

    def on_send_event_buffered(self) -> None:
        # Called by whichever thread sent the event (a threads-pool task's
        # task-started comes from its thread): the timer is armed from the
        # loop's own thread, through call_soon, which is thread-safe. A
        # timer armed long ago that never fired was cancelled (a broker
        # reconnect cancels the loop's timer entries): arm another, so no
        # event waits for the buffer to fill.
        if not self.hub:
            return
        now = time.monotonic()
        with self._event_flush_lock:
            armed_at = self._event_flush_armed_at
            # Twice the period and a second: a loop busy with a long callback
            # runs its timers late, and a late timer is not a lost one.
            if armed_at is not None and now - armed_at < 2 * settings.FAIRLANE_EVENT_FLUSH_S + 1:
                return
            self._event_flush_armed_at = now
        self.hub.call_soon(self._arm_event_flush)

    def _arm_event_flush(self) -> None:
        self.hub.call_later(settings.FAIRLANE_EVENT_FLUSH_S, self._flush_batched_events)

    def _flush_batched_events(self) -> None:
        # Disarm first: an event sent during the flush arms the next one.
        with self._event_flush_lock:
            self._event_flush_armed_at = None
        self._flush_events()

    def on_close(self) -> None:
        # The connection failed: Celery cancels the loop's timer entries,
        # ours among them.
        super().on_close()
        with self._event_flush_lock:
            self._event_flush_armed_at = None

    def shutdown(self) -> None:
        self._flush_events()
        super().shutdown()
