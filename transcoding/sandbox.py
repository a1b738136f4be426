"""The decoders that run in Python (Pillow, pdfium, PyAV's demuxing and
first-frame decode) run in a short-lived child process, bounded the way
ffmpeg is: an address-space limit, a CPU-time limit and a wall-clock
timeout, and death with the worker that asked for it.

In the worker process itself a decompression bomb, a PDF that makes pdfium
build millions of objects, or a decoder bug would take the worker with it
(the OOM killer, an abort): the job would then be retried as a lost attempt
and only after its third crash end as `resource_limit`. In a child, the
same file fails at once with `resource_limit` and a human message, and the
worker goes on.

Children come from a small fork server of our own
(transcoding/sandbox_server.py): a process started once per worker process,
with the decoding libraries already imported, that forks one child per
call. Forking the worker itself would copy its threads' locks and its
database and Redis connections into the child; a fresh interpreter per call
costs a few hundred milliseconds of imports; multiprocessing's fork server
refuses to start from a Celery prefork child (a daemonic process to it) and
re-runs the worker's main script in every child before Python 3.14. The
fork server dies with the worker and each child with the fork server
(PR_SET_PDEATHSIG), so nothing outlives the worker. Measured cost:
docs/media-safety.md.

What crosses between the processes is pickled: the function (by name, so
it must be a module-level function of an importable module) and plain
values. The child runs with the worker's user and environment: this bounds
resources, it is not a security boundary against a decoder exploit.
"""
from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from transcoding import limits
from transcoding.errors import MediaError

log = logging.getLogger(__name__)

T = TypeVar("T")

_FRAME = struct.Struct(">Q")  # each message: its length, then its pickle
# A child's memory is all new: the buffers of a 12 MP photo cost it 25,000
# page faults (80 ms of system time) that a worker reusing its own heap does
# not pay. Transparent huge pages for malloc's large blocks cut them to
# 3,000 (a glibc tunable since 2.35; older ones ignore it).
_HUGE_PAGES = "glibc.malloc.hugetlb=1"
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def send(stream: BinaryIO, message: object) -> None:
    """Write one message to an unbuffered stream."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    write_all(stream, _FRAME.pack(len(data)) + data)


def write_all(stream: BinaryIO, data: bytes) -> None:
    """An unbuffered stream on a pipe may take `data` in parts."""
    view = memoryview(data)
    while view:
        view = view[stream.write(view):]


def receive(stream: BinaryIO) -> object:
    """The next message from an unbuffered stream, read to its last byte and
    not one further (what follows is waited for with select); EOFError when
    the other side is gone."""
    size, = _FRAME.unpack(_read_exactly(stream, _FRAME.size))
    return pickle.loads(_read_exactly(stream, size))


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class _ForkServer:
    """This process's fork server: started on first use by the calling
    thread (the kernel ties the server's parent-death signal to that
    thread: Celery's prefork children run their tasks in their main thread,
    which lives as long as they do)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        parent = self.owner
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "transcoding.sandbox_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            bufsize=0, cwd=_PROJECT_ROOT, preexec_fn=lambda: limits.die_with_parent(parent),
            env={**os.environ, "GLIBC_TUNABLES": ":".join(filter(None, (os.environ.get("GLIBC_TUNABLES"),
                                                                         _HUGE_PAGES)))},
        )

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()

    def call(self, fn: Callable, args: tuple, *, timeout_s: float, memory_bytes: int) -> tuple[tuple | None, int]:
        """(outcome, wait status) of `fn(*args)` in a new child."""
        send(self.proc.stdin, (fn, args, memory_bytes, int(timeout_s * 2)))
        kind, child = receive(self.proc.stdout)
        assert kind == "pid"
        try:
            # A handle on this very process: once the server has collected
            # it, its pid may be reused, and a kill by pid could hit another.
            handle = os.pidfd_open(child)
        except ProcessLookupError:  # ended and collected already: its answer is on the way
            handle = None
        try:
            # The answer comes when the child has ended: wait for it on the
            # pipe, with the timeout, before a blocking read.
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            if not ready:
                if handle is not None:
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
                receive(self.proc.stdout)  # the server answers once it has collected the child
                raise MediaError("timeout", f"Decoding the file took longer than {timeout_s:g} s and was stopped.")
        finally:
            if handle is not None:
                os.close(handle)
        kind, status, outcome = receive(self.proc.stdout)
        assert kind == "done"
        return (pickle.loads(outcome) if outcome else None), status


_server: _ForkServer | None = None
_lock = threading.Lock()


def run(fn: Callable[..., T], *args, timeout_s: float, memory_bytes: int) -> T:
    """`fn(*args)` in a child with at most `memory_bytes` more address space
    than it starts with, `timeout_s` of wall time and twice that of CPU
    time. `fn` must not use Django's settings or database: pass it what it
    needs. MediaError crosses back as itself; an exhausted limit or a crash
    becomes MediaError("resource_limit"); the timeout MediaError("timeout")."""
    global _server
    with _lock:
        if _server is None or not _server.usable():
            _server = _ForkServer()
        server = _server
        try:
            outcome, status = server.call(fn, args, timeout_s=timeout_s, memory_bytes=memory_bytes)
        except MediaError:
            raise
        except BaseException:
            # The server died, or this thread was interrupted while it waited
            # (the worker's soft time limit): the conversation is out of step,
            # so the server and its child go, and the next call starts afresh.
            server.stop()
            _server = None
            raise
    return _outcome(outcome, status, memory_bytes)


def _outcome(outcome: tuple | None, status: int, memory_bytes: int):
    if outcome is not None and outcome[0] == "ok":
        return outcome[1]
    if outcome is not None and outcome[0] == "media_error":
        raise MediaError(outcome[1], outcome[2])
    if outcome is not None and outcome[0] == "crash":
        raise RuntimeError(f"a decoding child failed:\n{outcome[1]}")
    if outcome is not None:  # ("memory",): a MemoryError, or a decoder that said so
        raise MediaError("resource_limit", f"Decoding this file needs more than the {memory_bytes // 2**20} MB "
                                           f"of memory a file may use.")
    if os.WIFSIGNALED(status):
        # SIGKILL or SIGXCPU at the CPU limit, the OOM killer, a decoder that
        # aborted (pdfium does when an allocation fails) or crashed.
        log.warning("a decoding child was stopped by %s", _signal_name(os.WTERMSIG(status)))
        raise MediaError("resource_limit", "The decoder stopped while reading this file: it ran out of memory or "
                                           "time, or crashed on it.")
    raise RuntimeError(f"a decoding child exited with status {os.waitstatus_to_exitcode(status)} and no result")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
