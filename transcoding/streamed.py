"""A long video from object storage, encoded while it is still arriving.

Why: a worker copies its input whole before it reads it, and a 4 GB source
takes about ten seconds to fetch (docs/benchmarks.md, bench-fetch-large),
then the probe used to read every packet of it: the first frame came twice
as late as issue 35 allows. The first chunk needs the first few seconds of
the file and the sound needs every audio packet in order, which arrive in
that order anyway.

How, for QuickTime/MP4 files (what phones and cameras write):
- `locate` reads the file's top-level box headers with a few ranged reads
  and the moov box (the sample tables: where every frame is), wherever it
  is; anything else (another container, a fragmented file, a moov beyond
  MOV_HEADER_MAX_BYTES) is fetched whole first, as before.
- The input cache fetches the rest in order into its partial file
  (media.Growing), the moov and head first; the probe reads the header
  (transcoding/probe.probe_header: the moov gives what the packet scan
  counted), and the split goes ahead while the bytes still arrive.
- The first chunk's ffmpeg and the sound's read the file through a pipe
  fed from what has arrived (`feed`): a reader can never see a byte that
  is not there yet, and nothing is timed. A pipe cannot seek, so the file
  is fed in a "fast start" order: ftyp, then the moov, then the media.
  When the moov came last (the usual camera file), its chunk offsets are
  moved by its own size, as qt-faststart does; the bytes of the media are
  the file's own, so every frame decodes exactly as from the file.
- Every other part (other chunks, on any host) reads the whole file as
  before and probes it fully: a truncated or sparse file fails the job
  there, and the first chunk's attempt stops with it.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from django.conf import settings

import media
from transcoding.errors import MediaError
from transcoding.probe import MOV_HEADER_MAX_BYTES, Probe, box_header, top_boxes
from transcoding.scan_notes import probe_noted

T = TypeVar("T")

# The first read of a file: its ftyp and the boxes after it, usually the
# moov too when the file was written for streaming.
HEAD_READ_BYTES = 64 * 1024
# Top-level boxes walked to find the moov: files have a handful (ftyp,
# free, mdat, moov, udta); a crafted one cannot make us read more.
MAX_TOP_BOXES = 32
# What the header probe may read past the moov: libavformat's stream
# analysis (5 MB of packets, 5 s) and the first frame, at any sane bitrate.
PROBE_HEAD_BYTES = 64 * 1024 * 1024
# The most bytes fed to a reader at a time (whatever has arrived, up to this).
FEED_STEP = 4 * 1024 * 1024
# How much nicer than the slot the rest of the source is fetched: boto3's
# parallel download takes about a core for ten seconds per 4 GB, which the
# first chunk's encoder needs; the encoder reads a few MB a second of it.
FETCH_NICENESS = 10
# Boxes between moov and a track's chunk offset table.
_CONTAINERS = frozenset({b"trak", b"mdia", b"minf", b"stbl"})


class NotStreamable(ValueError):
    """The file cannot be fed in order (its moov is not where a pipe could
    have it first without a rewrite we do not make)."""


@dataclass(frozen=True)
class Layout:
    """Where a QuickTime/MP4 file's parts are, and the order a pipe gets them."""

    size: int
    head: bytes  # the file's first bytes, as read
    moov_start: int
    moov: bytes  # the moov box as stored, header included
    fed_moov: bytes  # the moov as fed: chunk offsets moved when it is fed before the media
    insert_at: int | None  # where the moov is fed (before the first mdat); None: where it is

    def pieces(self) -> list[tuple[int, int] | bytes]:
        """The order a reader is fed: file ranges (start, end) and bytes."""
        if self.insert_at is None:
            return [(0, self.size)]
        end = self.moov_start + len(self.moov)
        return [(0, self.insert_at), self.fed_moov, (self.insert_at, self.moov_start), (end, self.size)]


def locate(read, size: int) -> Layout | None:
    """The layout of a QuickTime/MP4 file of `size` bytes, read with
    `read(offset, length)`; None for anything else or a moov we cannot feed."""
    head = read(0, min(size, HEAD_READ_BYTES))
    if len(head) < 16 or head[4:8] != b"ftyp":
        return None

    def cached(offset: int, length: int) -> bytes:
        return head[offset:offset + length] if offset + length <= len(head) else read(offset, length)

    mdat_at = None
    for offset, kind, header_size, box_size in top_boxes(cached, size, MAX_TOP_BOXES):
        if offset + box_size > size:
            return None
        if kind == b"moov":
            if box_size > MOV_HEADER_MAX_BYTES:
                return None
            moov = cached(offset, box_size)
            if len(moov) != box_size:
                return None
            try:
                fed = moov if mdat_at is None else _moved(moov, header_size, mdat_at)
            except NotStreamable:
                return None
            return Layout(size=size, head=head, moov_start=offset, moov=moov, fed_moov=fed, insert_at=mdat_at)
        if kind == b"mdat" and mdat_at is None:
            mdat_at = offset
    return None


def _moved(moov: bytes, header_size: int, insert_at: int) -> bytes:
    """`moov` with every chunk offset at or after `insert_at` moved by the
    moov's own size: what it says once it is fed before the media."""
    out = bytearray(moov)
    delta = len(moov)

    def walk(start: int, end: int) -> None:
        at = start
        while at + 8 <= end:
            kind, hsize, bsize = box_header(bytes(out[at:at + 16]), end - at)
            if bsize < hsize or at + bsize > end:
                raise NotStreamable("a malformed box in the moov")
            body = at + hsize
            if kind in _CONTAINERS:
                walk(body, at + bsize)
            elif kind == b"mvex":  # fragmented: offsets live in each fragment
                raise NotStreamable("a fragmented file with its moov after its media")
            elif kind in (b"stco", b"co64"):
                width = 4 if kind == b"stco" else 8
                count = int.from_bytes(out[body + 4:body + 8], "big")
                if body + 8 + count * width > at + bsize:
                    raise NotStreamable("a chunk offset table longer than its box")
                dtype = np.dtype(">u4" if width == 4 else ">u8")
                offsets = np.frombuffer(out, dtype=dtype, count=count, offset=body + 8).astype(np.uint64)
                offsets = np.where(offsets >= insert_at, offsets + np.uint64(delta), offsets)
                if width == 4 and count and int(offsets.max()) >= 2 ** 32:
                    raise NotStreamable("32-bit chunk offsets that would overflow")
                out[body + 8:body + 8 + count * width] = offsets.astype(dtype).tobytes()
            at += bsize

    walk(header_size, len(out))
    return bytes(out)


@dataclass(frozen=True)
class Streamed:
    """A video being fetched while its first chunk is encoded: what the
    split hands to its first chunk in the same slot, with the header probe
    it was split on (`probe`, set by the split's hand-over)."""

    growing: media.Growing
    layout: Layout
    probe: Probe | None = None

    def wait_head(self) -> None:
        """Until the header probe has what it reads (the moov is there already)."""
        self.growing.wait(0, min(self.layout.size, PROBE_HEAD_BYTES))

    def feed(self, out: int, stop: threading.Event) -> bool:
        """Write the file, in fast-start order, into `out` (a pipe to
        ffmpeg), each part once it has arrived; return when the reader
        closed it, or True when `stop` ended a wait for bytes (ffmpeg.run's
        contract). A failed fetch raises. The first chunk's video reads this
        way: the fetch keeps ahead of it, and at full speed once it is done."""
        try:
            return self._feed(out, stop, lead=True)
        finally:
            self.growing.release()

    def follow(self, out: int, stop: threading.Event) -> bool:
        """As `feed`, for a reader that must not hurry the fetch: the sound,
        which reads the whole file. Until the job is playable the fetch keeps
        to what the first frames need (media.Growing.release), and the sound
        reads what has come, then the rest as it comes."""
        return self._feed(out, stop, lead=False)

    def _feed(self, out: int, stop: threading.Event, *, lead: bool) -> bool:
        src = self.growing.open()
        try:
            for piece in self.layout.pieces():
                if isinstance(piece, bytes):
                    _write(out, piece)
                    continue
                at, end = piece
                while at < end:
                    step = min(end, at + FEED_STEP, self.growing.wait_from(at, stop=stop, lead=lead))
                    while at < step:
                        sent = os.sendfile(out, src, at, step - at)
                        if sent == 0:
                            raise media.StorageUnavailable("the input is shorter than the store said")
                        at += sent
        except BrokenPipeError:
            return False  # the reader has what it needs
        except media.Stopped:
            return True
        finally:
            os.close(src)
        return False


def encode_scanned(stream: Streamed, src: Path, encode: Callable[[Callable[[], None]], T]) -> T:
    """Run `encode(check)` (the first chunk, with its sound) beside the whole
    file's probe, packet scan included, which starts once the fetch is done:
    `check` raises the probe's refusal (a truncated file, packets that do not
    back its length), so the sound stops filling a crafted file's claimed
    hours as soon as the scan has read it, and the chunk's result counts
    only once the scan has passed (it was split on its header alone)."""
    refused: list[MediaError] = []
    stop = threading.Event()

    def scan() -> None:
        try:
            stream.growing.wait(0, stream.layout.size, stop=stop, lead=False)
            probe_noted(stream.growing.key, src)  # noted for the other parts on this host
        except MediaError as exc:
            refused.append(exc)
        except Exception:  # a failed fetch is the feeds' to report; a stop, nothing
            return

    def check() -> None:
        if refused:
            raise refused[0]

    thread = threading.Thread(target=scan, name="first-chunk-scan", daemon=True)
    thread.start()
    try:
        result = encode(check)
        thread.join()
        check()
        return result
    finally:
        stop.set()


def _write(out: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]


def start(key: str, src: Path, *, recorded_size: int | None = None) -> Streamed | None:
    """Begin fetching the input `key` in order, linked at `src`, when it is a
    QuickTime/MP4 file on object storage of at least
    FAIRLANE_STREAM_INPUT_BYTES; None otherwise (fetch it whole: a smaller
    file arrives in a fraction of a second). `recorded_size`, the size the
    upload was accepted with: below the threshold the store is not asked
    (a HEAD per job, most of them small); at or above it the store's own
    answer decides, as the ranges are read from it."""
    if not media.uses_object_storage():
        return None
    if recorded_size is not None and recorded_size < settings.FAIRLANE_STREAM_INPUT_BYTES:
        return None
    size = media.size(key)
    if size < settings.FAIRLANE_STREAM_INPUT_BYTES:
        return None
    layout = locate(lambda offset, length: media.read_range(key, offset, length), size)
    if layout is None:
        return None
    growing = media.stream_input(key, size, {0: layout.head, layout.moov_start: layout.moov},
                                 niceness=FETCH_NICENESS)
    if growing is None:
        return None
    growing.link(src)
    return Streamed(growing, layout)


# What a split left for its first chunk, by input key (this process only:
# the first chunk runs next in the same slot, transcoding/services.py).
_handed: dict[str, Streamed] = {}


def hand_over(key: str, streamed: Streamed) -> None:
    _handed.clear()  # a slot runs one video at a time; an earlier one's first chunk is done or gone
    _handed[key] = streamed


def take(key: str) -> Streamed | None:
    """The stream a split in this process left for its first chunk, once."""
    return _handed.pop(key, None)
