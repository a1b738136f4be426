"""When a delivery is tried again: pure rules of notify/retry.py."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from django.conf import settings as django_settings
from hypothesis import given
from hypothesis import strategies as st

from notify import retry


@pytest.mark.parametrize(("status", "retryable"), [
    (None, True), (500, True), (502, True), (503, True), (408, True), (429, True),
    (400, False), (401, False), (404, False), (410, False), (422, False), (301, False), (302, False),
])
def test_only_no_answer_5xx_408_and_429_are_retried(status, retryable):
    assert retry.is_retryable(status) is retryable


def test_backoff_grows_every_time_whatever_the_jitter(settings):
    settings.NOTIFY_RETRY_BASE_S, settings.NOTIFY_RETRY_MAX_S, settings.NOTIFY_RETRY_FIRST_S = 30, 10**9, 0
    for seed in range(200):
        rand = random.Random(seed)
        for slow_down in (False, True):
            delays = [retry.backoff_s(n, rand=rand, slow_down=slow_down) for n in range(1, 12)]
            assert all(later > earlier for earlier, later in zip(delays, delays[1:])), delays
    assert retry.backoff_s(1) == 0 and 24 <= retry.backoff_s(2) <= 36 and 48 <= retry.backoff_s(3) <= 72
    # Eleven attempts (production's) span hours: the quick first retry adds a try, not a shorter schedule.
    assert sum(retry.backoff_s(n, rand=random.Random(1)) for n in range(1, 11)) > 3 * 3600


def test_the_first_retry_goes_at_once_unless_the_receiver_asked_to_slow_down(settings):
    """A healthy receiver's failures are mostly one request's (an instance
    restarting behind its balancer, a reset connection): the first retry
    goes at once, the backoff starts with the second. A 408 or 429 asked
    for less traffic, and a Retry-After for a time: both are waited for."""
    settings.NOTIFY_RETRY_BASE_S, settings.NOTIFY_RETRY_FIRST_S, settings.NOTIFY_MAX_ATTEMPTS = 30, 0, 11
    assert django_settings.NOTIFY_RETRY_FIRST_S == 0  # the default
    for status in (None, 500, 502, 503, 504):
        assert retry.next_delay_s(1, status=status, retry_after=None) == 0
        assert 24 <= retry.next_delay_s(2, status=status, retry_after=None) <= 36
    for status in (408, 429):
        assert 24 <= retry.next_delay_s(1, status=status, retry_after=None) <= 36
        assert 48 <= retry.next_delay_s(2, status=status, retry_after=None) <= 72
    assert retry.next_delay_s(1, status=503, retry_after="20") == 20
    settings.NOTIFY_RETRY_FIRST_S = 5  # an operator may space it out: jittered like the rest
    assert 4 <= retry.next_delay_s(1, status=500, retry_after=None) <= 6


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


@pytest.mark.parametrize("header", [
    "\u00b2", "\u00b9\u00b3", "\u0663\u0660", "\u06f5", "\uff19", "\u2155", "1\u00b2", "-5", "1e3", "1.5", " ", "",
    "Fri, 31 Dec 99999 23:59:59 GMT", "Mon, 99 Foo 2026 99:99:99 GMT", "\x00", "9" * 5000,
])
def test_retry_after_never_raises_and_is_a_finite_delay_or_nothing(header, settings):
    """str.isdigit() is true for '²' and Arabic-Indic digits, which float()
    refuses: only ASCII delta-seconds (RFC 9110) or an HTTP date count."""
    settings.NOTIFY_MAX_ATTEMPTS = 10
    asked = retry.retry_after_s(header)
    assert asked is None or (0 <= asked < float("inf"))
    delay = retry.next_delay_s(1, status=503, retry_after=header)
    assert 0 <= delay <= settings.NOTIFY_RETRY_MAX_S  # 0: no wish, the quick first retry


def test_only_ascii_digits_are_delta_seconds():
    assert retry.retry_after_s("\u0663\u0660") is None and retry.retry_after_s("\u00b2") is None
    assert retry.retry_after_s("30") == 30.0
    huge = retry.retry_after_s("9" * 5000)  # more digits than int() takes: still a (finite) number
    assert 24 * 3600 < huge < float("inf")


@given(st.text(max_size=40))
def test_any_retry_after_text_gives_a_bounded_delay(header):
    delay = retry.next_delay_s(1, status=429, retry_after=header)
    assert delay is not None and 0 < delay <= max(django_settings.NOTIFY_RETRY_MAX_S, 1)


def test_backoff_never_overflows_whatever_the_attempt_number():
    assert retry.backoff_s(5000) == retry.backoff_s(500)
