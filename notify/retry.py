"""When to try a delivery again, as pure functions of the answer and the
attempt number (the clock and the random source are parameters for tests).

Retried: no answer (timeout, refused, reset, TLS), any 5xx, 408 and 429.
Other 4xx mean the receiver understood and refused: trying again would get
the same answer. Delays grow exponentially with +-20% jitter (so a
receiver's outage does not get every delivery back at the same second),
and still strictly growing: the next delay is at least 2 x 0.8 / 1.2 = 1.33x
the previous one. A Retry-After from the receiver wins when it asks for longer.
"""
from __future__ import annotations

import random
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from django.conf import settings

RETRYABLE_4XX = (408, 429)
JITTER = 0.2


def is_retryable(status: int | None) -> bool:
    return status is None or status >= 500 or status in RETRYABLE_4XX


def is_success(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def backoff_s(attempt: int, *, rand: random.Random | None = None) -> float:
    """Delay after failed attempt number `attempt` (1-based)."""
    base = settings.NOTIFY_RETRY_BASE_S * 2 ** (attempt - 1)
    jitter = 1 + JITTER * (2 * (rand or random).random() - 1)
    return min(settings.NOTIFY_RETRY_MAX_S, base * jitter)


def retry_after_s(header: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or HTTP-date)."""
    if not header:
        return None
    header = header.strip()
    if header.isdigit():
        return float(header)
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def next_delay_s(attempt: int, *, status: int | None, retry_after: str | None) -> float | None:
    """Seconds until the next try, or None when there is none."""
    if not is_retryable(status) or attempt >= settings.NOTIFY_MAX_ATTEMPTS:
        return None
    delay = backoff_s(attempt)
    asked = retry_after_s(retry_after) if status in (429, 503) else None
    if asked is not None:
        delay = max(delay, min(asked, settings.NOTIFY_RETRY_MAX_S))
    return delay
