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
