"""Media errors are permanent: the same file fails the same way every time, so
they fail the job at once with a code the user can act on, never retry."""
from __future__ import annotations

from uploads.errors import JobError


class MediaError(JobError):
    """Bad media: the job fails at once with this code and message."""
