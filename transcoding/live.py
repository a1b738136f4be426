"""Segments to storage while the encoder writes them: what makes a video
playable seconds after its job starts, long before its ladder is done
(docs/architecture.md, "Playable in seconds").

The encoder (one ffmpeg: a single pass's ladder, a chunk) writes each
rendition's segments under a temporary name, renames each one when it is
whole, then replaces the rendition's EVENT playlist (ladder.hls_muxer). A
streamer thread beside it reads those playlists every POLL_S and uploads
each listed segment of every rendition once, in parallel, under the
attempt's own prefix and the very key the finished outputs use: the
upload at the end (media.put_tree) skips them, so nothing is stored twice.

What is stored is then recorded: per track (a ladder's renditions are one
track, cut at the same frames; a chunked video's sound is another), the
segments that every folder of the track has stored, in order, with their
durations, and what a master playlist needs (the renditions, the sound's
bitrate), and once the encoder has ended, that it is complete. The record
is the job's `live` field, written by the thread that
runs the job (ffmpeg.run's on_tick calls Sink.flush), fenced by the
attempt number as a progress write is: a replaced attempt cannot write it,
and a new attempt starts it empty. The web builds the growing playlists
from it, for the job's current attempt only (uploads/live.py).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import media
from transcoding import ladder

log = logging.getLogger(__name__)

# How often the streamer looks for finished segments: a segment waits at
# most this long before its upload starts. A look reads one small playlist
# per rendition.
POLL_S = 0.2


@dataclass
class Sink:
    """Where an attempt's segments go while it encodes, and who hears of it.

    `record(state, playable)` stores the state (transcoding/services.py: the
    job's `live` field, fenced by the attempt) and raises when the job is no
    longer the attempt's, which stops the encoder. The streamer only offers
    states; `flush`, called from the thread that runs the job, records the
    latest one: that thread holds the job's database connection (and, in
    the tests, its transaction)."""

    prefix: str  # the attempt's outputs prefix
    record: Callable[[dict, bool], None]
    # {path under the work directory: size} of what is stored: put_tree's skip.
    stored: dict[str, int] = field(default_factory=dict)
    _offered: tuple[dict, bool] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def offer(self, state: dict, playable: bool) -> None:
        with self._lock:
            self._offered = (state, playable)

    def flush(self) -> None:
        with self._lock:
            offered, self._offered = self._offered, None
        if offered is not None:
            self.record(*offered)


class _Streamer(threading.Thread):
    """Uploads what `tracks`' folders (under workdir/hls) list, round by round."""

    def __init__(self, sink: Sink, workdir: Path, tracks: dict[str, list[str]], info: dict,
                 needs: tuple[str, ...]) -> None:
        super().__init__(name="segment-streamer", daemon=True)
        self.sink, self.workdir, self.tracks, self.info, self.needs = sink, workdir, tracks, info, needs
        self.uploaded: dict[str, list[tuple[str, float]]] = {f: [] for folders in tracks.values() for f in folders}
        self.halted = threading.Event()
        self.shown: dict[str, int] = {}

    def run(self) -> None:
        while not self.halted.wait(POLL_S):
            try:
                self.round()
            except Exception:  # the store's hiccup: the next round (and the last, which raises) tries again
                log.warning("could not store segments yet; trying again", exc_info=True)

    def round(self, *, final: bool = False) -> None:
        """Upload every listed segment not stored yet, then offer the state
        (`final`: the encoder has ended, so the state is offered marked
        complete, which ends the playlists made from it)."""
        pending: list[tuple[str, str, float]] = []  # (folder, uri, duration)
        for folder, done in self.uploaded.items():
            playlist = self.workdir / "hls" / folder / "index.m3u8"
            if playlist.is_file():  # replaced whole (renamed into place), never half-written
                pending += [(folder, uri, d) for d, uri in ladder.playlist_entries(playlist)[len(done):]]
        if pending:
            paths = [f"hls/{folder}/{uri}" for folder, uri, _ in pending]
            sizes = media.put_many([(self.workdir / path, self.sink.prefix + path) for path in paths])
            for (folder, uri, duration), path, size in zip(pending, paths, sizes):
                self.uploaded[folder].append((uri, duration))
                self.sink.stored[path] = size
        stored = {track: self.uploaded[folders[0]][:min(len(self.uploaded[f]) for f in folders)]
                  for track, folders in self.tracks.items()}
        counts = {track: len(entries) for track, entries in stored.items()}
        if final or (counts != self.shown and any(counts.values())):
            self.shown = counts
            playable = bool(self.needs) and all(counts[track] for track in self.needs)
            tracks = {t: [[u, round(d, 6)] for u, d in e] for t, e in stored.items()}
            self.sink.offer({**self.info, "tracks": tracks, **({"complete": True} if final else {})}, playable)

    def halt(self) -> None:
        self.halted.set()
        self.join()


@contextmanager
def streaming(sink: Sink | None, workdir: Path, tracks: dict[str, list[str]], *, info: dict,
              needs: tuple[str, ...] = ()) -> Iterator[None]:
    """Stream the segments the block's encoder writes into workdir/hls/<folder>/
    for each track's folders, offering `info` with what is stored. `needs`:
    the tracks that must each have a segment stored for the job to be
    playable (none: this encoder alone never makes it playable, as a
    chunk after the first). When the block ends well, what the encoder
    wrote last is stored and recorded before this returns (an upload that
    still fails then raises); when it raises, the streamer just stops.
    Without a sink (a pipeline run outside a job) it does nothing."""
    if sink is None:
        yield
        return
    for folders in tracks.values():
        for folder in folders:  # the muxer makes no folder without a %v in its path
            (workdir / "hls" / folder).mkdir(parents=True, exist_ok=True)
    streamer = _Streamer(sink, workdir, tracks, info, needs)
    streamer.start()
    try:
        yield
    finally:
        streamer.halt()
    # The encoder has ended: its last segments, in this thread, recorded in
    # the same write that says the record is complete. A player must see
    # the last segment and the playlist's end together: hls.js ends a stream
    # only on a last segment it loaded from a playlist that ended.
    streamer.round(final=True)
    sink.flush()
