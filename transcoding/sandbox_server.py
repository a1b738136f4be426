"""The fork server behind transcoding/sandbox.py: `python -m
transcoding.sandbox_server`, one per worker process, started by it.

It imports the decoding libraries once, then for each request on stdin
(function, arguments, memory budget, CPU seconds) forks a child that runs
the function under those limits and writes its outcome on a pipe. The
server answers on stdout with the child's pid at once (so the worker can
kill it at its timeout), then, when the child has ended, with its wait
status and outcome. One request at a time: a worker process runs one job.

Only this process forks, and it has one thread and no connections, so a
child starts clean; it already has the libraries, so a call costs a fork.
"""
from __future__ import annotations

import io
import os
import pickle
import resource
import sys
import traceback

from PIL import Image

from transcoding import images, limits, pipelines, probe  # noqa: F401 - imported once, for every child
from transcoding.errors import MediaError
from transcoding.sandbox import receive, send, write_all

# Work done lazily on first use would otherwise be redone in every child:
# Pillow imports its format plugins on the first open (about 40 ms), and the
# probe builds its decoder allow-list from libavcodec's 500-odd codecs.
Image.init()
probe.open_options()


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _child(server: int, outcome_fd: int, fn, args: tuple, memory_bytes: int, cpu_seconds: int) -> None:
    """In the child, which never returns: limits first, then the work; the
    outcome is pickled as (kind, ...) so that no exception needs pickling."""
    limits.die_with_parent(server)
    for fd in (0, 1):  # the server's conversation with the worker is not the child's
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    # Room beyond what the child starts with (the decoding libraries are
    # mapped already), so the budget means the same whatever they weigh.
    limits.set_limits(address_space_bytes=_address_space_bytes() + memory_bytes, cpu_seconds=cpu_seconds)
    try:
        outcome = ("ok", fn(*args))
    except MediaError as exc:
        outcome = ("media_error", exc.code, exc.message)
    except MemoryError:
        outcome = ("memory",)
    except Exception:  # a bug, or a decoder error nobody wrapped: the worker logs it
        outcome = ("crash", traceback.format_exc())
    with io.FileIO(outcome_fd, "wb") as out:
        write_all(out, pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
    os._exit(0)


def serve() -> None:
    requests, replies = io.FileIO(0, "rb", closefd=False), io.FileIO(1, "wb", closefd=False)
    me = os.getpid()
    while True:
        try:
            fn, args, memory_bytes, cpu_seconds = receive(requests)
        except EOFError:  # the worker is gone
            return
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read_end)
            try:
                _child(me, write_end, fn, args, memory_bytes, cpu_seconds)
            finally:
                os._exit(70)  # only when even the outcome could not be sent
        os.close(write_end)
        send(replies, ("pid", child))
        with io.FileIO(read_end, "rb") as outcome:
            data = outcome.read()  # to the end: the child has exited or been killed
        _, status = os.waitpid(child, 0)
        # The outcome goes on as the child's bytes: unpickled once, by the worker.
        send(replies, ("done", status, data))


if __name__ == "__main__":
    sys.exit(serve())
