"""Short garbage-collector pauses in the processes that users share.

CPython's cyclic collector stops every thread of its process while it runs
(it holds the GIL), and a full (generation 2) collection walks every object
the process tracks. A web process that has loaded Django, DRF and the
project tracks about 85,000 objects before its first request, and about
200,000-300,000 while another user's batch retry holds its 5,000 jobs: in
`make bench-isolation` such collections came every second or so in each
web process, took 0.1-0.66 s on the busy web host, and every light user's
request in that process waited for them.

What is loaded at start-up lives as long as the process, so it is moved to
the collector's permanent generation (`gc.freeze`) once the process is
ready: a full collection then walks only what requests made since. This is
what gc.freeze is for (its documentation; Instagram's web servers, who
asked for it). Objects frozen are never collected: nothing made by a
request is alive at that point, so nothing that becomes garbage is kept.
"""
from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Collects the garbage start-up made, then freezes every object alive
    (called once the process has loaded all it serves with); returns how
    many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
