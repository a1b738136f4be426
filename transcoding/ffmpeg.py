"""Running ffmpeg so that a hostile or broken file cannot hurt the machine.

- Arguments are a list (no shell); the input demuxer is forced to the one
  the probe accepted, only allowed demuxers may run at all (a nested input
  inherits the list), only the `file` protocol is allowed and the demuxer
  options that follow references (mov's data references) are pinned off,
  so a file cannot make ffmpeg open the network or another file.
- Every output maps its streams explicitly (subtitles, attachments and data
  tracks are never mapped) and copies no metadata or chapters from the
  source: camera positions and whatever text a file carries stay behind.
- ffmpeg runs in its own session (process group) with CPU-time and
  address-space limits; on timeout or cancel the whole group is killed, and
  it dies with the worker process that started it (transcoding/limits.py).
- Progress comes from `-progress pipe:1` (key=value lines about twice a
  second); the callback is throttled to about once a second. An `on_tick`
  callback runs after every block of them, four times a second: an
  attempt's streamer (transcoding/live.py) records its segments from
  there, in the thread that runs the job.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import imageio_ffmpeg
from django.conf import settings

from media.priority import lower_priority
from transcoding import limits
from transcoding.errors import MediaError
from transcoding.probe import DEMUXER_OPTIONS, open_options

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()
PROGRESS_INTERVAL_S = 1.0
# How often ffmpeg writes a progress block when the caller has an `on_tick`.
TICK_S = 0.25


def timeout_for(duration_s: float) -> float:
    """Wall-clock limit: generous per second of media, never below a minute."""
    return max(60.0, duration_s * 10.0)


def _limits(cpu_seconds: int, niceness: int = 0) -> Callable[[], None]:
    """The child's set-up between fork and exec. `run` waits for ffmpeg in
    the thread that starts it, which is what the parent-death signal watches."""
    parent = os.getpid()
    address_space = settings.FAIRLANE_FFMPEG_MAX_BYTES  # read before the fork

    def apply() -> None:
        limits.die_with_parent(parent)
        limits.set_limits(address_space_bytes=address_space, cpu_seconds=cpu_seconds)
        lower_priority(niceness)

    return apply


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# ffmpeg's "[component @ 0x55d4c1e0] " before a line: its internals and a
# memory address, nothing a user can act on (uploads.errors.public_message
# takes out whatever else names the server).
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)+")
# After each output file's name-less options: nothing of the source's
# global or stream metadata, nor its chapters, goes into an output.
NO_METADATA = ["-map_metadata", "-1", "-map_chapters", "-1"]


def input_args(src: Path | None, container: str) -> list[str]:
    """The demuxer the probe accepted, forced, with its reference-following
    options off; only local-file access, no other demuxer even for what the
    input opens itself (nested inputs inherit the lists), and only allowed
    decoders, for the streams used and the ones merely looked at. `src`
    None: ffmpeg's standard input, which `run` feeds (transcoding/streamed.py),
    and then no file at all."""
    options = open_options() | ({"protocol_whitelist": "pipe"} if src is None else {})
    whitelists = [arg for key, value in options.items() for arg in (f"-{key}", value)]
    pinned = [arg for key, value in DEMUXER_OPTIONS.get(container, {}).items() for arg in (f"-{key}", value)]
    return [*whitelists, *pinned, "-f", container, "-i", "pipe:0" if src is None else str(src)]


def run(
    args: list[str],
    *,
    duration_s: float,
    on_progress: Callable[[int], None] | None = None,
    timeout_s: float | None = None,
    on_tick: Callable[[], None] | None = None,
    feed: Callable[[int, threading.Event], bool | None] | None = None,
    niceness: int = 0,
) -> None:
    """Run `ffmpeg <args>`; raise MediaError with ffmpeg's last words on
    failure. `on_tick` is called every TICK_S while it runs; like
    `on_progress`, it stops ffmpeg by raising. `feed(fd, stop)` writes
    ffmpeg's standard input from a thread of its own (an input given as
    None to input_args), returning True when `stop` ended its wait for the
    input's bytes; what it raises is raised here, before ffmpeg's own
    error, which would only be the input's unexpected end, and a timeout
    while it waited is InputStalled, not the file's fault. `niceness`:
    ffmpeg and its feed run that much nicer (media.priority.lower_priority)."""
    timeout_s = timeout_s or timeout_for(duration_s)
    ticks = ["-stats_period", f"{TICK_S:g}"] if on_tick else []
    cmd = [FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error", "-progress", "pipe:1", "-nostats", *ticks,
           *args]
    with tempfile.TemporaryFile() as errfile:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=errfile,
            stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_limits(int(timeout_s * 2), niceness),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        feeding = _Feeding(proc, feed, niceness) if feed else None
        # A watchdog, not a check in the read loop: a stuck ffmpeg prints nothing.
        timed_out = threading.Event()

        def kill_group() -> None:
            timed_out.set()
            _kill_group(proc)

        watchdog = threading.Timer(timeout_s, kill_group)
        watchdog.start()
        last_report, last_pct = 0.0, -1
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("ascii", "replace").strip()
                # With several outputs ffmpeg sometimes reports N/A; progress never goes back.
                if on_progress and line.startswith("out_time_us=") and line[12:].isdigit() and duration_s > 0:
                    now = time.monotonic()
                    pct = min(99, int(100 * int(line[12:]) / 1e6 / duration_s))
                    if now - last_report >= PROGRESS_INTERVAL_S and pct >= last_pct:  # also the stop check: every second
                        last_report, last_pct = now, pct
                        on_progress(pct)
                if on_tick and line.startswith("progress="):  # the end of a block
                    on_tick()
            proc.wait()
        finally:
            watchdog.cancel()
            _kill_group(proc)
            if feeding is not None:
                feeding.stop()
        if feeding is not None and feeding.failed:
            raise feeding.failed[0]
        if timed_out.is_set() and feeding is not None and feeding.unfinished:
            raise InputStalled(f"ffmpeg's input did not arrive within {int(timeout_s)} s")
        if timed_out.is_set():
            raise MediaError("timeout", f"Processing took longer than {int(timeout_s)} s and was stopped.")
        if proc.returncode != 0:
            errfile.seek(0)
            tail = errfile.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
            last = _LOG_PREFIX.sub("", tail[-1]) if tail else f"exit status {proc.returncode}"
            if proc.returncode < 0:
                raise MediaError("resource_limit", f"The decoder was stopped by a resource limit (signal {-proc.returncode}).")
            raise MediaError("decode_failed", f"The media could not be decoded: {last}")


class InputStalled(OSError):
    """ffmpeg ran out of time while its input was still being fed (a source
    still arriving from the store): the store was slow, not the file bad.
    An OSError, so the attempt is retried later as a transient error."""


class _Feeding:
    """The thread that writes a running ffmpeg's standard input."""

    def __init__(self, proc: subprocess.Popen, feed: Callable[[int, threading.Event], bool | None],
                 niceness: int) -> None:
        self._proc, self._stop, self.failed = proc, threading.Event(), []
        self.unfinished = False  # the feed stopped while it waited for its input's bytes
        self._thread = threading.Thread(target=self._run, args=(feed, niceness), name="ffmpeg-feed", daemon=True)
        self._thread.start()

    def _run(self, feed: Callable[[int, threading.Event], bool | None], niceness: int) -> None:
        assert self._proc.stdin is not None
        lower_priority(niceness)
        try:
            self.unfinished = bool(feed(self._proc.stdin.fileno(), self._stop))
        except BaseException as exc:  # raised by run(), in the thread that waits for ffmpeg
            self.failed.append(exc)
        finally:
            try:
                self._proc.stdin.close()  # the end of the input
            except BrokenPipeError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
