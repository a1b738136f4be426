"""What a pipeline hands back: one file in its work directory, with the name
the API shows, its content type and what is known about it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

ProgressFn = Callable[[int], None]


@dataclass
class Produced:
    name: str
    filename: str  # relative to the work directory
    content_type: str
    metadata: dict = field(default_factory=dict)


def kbps(size_bytes: int, duration_s: float) -> int | None:
    return round(size_bytes * 8 / duration_s / 1000) if duration_s > 0 else None
