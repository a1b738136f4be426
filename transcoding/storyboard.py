"""Scrub previews: a storyboard sprite and the WebVTT file that indexes it,
as Mux and PeerTube publish them. The sprite is one JPEG holding a grid of
small frames, one per `interval_s` of the video; each cue of the WebVTT
file names a stretch of time and the part of the sprite that shows it
(`storyboard.jpg#xywh=x,y,w,h`, the media fragment syntax players know).

Made from the ladder's lowest rendition after it exists, not from the
source: decoding 240p costs a small fraction of decoding the source (the
cost, measured by `python -m bench.storyboard`, is in
docs/benchmarks.md), the frames are already deinterlaced, tone-mapped,
rotated and square-pixelled, and a chunked video's rendition is whole only
in its finalizer, so both paths (transcoding/pipelines.py for one pass,
transcoding/chunks.py for chunks) make it the same way: the rendition's
segments joined (MPEG-TS segments in order are one stream) and decoded
once through ffmpeg's fps, scale and tile filters.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

from transcoding import ffmpeg, ladder
from transcoding.errors import MediaError
from transcoding.produced import Produced

log = logging.getLogger(__name__)

SPRITE = "storyboard.jpg"
VTT = "storyboard.vtt"
VTT_TYPE = "text/vtt"
# At most this many frames: enough to find a scene in a long video, and a
# sprite of 1600x900 (about 100 KB) that the page loads at once; a longer
# video gets a longer interval instead of a larger sprite.
MAX_FRAMES = 100
# A frame a second is as fine as a scrub preview needs, even for a clip.
MIN_INTERVAL_S = 1.0
COLUMNS = 10
# Each frame's short side (160x90 for 16:9, 90x160 portrait), as PeerTube's.
FRAME_SHORT_SIDE = 90
# mjpeg's quality scale (2 best .. 31 worst): previews, not stills.
JPEG_QUALITY = "5"


@dataclass(frozen=True)
class Plan:
    interval_s: float
    frames: int
    columns: int
    rows: int
    width: int  # of one frame
    height: int

    def as_json(self) -> dict:
        return {"interval_s": self.interval_s, "frames": self.frames, "columns": self.columns,
                "rows": self.rows, "frame_width": self.width, "frame_height": self.height}


def plan_for(duration_s: float, size: tuple[int, int]) -> Plan:
    """Frames every whole number of seconds (at least MIN_INTERVAL_S), at
    most MAX_FRAMES of them, each fitted to FRAME_SHORT_SIDE; `size` is the
    frames' source (the lowest rendition's)."""
    interval = max(MIN_INTERVAL_S, float(math.ceil(duration_s / MAX_FRAMES)))
    frames = max(1, math.ceil(duration_s / interval - 1e-6))
    columns = min(COLUMNS, frames)
    width, height = ladder.fit_within(size, FRAME_SHORT_SIDE)
    return Plan(interval, frames, columns, math.ceil(frames / columns), width, height)


def args(src: Path, sprite: Path, plan: Plan) -> list[str]:
    """One decode of `src` (MPEG-TS), one frame per interval from its first
    timestamp (the fps filter starts there), scaled, tiled into one JPEG. A
    last incomplete row is flushed at the end of the stream."""
    graph = (f"fps=1/{plan.interval_s:g},scale={plan.width}:{plan.height}:flags=bilinear,setsar=1,"
             f"tile={plan.columns}x{plan.rows}")
    return ["-y", "-threads", "1", *ffmpeg.input_args(src, "mpegts"), "-map", "0:v:0", "-vf", graph,
            "-frames:v", "1", "-c:v", "mjpeg", "-q:v", JPEG_QUALITY, "-update", "1", str(sprite)]


def _timestamp(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def vtt(plan: Plan, duration_s: float) -> str:
    """The WebVTT index: one cue per frame, its time range and its place in
    the sprite (relative to the VTT file: the two are stored side by side)."""
    lines = ["WEBVTT", ""]
    for i in range(plan.frames):
        start, end = i * plan.interval_s, min((i + 1) * plan.interval_s, max(duration_s, i * plan.interval_s + 0.001))
        x, y = i % plan.columns * plan.width, i // plan.columns * plan.height
        lines += [f"{_timestamp(start)} --> {_timestamp(end)}", f"{SPRITE}#xywh={x},{y},{plan.width},{plan.height}", ""]
    return "\n".join(lines)


def make(segments: list[Path], size: tuple[int, int], duration_s: float, workdir: Path,
         scratch: Path) -> list[Produced]:
    """The sprite and its WebVTT file in `workdir`, from a rendition's
    MPEG-TS `segments` (in order) of frames of `size`; the joined stream is
    written to `scratch` (never uploaded) and removed. Previews are an
    extra: a video whose ladder was made is not failed for want of them
    (none is returned, and the reason logged)."""
    plan = plan_for(duration_s, size)
    joined = ladder.segments_joined(segments, scratch / "storyboard-source.ts")
    try:
        ffmpeg.run(args(joined, workdir / SPRITE, plan), duration_s=duration_s)
    except MediaError as exc:
        log.warning("no storyboard: %s: %s", exc.code, exc)
    finally:
        joined.unlink(missing_ok=True)
    if not (workdir / SPRITE).is_file() or not (workdir / SPRITE).stat().st_size:
        (workdir / SPRITE).unlink(missing_ok=True)
        return []
    (workdir / VTT).write_text(vtt(plan, duration_s))
    sprite = {"width": plan.columns * plan.width, "height": plan.rows * plan.height, **plan.as_json()}
    return [Produced("storyboard", SPRITE, "image/jpeg", sprite),
            Produced("storyboard_vtt", VTT, VTT_TYPE, {**plan.as_json(), "sprite": SPRITE})]
