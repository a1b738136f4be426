"""Keep signed output links out of the logs.

An output link (/o/<token>/<file>, uploads/delivery.py) is a bearer
credential until it expires: whoever reads it downloads the file. Request
lines and referers carry it (an HLS player fetches every segment with the
playlist's link as referer), so the console handler in settings.LOGGING
(`MaskSignedLinks`) replaces the token with "[redacted]" in every line:
the web's access lines (project/web_gate.py) and Django's own.
"""
from __future__ import annotations

import logging
import re

# The token is one path segment after /o/ (Django's signing alphabet: URL-safe
# base64, ':' and '.'; percent-encoded by some clients), then the file's path.
_SIGNED_LINK = re.compile(r"/o/[^/\s\"'?#]+/")
LINK_MARK = "/o/"  # in every text _SIGNED_LINK matches
MASK = "/o/[redacted]/"


def mask(text: str) -> str:
    return _SIGNED_LINK.sub(MASK, text)


class MaskSignedLinks(logging.Filter):
    """Masks output link tokens in the record's message (formatted once here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True
