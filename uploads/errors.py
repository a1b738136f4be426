"""The one application error: a code for machines and a message for people.

Services raise it; the API renders it as `{"error": {"code", "message"}}`
(uploads/api_errors.py); jobs store the same pair when they fail, and
`public_message` keeps what belongs to the server out of the message.
"""
from __future__ import annotations

import re
import socket
import tempfile
from functools import cache

from django.conf import settings

# What a message for people must not carry, with what stands in for it.
# Decoders word their errors for operators: PyAV appends the file's path,
# ffmpeg prefixes its lines with a component's memory address, a storage
# client names its endpoint.
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I)
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b")
_MEMORY_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b", re.I)


@cache
def _server_names(*folders: str) -> tuple[re.Pattern, re.Pattern]:
    """(paths, this host's name). A path starts with one of the server's own
    folders (matched whole, so one with a space in its name cannot
    half-survive) or with a "/" that starts a word (not "kbit/s", "N/A",
    "1/25"), and runs to a space or a quote, leaving the punctuation that
    ends a sentence."""
    known = "|".join(re.escape(f) for f in sorted(set(folders), key=len, reverse=True) if len(f) > 1)
    path = re.compile(rf"(?:{known}|(?<![\w.~/-])/(?=[\w.~+@%=-]))[^\s'\"<>|]*?(?=[.,:;)\]]*(?:[\s'\"<>|]|$))")
    host = re.compile(rf"(?<![\w.-]){re.escape(socket.gethostname())}(?![\w-])", re.I)
    return path, host


def public_message(text: str) -> str:
    """`text` without server paths, work folders, URLs, addresses or this
    host's name: what may be shown to the owner of a job. URLs go first:
    their path part would otherwise pass for a path."""
    path, host = _server_names(str(settings.MEDIA_ROOT), str(settings.BASE_DIR), tempfile.gettempdir())
    text = path.sub("[path]", _URL.sub("[link]", text))
    text = _MEMORY_ADDRESS.sub("[address]", _IPV4.sub("[address]", text))
    return host.sub("[host]", text)


class ApplicationError(Exception):
    status_code = 400

    def __init__(self, code: str, message: str, *, status_code: int | None = None, extra: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra or {}
        if status_code is not None:
            self.status_code = status_code


class JobError(Exception):
    """A job failed for a reason of its own (bad media, a missing batch):
    permanent, so the job fails at once with the code and message, no retry."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class TransientError(Exception):
    """Worth another attempt after a backoff: storage, network, a dependency
    that is down. Database and Redis connection errors count as transient
    too (uploads/attempts.py)."""
