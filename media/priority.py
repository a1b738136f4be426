"""A thread's CPU priority: the one helper for work that must yield the
cores to other work of the same host (media/input_cache.Growing's fetch,
transcoding/ffmpeg's niced encodes and their feeds)."""
from __future__ import annotations

import os
import threading


def lower_priority(niceness: int) -> None:
    """Make the calling thread (and the threads and processes it starts
    afterwards, which inherit it) `niceness` steps nicer: on Linux a nice
    value is the thread's own. Work that must not take the cores from the
    encoder of a video's first frames: the fetch of the rest of its source,
    the sound that follows it."""
    if niceness > 0:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
