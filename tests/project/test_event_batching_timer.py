"""When the batching consumer (project/event_batching.py) arms its flush
timer: once per batch, again after each flush, and again when a timer it
armed never fired (a broker reconnect cancels the loop's timer entries).
The loop is a recorder here: tests/e2e/test_event_batching.py runs the
consumer in a real worker."""
from __future__ import annotations

import pytest

from project import event_batching
from project.event_batching import Consumer


class LoopRecorder:
    """What the consumer asks of Celery's event loop (kombu's hub)."""

    def __init__(self) -> None:
        self.soon: list = []
        self.later: list[tuple[float, object]] = []

    def call_soon(self, callback) -> None:
        self.soon.append(callback)

    def call_later(self, delay: float, callback) -> None:
        self.later.append((delay, callback))

    def run_soon(self) -> None:
        pending, self.soon = self.soon, []
        for callback in pending:
            callback()


@pytest.fixture
def consumer(settings, monkeypatch):
    settings.FAIRLANE_EVENT_FLUSH_S = 0.1
    clock = {"now": 1000.0}
    monkeypatch.setattr(event_batching.time, "monotonic", lambda: clock["now"])
    c = Consumer.__new__(Consumer)  # Celery's own __init__ wants a whole worker
    c.hub, c.event_dispatcher = LoopRecorder(), None
    c._event_flush_lock = event_batching.threading.Lock()
    c._event_flush_armed_at = None
    c.clock = clock
    return c


def test_one_timer_per_batch_and_a_new_one_after_each_flush(consumer):
    loop = consumer.hub
    for _ in range(3):
        consumer.on_send_event_buffered()
    assert len(loop.soon) == 1  # three events, one timer
    loop.run_soon()
    assert [delay for delay, _ in loop.later] == [0.1]

    loop.later.pop()[1]()  # the timer fires: the batch leaves
    consumer.on_send_event_buffered()
    assert len(loop.soon) == 1


def test_a_timer_that_never_fired_is_replaced_by_the_next_event(consumer):
    loop = consumer.hub
    consumer.on_send_event_buffered()
    loop.run_soon()
    loop.later.clear()  # cancelled with the loop's other entries (a reconnect)

    consumer.clock["now"] += 0.5  # well within one flush period and a second: still trusted
    consumer.on_send_event_buffered()
    assert loop.soon == []
    consumer.clock["now"] += 1.0  # beyond it: the timer is gone
    consumer.on_send_event_buffered()
    assert len(loop.soon) == 1
