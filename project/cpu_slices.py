"""Short CPU slices for the processes that answer people: the web, and the
Redis and object store that Fairlane starts itself.

A light user's upload is a few small requests, each a chain of wake-ups:
the web's thread, the database's backend, Redis, the store, the web again.
On a core that another user's work keeps busy (its polls, its jobs'
bookkeeping, its deliveries), each wake-up waited for whatever ran to use
up its slice first: with the kernel's default slice (EEVDF, Linux 6.6 and
later; 1.4 ms on two cores), a waking process's delay was 2.42 ms at p90
and 7.52 ms at p99 beside two processes computing half the time, in
sessions of their own (`make bench-cpu-slices`). Asking for a 0.1 ms
slice (sched_setattr(2)'s `sched_runtime` for SCHED_OTHER, Linux 6.12
and later) gives a waking thread an earlier deadline, so it runs as soon
as it may: 0.09 ms at p90 and 2.51 ms at p99 in the same bench. Its
share of the CPU does not change (that is its weight, its nice value): a
process that computes for
long is cut into more turns, one that wakes for a moment is not kept
waiting. That is the trade we want for request-serving processes; the
transcode slots keep the kernel's slice.

Asked per thread; threads and processes started later inherit it (fork,
clone and exec keep it), so asking once a process is up covers what it
starts afterwards. Where the kernel has no such slices the call fails or
is ignored, and the process runs as it would have: nothing here can stop
a process from serving. PostgreSQL runs on its own host in production;
docs/operations.md says how to give it the same (the benchmarks do).
"""
from __future__ import annotations

import ctypes
import logging
import os
import struct

log = logging.getLogger(__name__)

_SCHED_OTHER = 0
_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
_SYS_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}
# struct sched_attr (include/uapi/linux/sched/types.h), the 48-byte version:
# size, policy, flags, nice, priority, runtime, deadline, period.
_ATTR = struct.Struct("IIQiIQQQ")


def _syscall(table: dict[str, int]) -> int | None:
    return table.get(os.uname().machine)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def slice_of(tid: int) -> int | None:
    """The slice thread `tid` asked for, in nanoseconds (the kernel's default
    shows as its base slice); None where it cannot be read."""
    number = _syscall(_SYS_SCHED_GETATTR)
    if number is None:
        return None
    buf = ctypes.create_string_buffer(_ATTR.size)
    if _libc().syscall(number, tid, buf, _ATTR.size, 0) != 0:
        return None
    return _ATTR.unpack(buf.raw)[5]


def ask_for_short_slices(slice_us: int, pid: int | None = None) -> int:
    """Every thread of process `pid` (this one by default) asks for a slice of
    `slice_us` microseconds, keeping its policy's nice value; returns how many
    threads took it (0 where the kernel has no such slices, or `slice_us` is
    0: the kernel's own then)."""
    number = _syscall(_SYS_SCHED_SETATTR)
    if not slice_us or number is None:
        return 0
    pid = os.getpid() if pid is None else pid
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    libc, took = _libc(), 0
    for tid in tids:
        try:
            nice = os.getpriority(os.PRIO_PROCESS, tid)
        except OSError:  # the thread ended meanwhile
            continue
        if os.sched_getscheduler(tid) != _SCHED_OTHER:
            continue  # a thread that chose another policy keeps it
        attr = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, _SCHED_OTHER, 0, nice, 0, slice_us * 1000, 0, 0))
        if libc.syscall(number, tid, attr, 0) == 0:
            took += 1
    if not took:
        log.info("short CPU slices not available here (%s); the kernel's own apply",
                 os.strerror(ctypes.get_errno()) or "no threads")
    return took


SLICE_VAR = "FAIRLANE_CPU_SLICE_US"
DEFAULT_SLICE_US = "100"


def parse_slice_us(raw: str) -> int:
    """FAIRLANE_CPU_SLICE_US's value: 0 (the kernel's own) or the kernel's
    bounds, 100 to 100,000 microseconds; ValueError saying so otherwise.
    Read by the settings (project/settings/api.py) and, before the settings
    can load, by `make run`'s start of Redis and SeaweedFS."""
    wrong = ValueError(f"{SLICE_VAR} must be 0 (the kernel's own) or 100 to 100000, not {raw!r}")
    try:
        value = int(raw)
    except ValueError:
        raise wrong from None
    if value and not 100 <= value <= 100_000:
        raise wrong
    return value


def short_slices_here() -> int:
    """This process's threads at FAIRLANE_CPU_SLICE_US: called by the
    request-serving processes once they are up (project/asgi.py)."""
    from django.conf import settings

    return ask_for_short_slices(settings.FAIRLANE_CPU_SLICE_US)


def short_slices_for_what_starts_next() -> int:
    """The same from the environment alone, without Django's settings: for
    `make run`'s start of Redis and SeaweedFS, which inherit it, and which
    run before the settings are whole (the store's endpoint is not known
    until SeaweedFS is up)."""
    raw = os.environ.get("FAIRLANE_CPU_SLICE_US", DEFAULT_SLICE_US)
    return ask_for_short_slices(parse_slice_us(raw))
