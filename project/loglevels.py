"""Log records logged at a level their reader cannot act on, told at the
level they deserve (a filter on the logger that writes them, settings.LOGGING),
and the same warning repeated many times a second written once a minute."""
from __future__ import annotations

import logging
import threading
import time


class FlowerUnanswered(logging.Filter):
    """Flower asks the workers about themselves once when it starts, and
    warns for each question no worker answered ("Inspect method stats
    failed"). Under `make run` (and any deploy that starts Flower beside
    the workers) it starts before any worker is up, so every start printed
    four warnings about nothing: Flower learns the workers from their
    events as they come, and asks again when its workers page is opened.
    Those are INFO here; a question that failed for a broker error (the
    message with its reason) stays a warning."""

    UNANSWERED = "Inspect method %s failed"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.msg == self.UNANSWERED:
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


class RateRefusals(logging.Filter):
    """Django logs every 4xx answer on django.request at WARNING. A rate
    refusal (429) is the product working: a client that ignores Retry-After
    is answered hundreds of times a second (bench-isolation's hostile user:
    87,000 in eight minutes), and each had two lines, the web server's
    access line and this one, about a fifth of the web's CPU for answering
    it. The access line stays; this one goes. Other 4xx stay warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) != 429


class RepeatedWarnings(logging.Filter):
    """A warning or error that repeats (the same logger, message and
    arguments) is written once per `interval_s`; the repeats between are
    counted, and the next one written says how many there were. While Redis
    is out of reach, every API request warns that its rate was not counted
    and every large poll that its answer was not kept: hundreds of identical
    lines a second, which buried everything else and cost the web's CPU.
    On the console handler (settings.LOGGING): what a test's caplog or
    another handler sees is unchanged. At most `most` kinds are remembered;
    past that the oldest are forgotten (and may be written again)."""

    def __init__(self, interval_s: float = 60.0, most: int = 1000) -> None:
        super().__init__()
        self.interval_s, self.most = interval_s, most
        self._seen: dict[tuple, list] = {}  # kind -> [written at, repeats held since]
        self._lock = threading.Lock()
        self._clock = time.monotonic

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or self.interval_s <= 0:
            return True
        kind = (record.name, record.levelno, str(record.msg), repr(record.args))
        now = self._clock()
        with self._lock:
            seen = self._seen.get(kind)
            if seen is not None and now - seen[0] < self.interval_s:
                seen[1] += 1
                return False
            held = seen[1] if seen is not None else 0
            self._seen.pop(kind, None)
            self._seen[kind] = [now, 0]  # newest last: the first one is the oldest
            if len(self._seen) > self.most:
                del self._seen[next(iter(self._seen))]
        if held:
            record.msg = f"{record.getMessage()} ({held} more like this in the last {self.interval_s:g} s)"
            record.args = ()
        return True
