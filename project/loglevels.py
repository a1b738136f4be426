"""Log records logged at a level their reader cannot act on, told at the
level they deserve (a filter on the logger that writes them, settings.LOGGING)."""
from __future__ import annotations

import logging


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
