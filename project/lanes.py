"""The worker lanes, spelled once.

A lane is a Celery queue with its own worker pool: `cpu-transcode` runs
ffmpeg in a prefork pool sized to the cores, `io-notify` talks to mail
servers and webhooks from a large thread pool. Both are fair lanes: the fair
dispatcher holds each user's backlog and releases it into the queue.
"""
from __future__ import annotations

from enum import StrEnum


class Lane(StrEnum):
    CPU_TRANSCODE = "cpu-transcode"
    IO_NOTIFY = "io-notify"


FAIR_LANES: frozenset[Lane] = frozenset({Lane.CPU_TRANSCODE, Lane.IO_NOTIFY})
