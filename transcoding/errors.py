"""Media errors are permanent: the same file fails the same way every time, so
they fail the job at once with a code the user can act on, never retry."""
from __future__ import annotations


class MediaError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
