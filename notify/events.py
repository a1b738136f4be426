"""The events people can be told about, spelled once."""
from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    # A video can be watched while it is still processed (its first seconds
    # are stored); always before its job.succeeded (notify/services.py).
    JOB_PLAYABLE = "job.playable"
    JOB_SUCCEEDED = "job.succeeded"
    JOB_FAILED = "job.failed"
    # One summary per upload batch, once every job of the batch has ended.
    BATCH_COMPLETED = "batch.completed"
    # To the owner only, by email, whatever their preferences.
    ENDPOINT_DISABLED = "endpoint.disabled"


# What users may subscribe to (per channel, and per webhook endpoint).
SUBSCRIBABLE: tuple[str, ...] = (EventType.JOB_PLAYABLE, EventType.JOB_SUCCEEDED, EventType.JOB_FAILED,
                                 EventType.BATCH_COMPLETED)


class Channel(StrEnum):
    EMAIL = "email"
    WEBHOOK = "webhook"


JOB_EVENTS = {"succeeded": EventType.JOB_SUCCEEDED, "failed": EventType.JOB_FAILED}
