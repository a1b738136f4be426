"""When a delivery is tried again: pure rules of notify/retry.py."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from notify import retry


@pytest.mark.parametrize(("status", "retryable"), [
    (None, True), (500, True), (502, True), (503, True), (408, True), (429, True),
    (400, False), (401, False), (404, False), (410, False), (422, False), (301, False), (302, False),
])
def test_only_no_answer_5xx_408_and_429_are_retried(status, retryable):
    assert retry.is_retryable(status) is retryable


def test_backoff_grows_every_time_whatever_the_jitter(settings):
    settings.NOTIFY_RETRY_BASE_S, settings.NOTIFY_RETRY_MAX_S = 30, 10**9
    for seed in range(200):
        rand = random.Random(seed)
        delays = [retry.backoff_s(n, rand=rand) for n in range(1, 11)]
        assert all(later > earlier for earlier, later in zip(delays, delays[1:])), delays
    assert 24 <= retry.backoff_s(1) <= 36
    # Ten attempts span hours.
    assert sum(retry.backoff_s(n, rand=random.Random(1)) for n in range(1, 10)) > 3 * 3600


def test_backoff_is_capped(settings):
    settings.NOTIFY_RETRY_BASE_S, settings.NOTIFY_RETRY_MAX_S = 30, 600
    assert retry.backoff_s(20) == 600


def test_retry_after_in_seconds_or_as_a_date():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert retry.retry_after_s("120") == 120
    assert retry.retry_after_s(format_datetime(now + timedelta(seconds=90), usegmt=True), now=now) == 90
    assert retry.retry_after_s("soon") is None and retry.retry_after_s(None) is None


def test_a_429s_retry_after_wins_when_longer_than_the_backoff(settings):
    settings.NOTIFY_RETRY_BASE_S, settings.NOTIFY_MAX_ATTEMPTS = 1, 10
    assert retry.next_delay_s(1, status=429, retry_after="50") == 50
    assert retry.next_delay_s(1, status=429, retry_after="0") < 2
    assert retry.next_delay_s(1, status=404, retry_after="50") is None
    assert retry.next_delay_s(10, status=500, retry_after=None) is None  # out of attempts
