"""Decide what a file is from its content, never from its name or the
client's Content-Type.

Order matters for safety: before any demuxer sees the file we refuse text
files (an HLS playlist or an ffconcat list renamed to `.mp4` would make a
demuxer open other files), then we let Pillow and PDF magic claim images and
documents, and only then open it with libavformat (PyAV) restricted to the
local file, and accept only an allow-list of containers.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import av
from PIL import Image, UnidentifiedImageError

from transcoding.errors import MediaError

# libavformat demuxer names we accept (the first name of the demuxer's list).
# Anything else, notably hls, concat, image2 and every network demuxer, is
# refused however it was detected.
ALLOWED_CONTAINERS = frozenset({
    "mov", "matroska", "avi", "mpegts", "mpeg", "flv", "ogg", "wav", "mp3", "flac", "aac", "asf", "m4a",
})

_TEXT_SNIFF_BYTES = 4096


@dataclass
class StreamInfo:
    type: str
    codec: str
    width: int | None = None
    height: int | None = None
    pix_fmt: str | None = None
    channels: int | None = None
    sample_rate: int | None = None


@dataclass
class Probe:
    kind: str  # video | audio | image | pdf
    container: str
    duration_s: float = 0.0
    width: int | None = None
    height: int | None = None
    streams: list[StreamInfo] = field(default_factory=list)

    def as_json(self) -> dict:
        return asdict(self)


def _looks_like_text(head: bytes) -> bool:
    if head.lstrip().startswith((b"#EXTM3U", b"ffconcat", b"#EXT", b"file ", b"<?xml", b"<")):
        return True
    if not head:
        return False
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in head)
    return printable / len(head) > 0.95


def probe_file(path: Path) -> Probe:
    size = os.path.getsize(path)
    if size == 0:
        raise MediaError("empty_file", "The file is empty (0 bytes).")
    with open(path, "rb") as fh:
        head = fh.read(_TEXT_SNIFF_BYTES)
    if head.startswith(b"%PDF-"):
        return Probe(kind="pdf", container="pdf")
    if _looks_like_text(head):
        raise MediaError("not_media", "The file is text, not a video, audio, image or PDF file.")
    image = _probe_image(path)
    if image is not None:
        return image
    return _probe_av(path)


def _probe_image(path: Path) -> Probe | None:
    try:
        with Image.open(path) as img:
            fmt = (img.format or "").lower()
            if fmt == "gif" and getattr(img, "is_animated", False):
                return None  # animated GIF is handled as video (an MP4 loop)
            return Probe(kind="image", container=fmt, width=img.width, height=img.height)
    except Image.DecompressionBombError as exc:
        raise MediaError("image_too_large", f"The image has too many pixels to process safely ({exc}).") from exc
    except (UnidentifiedImageError, OSError):
        return None


def _probe_av(path: Path) -> Probe:
    try:
        container = av.open(str(path), options={"protocol_whitelist": "file"})
    except (av.error.FFmpegError, UnicodeDecodeError) as exc:
        raise MediaError("not_media", "The file is not a video, audio, image or PDF file we can read.") from exc
    with container:
        name = container.format.name.split(",")[0]
        if name not in ALLOWED_CONTAINERS:
            raise MediaError("unsupported_container", f"Files in the {name!r} format are not accepted.")
        streams: list[StreamInfo] = []
        video = next(iter(container.streams.video), None)
        for s in container.streams:
            ctx = s.codec_context
            if s.type == "video":
                streams.append(StreamInfo("video", ctx.name, ctx.width, ctx.height, ctx.format.name if ctx.format else None))
            elif s.type == "audio":
                streams.append(StreamInfo("audio", ctx.name, channels=ctx.channels, sample_rate=ctx.sample_rate))
        duration = float(container.duration / av.time_base) if container.duration else 0.0
        if video is not None and video.codec_context.width:
            return Probe("video", name, duration, video.codec_context.width, video.codec_context.height, streams=streams)
        if any(s.type == "audio" for s in streams):
            return Probe("audio", name, duration, streams=streams)
    raise MediaError("no_media_streams", "The file has no video or audio stream.")
