"""The one application error: a code for machines and a message for people.

Services raise it; the API renders it as `{"error": {"code", "message"}}`
(uploads/api_errors.py); jobs store the same pair when they fail.
"""
from __future__ import annotations


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
