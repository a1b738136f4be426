"""When to try a delivery again, as pure functions of the answer and the
attempt number (the clock and the random source are parameters for tests).

Retried: no answer (timeout, refused, reset, TLS), any 5xx, 408 and 429.
Other 4xx mean the receiver understood and refused: trying again would get
the same answer. The first retry goes at once (NOTIFY_RETRY_FIRST_S, 0):
most failures of a healthy receiver are one request's (an instance
restarting behind its load balancer, a connection reset), and waiting the
backoff for them would delay the delivery by minutes for nothing; Svix
retries the same way. A 408 or 429 asked for less traffic, so after those
the backoff starts at once. From then on delays grow exponentially with
+-20% jitter (so a receiver's outage does not get every delivery back at
the same second), and still strictly growing: the next delay is at least
2 x 0.8 / 1.2 = 1.33x the previous one. A Retry-After from the receiver
wins when it asks for longer.

A Retry-After is whatever the receiver sent: these functions never raise
for it, and every delay they return is finite and at most
NOTIFY_RETRY_MAX_S.
"""
from __future__ import annotations

import random
import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from django.conf import settings

RETRYABLE_4XX = (408, 429)
JITTER = 0.2
# RFC 9110 delta-seconds: ASCII digits only. str.isdigit() also accepts '²'
# and other scripts' digits, which float() refuses or reads differently.
_DELTA_SECONDS = re.compile(r"[0-9]+", re.ASCII)
# Beyond this many digits a delta is "longer than any cap" anyway (and int()
# refuses more than 4300 digits).
_MAX_DELTA_DIGITS = 12


def is_retryable(status: int | None) -> bool:
    return status is None or status >= 500 or status in RETRYABLE_4XX


def is_success(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def backoff_s(attempt: int, *, rand: random.Random | None = None, slow_down: bool = False) -> float:
    """Delay after failed attempt number `attempt` (1-based): the quick first
    retry, then base x 2^(attempt-2); `slow_down` (the receiver answered 408
    or 429) skips the quick retry: base x 2^(attempt-1)."""
    if attempt <= 1 and not slow_down:
        delay = settings.NOTIFY_RETRY_FIRST_S
    else:
        # The exponent is capped: 2**1100 does not fit a float, and the delay
        # is capped far below 2**60 base delays anyway.
        delay = settings.NOTIFY_RETRY_BASE_S * 2.0 ** min(attempt - (1 if slow_down else 2), 60)
    jitter = 1 + JITTER * (2 * (rand or random).random() - 1)
    return min(settings.NOTIFY_RETRY_MAX_S, delay * jitter)


def retry_after_s(header: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or HTTP-date)."""
    if not header:
        return None
    header = header.strip()
    if _DELTA_SECONDS.fullmatch(header):
        digits = header.lstrip("0") or "0"
        return float(digits) if len(digits) <= _MAX_DELTA_DIGITS else 10.0 ** _MAX_DELTA_DIGITS
    try:
        when = parsedate_to_datetime(header)
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())
    except (TypeError, ValueError, OverflowError, IndexError):  # not a date Python can represent
        return None


def next_delay_s(attempt: int, *, status: int | None, retry_after: str | None) -> float | None:
    """Seconds until the next try, or None when there is none."""
    if not is_retryable(status) or attempt >= settings.NOTIFY_MAX_ATTEMPTS:
        return None
    delay = backoff_s(attempt, slow_down=status in RETRYABLE_4XX)
    asked = retry_after_s(retry_after) if status in (429, 503) else None
    if asked is not None:
        delay = max(delay, min(asked, settings.NOTIFY_RETRY_MAX_S))
    return delay
