"""Bulk work in paced chunks (project/pacing.py): it works at most its duty
of the wall time and sleeps the rest between chunks, never before the first
or after the last, and never inside a transaction. Driven clock."""
from __future__ import annotations

import pytest
from django.db import transaction

from project.pacing import paced


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def run(chunk_seconds: list[float], duty: float) -> Clock:
    clock = Clock()
    for [seconds] in paced(chunk_seconds, 1, duty=duty, clock=clock, sleep=clock.sleep):
        clock.now += seconds  # the caller's work on the chunk
    return clock


def test_chunks_work_at_most_their_duty_of_the_time_and_pause_only_between_them():
    clock = run([1.0, 1.0, 1.0], duty=0.25)
    assert clock.slept == [3.0, 3.0]  # none after the last
    assert clock.now == 109.0


def test_a_pause_counts_the_time_already_passed_and_uneven_chunks():
    clock = run([0.5, 2.0, 0.1], duty=0.5)
    # after 0.5 s of work: 0.5 s more; after 2.5 s of work in 3 s: 2 s more.
    assert clock.slept == pytest.approx([0.5, 2.0])


@pytest.mark.parametrize(("chunks", "duty"), [([1.0], 0.25), ([1.0, 1.0, 1.0], 1.0), ([], 0.25)])
def test_one_chunk_or_a_duty_of_one_never_waits(chunks, duty):
    assert run(chunks, duty).slept == []


def test_the_duty_defaults_to_the_setting(settings):
    settings.FAIRLANE_BULK_DUTY = 0.5
    clock = Clock()
    for _ in paced([1, 2, 3], 2, clock=clock, sleep=clock.sleep):
        clock.now += 1.0
    assert clock.slept == [1.0]


@pytest.mark.django_db(transaction=True)
def test_no_pause_inside_a_transaction():
    with transaction.atomic():
        assert run([1.0, 1.0, 1.0], duty=0.25).slept == []
    assert run([1.0, 1.0, 1.0], duty=0.25).slept == [3.0, 3.0]
