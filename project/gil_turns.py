"""Short GIL turns in the processes whose threads users share.

A thread that waits on I/O (a database query, a Redis reply, a socket)
must take the GIL back when the answer comes. While another thread of its
process computes (another user's batch cancel building its chunk, a page of
JSON), CPython makes the returning thread wait a whole switch interval
before it may ask that thread to let go: 5 ms by default, on every return
from I/O. A light user's upload makes some twenty such returns in a web
process (its queries, its Redis calls, the event loop's steps around its
request), so beside one busy thread it waited ~0.1 s for nothing, and up to
0.3 s in `make bench-isolation` before Django even saw it (the "convoy
effect", bpo-7946). `make bench-gil-turns`: 100 socket round trips
beside one computing thread took 525 ms at 5 ms, 115 ms at 1 ms and 64 ms
at 0.5 ms, and 4.6 ms with no such thread.

A shorter interval costs the computing thread a few more GIL hand-overs
per second (tens of microseconds each), which is the trade we want where
many users' requests share a process: the web (project/asgi.py) and the
io-notify lane's threads (project/celery.py).
"""
from __future__ import annotations

import sys

from django.conf import settings


def shorten_gil_turns() -> float:
    """Sets this process's switch interval to FAIRLANE_GIL_SWITCH_MS; returns
    it in seconds. Called once the process is ready to serve."""
    sys.setswitchinterval(settings.FAIRLANE_GIL_SWITCH_MS / 1000)
    return sys.getswitchinterval()
