"""Decide what a file is from its content, never from its name or the
client's Content-Type.

Order matters for safety: before any demuxer sees the file we refuse text
files (an HLS playlist or an ffconcat list renamed to `.mp4` would make a
demuxer open other files), then we let PDF magic and Pillow (allowed
formats only) claim documents and images, and only then open it with
libavformat (PyAV) restricted to the local file, and accept only an
allow-list of containers and codecs. The demuxer name the probe found is
what ffmpeg is later forced to use (`-f`), so ffmpeg cannot re-detect the
file as something else.

Only the chosen video and audio streams are ever decoded or mapped; subtitle,
attachment and data streams (timecode and GPS tracks from cameras, fonts and
subtitles in MKV) are left alone rather than refused, since phones and
editors write them into ordinary files. A QuickTime reference movie, whose
samples live in other files, is refused (`external_reference`): the demuxer
is never allowed to open them (DEMUXER_OPTIONS), so it could not be
processed as meant.

The size and duration limits are checked from the header, before the packet
scan and before any frame is decoded, so a crafted header cannot make the
probe itself read hours of packets or decode a gigapixel frame.

For audio and video the probe also reads every packet once (no decoding: a
few seconds for hours of media) to catch truncated files, and timestamps
that claim more than the packets hold, before spending CPU on them, and
decodes the first video frame for what only frames carry: display
rotation, interlacing and colour transfer.

All of it runs in a decoding child with a memory budget
(transcoding/sandbox.py), never in the worker process.
"""
from __future__ import annotations

import heapq
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import cache
from pathlib import Path

import av
import pillow_heif
from django.conf import settings
from PIL import Image, UnidentifiedImageError

from transcoding import sandbox
from transcoding.errors import MediaError, decoder_failure, reason

pillow_heif.register_heif_opener()  # HEIC/HEIF photos from phones open in Pillow

# Pillow plugins we let open user files: what cameras, phones, scanners and
# the web produce (README, "What comes out"). Pillow would otherwise try
# each of its 40-odd formats, among them EPS (PostScript, a program, run by
# Ghostscript when installed) and decoders nobody uploads on purpose. JPEG
# includes MPO (multi-picture JPEGs from phones: same opener); TIFF is for
# scans; HEIF is pillow_heif's (HEIC); AVIF is Pillow's own (libavif), and
# libavformat would otherwise read it as a one-frame AV1 video. Anything
# else is left to libavformat, whose own allow-list refuses it.
ALLOWED_IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "TIFF", "HEIF", "AVIF")

# libavformat demuxer names we accept (the first name of the demuxer's list).
# Anything else, notably hls, concat, image2, tee and every network demuxer,
# is refused however it was detected.
ALLOWED_CONTAINERS = frozenset({
    "mov", "matroska", "avi", "mpegts", "mpeg", "flv", "ogg", "wav", "mp3", "flac", "aac", "asf", "gif",
})
# Decoders we let near user files: what cameras, phones, editors and browsers
# produce. Exotic decoders are where crafted files find bugs.
ALLOWED_VIDEO_CODECS = frozenset({
    "h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mpeg2video", "mpeg1video", "mjpeg", "prores", "dnxhd",
    "theora", "wmv1", "wmv2", "wmv3", "vc1", "h263", "msmpeg4v2", "msmpeg4v3", "ffv1", "dvvideo", "gif", "png",
    "qtrle", "rawvideo",
})
ALLOWED_AUDIO_CODECS = frozenset({
    "aac", "mp3", "mp2", "ac3", "eac3", "opus", "vorbis", "flac", "alac", "wmav1", "wmav2", "amr_nb", "amr_wb",
    "dts",
})
ALLOWED_AUDIO_CODEC_PREFIXES = ("pcm_",)
# Demuxer options pinned to their safe values instead of trusting defaults:
# mov follows a reference movie's data references into files next to it
# (enable_drefs) or anywhere (use_absolute_path) when these are on.
DEMUXER_OPTIONS = {"mov": {"enable_drefs": "0", "use_absolute_path": "0"}}
# Reading a moov box to look for external data references: far above any
# real one (hours of video need a few MB of sample tables).
MOV_HEADER_MAX_BYTES = 64 * 1024 * 1024
# Frame transfer characteristics that mean HDR (PQ and HLG), by libavutil's
# enum AVColorTransferCharacteristic value.
HDR_TRANSFERS = {16: "smpte2084", 18: "arib-std-b67"}
# A file whose packets end before this share of its declared duration is
# truncated (cut-off downloads keep their header and lose their tail).
TRUNCATED_BELOW = 0.9
# Timestamps can claim what the packets do not hold: a few KB with frames at
# 0 s and 14,000 s pass the checks above, and the ladder's constant frame
# rate then fills the gap with hours of repeated frames (the audio
# resampler does the same with silence). The work must follow what the
# file holds, so each packet backs at most a short stretch of the timeline:
# a video frame MAX_FRAME_REPEAT frame intervals (a phone's variable-rate
# clip in low light stretches to 2 or 3; a paused recording longer), an
# audio packet MAX_AUDIO_PACKET_S (AAC packets are 21 ms; a PCM block of
# 4096 samples at 8 kHz is half a second). The interval is the source's
# average rate's, but never longer than 1 / MIN_HOLD_FPS: mov's index
# gives a crafted file's average rate from its few frames over the length
# they claim (3 frames over 600 s: 0.005 fps, and each frame would back
# 1,600 s); a slideshow of one picture every 10 s is still 80 % backed.
MAX_FRAME_REPEAT = 8
MIN_HOLD_FPS = 1.0
MAX_AUDIO_PACKET_S = 1.0
# The packets of at least one stream must back this share of the media's
# length (a still picture over an hour of sound is backed by the sound),
# beyond a little that may be unbacked anyway (one frame held for a few
# seconds). So a file's work is at most about twice what it holds:
# everything beyond is refused before any decoding.
MIN_BACKED_SHARE = 0.5
UNBACKED_SLACK_S = 10.0
# A source rate to believe: above it (or none), DEFAULT_FPS is assumed.
MAX_PLAUSIBLE_FPS = 1000.0
DEFAULT_FPS = 30.0
# The ladder's output rate never exceeds this (transcoding/ladder.py); frame
# repeats are counted at the rate it will output.
MAX_OUTPUT_FPS = 60.0

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
    default: bool = False


@dataclass
class Probe:
    kind: str  # video | audio | image | pdf
    container: str
    duration_s: float = 0.0
    width: int | None = None  # coded size, before rotation and aspect correction
    height: int | None = None
    streams: list[StreamInfo] = field(default_factory=list)
    rotation: int = 0  # degrees, from the display matrix
    sample_aspect: str = "1:1"
    fps: float = 0.0  # average frame rate
    vfr: bool = False
    interlaced: bool = False
    hdr_transfer: str | None = None  # smpte2084 (PQ) or arib-std-b67 (HLG)
    frames: int = 0
    audio_index: int | None = None  # which audio stream (among audio streams) to use
    # That stream's bitrate, measured from its packets (headers often give
    # none, or a nominal one): what the AAC made from it may not exceed.
    audio_kbps: float | None = None
    animated: bool = False  # an animated GIF: an image that becomes an MP4 loop

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Probe:
        """The probe `as_json` gave; TypeError for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("streams"), list):
            raise TypeError("not a probe")
        return cls(**{**data, "streams": [StreamInfo(**stream) for stream in data["streams"]]})

    @property
    def frame_rate(self) -> float:
        """The source's average frame rate, or DEFAULT_FPS when it gives none
        worth believing."""
        return self.fps if 0 < self.fps <= MAX_PLAUSIBLE_FPS else DEFAULT_FPS

    @property
    def audio_stream(self) -> StreamInfo | None:
        """The audio stream in use (channels, sample rate), if any."""
        audios = [s for s in self.streams if s.type == "audio"]
        return audios[self.audio_index] if self.audio_index is not None and self.audio_index < len(audios) else None

    @property
    def display_size(self) -> tuple[int, int]:
        """What a viewer sees: square pixels, rotation applied."""
        sar = Fraction(self.sample_aspect.replace(":", "/")) if self.sample_aspect != "0:1" else Fraction(1)
        width, height = round((self.width or 0) * (sar or 1)), self.height or 0
        return (height, width) if self.rotation % 180 == 90 else (width, height)


def _looks_like_text(head: bytes) -> bool:
    if head.lstrip().startswith((b"#EXTM3U", b"ffconcat", b"#EXT", b"file ", b"<?xml", b"<")):
        return True
    if not head:
        return False
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in head)
    return printable / len(head) > 0.95


@dataclass(frozen=True)
class Limits:
    """The configured limits, handed to the decoding child: it does not read
    Django's settings (what a deploy or a test overrides lives in the worker)."""

    max_pixels: int
    max_duration_s: float


def configured_limits() -> Limits:
    return Limits(max_pixels=settings.FAIRLANE_MAX_PIXELS, max_duration_s=settings.FAIRLANE_MAX_DURATION_S)


# Wall time for the probe's child: reading every packet of a 2 GiB upload
# takes seconds from a local disk; this is for a slow disk and a busy machine.
PROBE_TIMEOUT_S = 600.0


def probe_file(path: Path) -> Probe:
    """What the file is, decided in a decoding child (transcoding/sandbox.py):
    Pillow's and libavformat's parsers, the packet scan and the first-frame
    decode run there, within FAIRLANE_DECODE_MAX_BYTES of memory."""
    return sandbox.run(_probe, path, configured_limits(), timeout_s=PROBE_TIMEOUT_S,
                       memory_bytes=settings.FAIRLANE_DECODE_MAX_BYTES)


def probe_header(path: Path) -> Probe | None:
    """probe_file without the packet scan, for a QuickTime/MP4 file whose
    moov box and first megabytes are in place while the rest is still being
    fetched (transcoding/streamed.py): its packets' times and sizes are in
    the moov's sample tables, so the frame count and the sound's bitrate
    come from there, and nothing past the head is read. None when the file
    is not one libavformat reads as mov (its header alone then says too
    little). The scan's checks (truncated files, timestamps the packets do
    not back) are then the parts' own: every other part of a split video
    has the whole file's probe before it encodes (once per host:
    transcoding/scan_notes.py)."""
    return sandbox.run(_probe, path, configured_limits(), True, timeout_s=PROBE_TIMEOUT_S,
                       memory_bytes=settings.FAIRLANE_DECODE_MAX_BYTES)


def _probe(path: Path, limits: Limits, header_only: bool = False) -> Probe | None:
    size = os.path.getsize(path)
    if size == 0:
        raise MediaError("empty_file", "The file is empty (0 bytes).")
    with open(path, "rb") as fh:
        head = fh.read(_TEXT_SNIFF_BYTES)
    if head.startswith(b"%PDF-"):
        return Probe(kind="pdf", container="pdf")
    if _looks_like_text(head):
        raise MediaError("not_media", "The file is text, not a video, audio, image or PDF file.")
    image = _probe_image(path, limits)
    if image is not None:
        return image
    return _probe_av(path, limits, header_only=header_only)


def _probe_image(path: Path, limits: Limits) -> Probe | None:
    # Pillow warns above its limit and refuses above twice it; ours decides
    # instead (a legal 48 MP photo is no bomb, and raising our limit must work).
    Image.MAX_IMAGE_PIXELS = limits.max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # limits_check below decides
            img = Image.open(path, formats=ALLOWED_IMAGE_FORMATS)
        with img:
            fmt = (img.format or "").lower()
            if fmt == "gif" and getattr(img, "is_animated", False):
                return None  # read as video by libavformat, delivered as an MP4 loop
            probe = Probe(kind="image", container=fmt, width=img.width, height=img.height)
    except Image.DecompressionBombError as exc:
        raise MediaError("too_large", f"Pictures above {limits.max_pixels} pixels are not accepted.") from exc
    except (UnidentifiedImageError, OSError, ValueError):
        return None
    except RuntimeError as exc:
        # Pillow tries the next plugin on the errors above; the AVIF and HEIF
        # decoders raise this once the file is theirs and cannot be read.
        raise decoder_failure("decode_failed", f"The image could not be decoded: {reason(exc)}.", exc) from exc
    limits_check(probe, limits)  # from the header: nothing is decoded yet
    return probe


def open_options() -> dict[str, str]:
    """libavformat options for every open of a user file: the local file
    only, and only allowed demuxers, so a playlist or concat list that got
    past the text check is refused before its demuxer reads anything; and
    only allowed decoders, because opening a file opens a decoder for every
    stream to learn its parameters, subtitle and data streams included,
    whose codecs the probe never checks."""
    return {"protocol_whitelist": "file", "format_whitelist": ",".join(sorted(ALLOWED_CONTAINERS)),
            "codec_whitelist": _allowed_decoders()}


@cache
def _allowed_decoders() -> str:
    """libavcodec's decoder names (h264, mp3float, libdav1d, ...) for the
    allowed codecs: a whitelist names decoders, not codecs."""
    names = set()
    for name in av.codecs_available:
        try:
            codec = av.Codec(name, "r")
        except av.codec.codec.UnknownCodecError:  # an encoder only
            continue
        if codec.type in ("video", "audio") and _codec_allowed(codec.type, codec.canonical_name):
            names.add(name)
    return ",".join(sorted(names))


def _probe_options() -> dict[str, str]:
    """The probe does not know the demuxer before it opens the file, so it
    pins every demuxer's options (libavformat leaves unknown ones unused)."""
    options = open_options()
    for pinned in DEMUXER_OPTIONS.values():
        options |= pinned
    return options


def limits_check(probe: Probe, limits: Limits) -> None:
    """Refuse media above the configured duration and pixel limits. The
    pixel limit is what stops decompression bombs (a few KB of PNG or H.264
    that decode to gigabytes), so it must run before anything is decoded."""
    if probe.duration_s > limits.max_duration_s:
        raise MediaError(
            "too_long", f"Media longer than {int(limits.max_duration_s)} s is not accepted "
            f"(this one is {int(probe.duration_s)} s).",
        )
    if (probe.width or 0) * (probe.height or 0) > limits.max_pixels:
        raise MediaError("too_large", f"Pictures above {limits.max_pixels} pixels are not accepted "
                                      f"(this one is {probe.width}x{probe.height}).")


def box_header(head: bytes, available: int) -> tuple[bytes, int, int]:
    """(type, header size, box size) of the ISO BMFF box starting `head`;
    a size of 0 means "to the end", 1 a 64-bit size after the type."""
    size, kind, header = int.from_bytes(head[:4], "big"), head[4:8], 8
    if size == 1 and len(head) >= 16:
        size, header = int.from_bytes(head[8:16], "big"), 16
    elif size == 0:
        size = available
    return kind, header, size


def _mov_boxes(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, body) of each box in `data`, up to a malformed one."""
    boxes, offset = [], 0
    while offset + 8 <= len(data):
        kind, header, size = box_header(data[offset:offset + 16], len(data) - offset)
        if size < header:
            break
        boxes.append((kind, data[offset + header:offset + size]))
        offset += size
    return boxes


def top_boxes(read: Callable[[int, int], bytes], size: int,
              limit: int | None = None) -> Iterator[tuple[int, bytes, int, int]]:
    """(offset, type, header size, box size) of each top-level box of a file
    of `size` bytes read with `read(offset, length)`, up to a malformed one
    (or `limit` boxes): the one walk of both the probe's moov lookup (a local
    file) and the streamed start's (ranged reads of the store). A box may
    claim more than the file has; it is the last one yielded."""
    offset, count = 0, 0
    while offset + 8 <= size and (limit is None or count < limit):
        head = read(offset, min(16, size - offset))
        if len(head) < 8:
            return
        kind, header, box = box_header(head, size - offset)
        if box < header:
            return
        yield offset, kind, header, box
        offset, count = offset + box, count + 1


def _mov_header(path: Path) -> bytes:
    """The body of the first top-level moov box, seeking over the others
    (mdat, gigabytes, usually comes first)."""
    with open(path, "rb") as fh:
        def read(offset: int, length: int) -> bytes:
            return os.pread(fh.fileno(), length, offset)

        for offset, kind, header, size in top_boxes(read, os.fstat(fh.fileno()).st_size):
            if kind == b"moov":
                return read(offset + header, min(size, MOV_HEADER_MAX_BYTES) - header)
    return b""


# The boxes between moov and a track's data reference table.
_DREF_PATH = (b"trak", b"mdia", b"minf", b"dinf", b"dref")


def mov_external_references(path: Path) -> int:
    """How many track data references point outside the file: entries
    without the self-contained flag that name something (a Mac alias record,
    a URL), as QuickTime editors write for "reference movies"."""
    bodies = [_mov_header(path)]
    for kind in _DREF_PATH:
        bodies = [body for parent in bodies for k, body in _mov_boxes(parent) if k == kind]
    # A dref is a full box (version and flags) with an entry count, then its entries.
    entries = [entry for dref in bodies for entry in _mov_boxes(dref[8:])]
    return sum(1 for _, body in entries if not int.from_bytes(body[1:4], "big") & 1 and len(body) > 4)


def _codec_allowed(stream_type: str, codec: str) -> bool:
    if stream_type == "video":
        return codec in ALLOWED_VIDEO_CODECS
    return codec in ALLOWED_AUDIO_CODECS or codec.startswith(ALLOWED_AUDIO_CODEC_PREFIXES)


def _probe_av(path: Path, limits: Limits, *, header_only: bool = False) -> Probe | None:
    try:
        container = av.open(str(path), options=_probe_options())
    except av.error.ArgumentError as exc:  # EINVAL: libavformat's "format not on whitelist"
        raise MediaError("unsupported_container", "Files in this format are not accepted.") from exc
    except (av.error.FFmpegError, UnicodeDecodeError) as exc:
        raise decoder_failure("not_media", "The file is not a video, audio, image or PDF file we can read.",
                              exc) from exc
    with container:
        name = container.format.name.split(",")[0]
        if name not in ALLOWED_CONTAINERS:
            raise MediaError("unsupported_container", f"Files in the {name!r} format are not accepted.")
        if name == "mov" and mov_external_references(path):
            raise MediaError("external_reference", "The file is a reference movie: its media is in other files, "
                                                   "which are never opened. Export it self-contained and upload that.")
        # A track in a codec libavcodec does not know at all has no decoder
        # context: not a file we can read, whatever its other tracks hold.
        unknown = next((s for s in (*container.streams.video, *container.streams.audio) if s.codec_context is None),
                       None)
        if unknown is not None:
            raise MediaError("unsupported_codec", f"The file has a {unknown.type} track in a codec that is not "
                                                  f"accepted.")
        # Cover art in music files is a one-picture "video" stream; it is not video.
        videos = [s for s in container.streams.video
                  if s.codec_context.width and not s.disposition & av.stream.Disposition.attached_pic]
        audios = list(container.streams.audio)
        video, audio = (videos[0] if videos else None), _default_audio(audios)
        streams = [_stream_info(s) for s in (*videos, *audios)]
        for s in streams:
            if (s.type == "video" and video is not None) or s.type == "audio":
                if not _codec_allowed(s.type, s.codec):
                    raise MediaError("unsupported_codec", f"The {s.type} codec {s.codec!r} is not accepted.")
        if video is None and audio is None:
            raise MediaError("no_media_streams", "The file has no video or audio stream.")
        declared = float(container.duration / av.time_base) if container.duration else 0.0
        probe = Probe("audio", name, declared, streams=streams,
                      audio_index=audios.index(audio) if audio is not None else None)
        if video is not None:
            _describe_video(probe, video)
        limits_check(probe, limits)  # from the header, before reading packets or decoding
        if header_only:
            if name != "mov":
                return None
            _describe_from_index(probe, video, audio)
        else:
            _check_packets(probe, container, video, audio, declared, limits)
        if video is not None:
            _read_first_frame(probe, path, video.index)
            if name == "gif":
                probe.kind, probe.animated = "image", True
    return probe


def _describe_from_index(probe: Probe, video, audio) -> None:
    """What the packet scan would count, from mov's sample tables (the
    demuxer computes a track's bitrate from its sample sizes)."""
    probe.frames = video.frames if video is not None else 0
    if audio is not None and audio.bit_rate:
        probe.audio_kbps = round(audio.bit_rate / 1000, 1)


def _check_packets(probe: Probe, container, video, audio, declared: float, limits: Limits) -> None:
    """Read every packet once: refuse truncated files and timestamps the
    packets do not back, count frames and the sound's bitrate."""
    # How much of the timeline one packet may back, by stream.
    holds = {s.index: MAX_FRAME_REPEAT / min(max(probe.frame_rate, MIN_HOLD_FPS), MAX_OUTPUT_FPS) if s is video
             else MAX_AUDIO_PACKET_S for s in (video, audio) if s is not None}
    contents = _scan_packets(container, holds, audio=audio)
    probe.frames, played = contents.frames, contents.played_s
    if contents.audio_s > 0:
        probe.audio_kbps = round(contents.audio_bytes * 8 / contents.audio_s / 1000, 1)
    if declared > 1.0 and played < TRUNCATED_BELOW * declared:
        raise MediaError("truncated", f"The file is cut off: it declares {declared:.1f} s but holds "
                                      f"only {played:.1f} s of media.")
    if played - contents.backed_s > max(UNBACKED_SLACK_S, (1 - MIN_BACKED_SHARE) * played):
        raise MediaError("sparse_media", f"The file's timestamps run to {played:.0f} s, but its frames and "
                                         f"sound fill only {contents.backed_s:.1f} s of that; it is damaged "
                                         f"or was made to look longer than it is.")
    # A header may under-declare: the media present is what ffmpeg will
    # decode, so it is what the duration limit and time limits go by.
    probe.duration_s = max(declared, played)
    limits_check(probe, limits)


# A video decoder holds a few decoded frames at once (references, the frame
# being built): fewer than this many 8-bit 4:2:0 frames of the stream's size
# in memory and no valid file of that size could be decoded either.
DECODER_FRAMES = 4


def _default_audio(audios: list) -> av.audio.stream.AudioStream | None:
    """The track a player would pick: the one flagged default, else the first."""
    for s in audios:
        if s.disposition & av.stream.Disposition.default:
            return s
    return audios[0] if audios else None


def _stream_info(s) -> StreamInfo:
    ctx = s.codec_context  # codec.canonical_name: "mp3", not the decoder's "mp3float"
    default = bool(s.disposition & av.stream.Disposition.default)
    if s.type == "video":
        pix_fmt = ctx.format.name if ctx.format else None
        return StreamInfo("video", ctx.codec.canonical_name, ctx.width, ctx.height, pix_fmt, default=default)
    return StreamInfo("audio", ctx.codec.canonical_name, channels=ctx.channels, sample_rate=ctx.sample_rate,
                      default=default)


def _describe_video(probe: Probe, video) -> None:
    ctx = video.codec_context
    probe.kind, probe.width, probe.height = "video", ctx.width, ctx.height
    sar = video.sample_aspect_ratio or ctx.sample_aspect_ratio
    probe.sample_aspect = f"{sar.numerator}:{sar.denominator}" if sar else "1:1"
    avg, base = video.average_rate, video.base_rate
    probe.fps = float(avg or base or 0)
    # libavformat's base rate is the rate that represents every timestamp; a
    # different average means frames are not evenly spaced.
    probe.vfr = bool(avg and base and abs(float(avg) - float(base)) > 0.01 * float(base))


@dataclass
class _Contents:
    """What the packets of the chosen streams hold, by one pass without
    decoding."""

    frames: int = 0  # video packets
    played_s: float = 0.0  # where the media present ends
    backed_s: float = 0.0  # how much of that one stream's packets back (see MAX_FRAME_REPEAT)
    audio_bytes: int = 0  # the audio stream's packets
    audio_s: float = 0.0  # from its first packet to where its last ends


# Packets come in decode order; a B-frame's time is before the frame decoded
# ahead of it. Times are put back in order over this many packets of a
# stream (H.264 reorders at most 16 frames), so that each frame of a
# slideshow encoded with B-frames backs its own gap; a time further back
# than that backs nothing new.
REORDER_PACKETS = 16


def _scan_packets(container, holds: dict[int, float], *, audio=None) -> _Contents:
    """Read every packet of the streams in `holds` once. A stream's packets
    back the time between them up to the stream's hold each, in the order
    of their times (REORDER_PACKETS); a time that goes back further backs
    nothing new. The `audio` stream's packets are also counted, for its
    bitrate."""
    contents = _Contents()
    audio_index = audio.index if audio is not None else None
    audio_first = None
    streams = [container.streams[i] for i in holds]
    start = {s.index: (s.start_time or 0) * s.time_base for s in streams}
    reached = dict.fromkeys(holds, 0.0)
    backed = dict.fromkeys(holds, 0.0)
    pending: dict[int, list[float]] = {index: [] for index in holds}

    def back(index: int, at: float) -> None:
        if at > reached[index]:
            backed[index] += min(at - reached[index], holds[index])
            reached[index] = at

    try:
        for packet in container.demux(streams):
            if packet.pts is None or packet.size == 0:
                continue
            stream, index = packet.stream, packet.stream.index
            if stream.type == "video":
                contents.frames += 1
            at = float(packet.pts * stream.time_base - start[index])
            if len(pending[index]) < REORDER_PACKETS:
                heapq.heappush(pending[index], at)
            else:
                back(index, heapq.heappushpop(pending[index], at))
            stop = float((packet.pts + (packet.duration or 0)) * stream.time_base - start[index])
            contents.played_s = max(contents.played_s, stop)
            if index == audio_index:
                contents.audio_bytes += packet.size
                audio_first = at if audio_first is None else min(audio_first, at)
                contents.audio_s = max(contents.audio_s, stop - audio_first)
    except av.error.FFmpegError as exc:
        raise decoder_failure("truncated", f"The file is damaged or cut off: {reason(exc)}.", exc) from exc
    for index, times in pending.items():
        for at in sorted(times):
            back(index, at)
    contents.backed_s = max(backed.values())
    return contents


def _read_first_frame(probe: Probe, path: Path, stream_index: int) -> None:
    width = height = 0
    try:
        with av.open(str(path), options=_probe_options()) as container:
            ctx = container.streams[stream_index].codec_context
            # One frame: decoding threads would only cost memory and start-up
            # time, and make what fits the budget depend on the host's cores.
            ctx.thread_count = 1
            width, height = ctx.width, ctx.height
            frame = next(container.decode(container.streams[stream_index]), None)
            field_order, stream_trc = ctx.field_order, ctx.color_trc
    except av.error.FFmpegError as exc:
        raise decoder_failure("decode_failed", f"The video could not be decoded: {reason(exc)}.", exc,
                              needs_bytes=width * height * 3 // 2 * DECODER_FRAMES) from exc
    if frame is None:
        raise MediaError("decode_failed", "The video has no decodable frame.")
    probe.rotation = int(round(frame.rotation or 0)) % 360
    # The stream header's field order counts when frames do not say (0 unknown, 1 progressive).
    probe.interlaced = bool(frame.interlaced_frame) or field_order not in (0, 1)
    probe.hdr_transfer = HDR_TRANSFERS.get(frame.color_trc) or HDR_TRANSFERS.get(stream_trc)
