"""The video ladder: which renditions a source gets, and the single ffmpeg
command that makes all of them, the MP4 fallback and the poster.

One run, one decode: the source is decoded once, normalised once
(deinterlace, HDR tone-map, constant frame rate) and `split` into one scaled
branch per rendition, one for the MP4 and one for the poster. Running one
ffmpeg per rendition decodes and normalises the source N times instead; see
bench/media.py for the measured difference.

Sizes are computed here, in Python, from the probe's display size (rotation
applied, square pixels), so the filter scales to exact even dimensions, sets
square pixels, and the recorded outputs know their size without a re-probe.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from transcoding import aac, ffmpeg
from transcoding.probe import MAX_OUTPUT_FPS, Probe

# Rungs by the frame's short side (portrait video gets 1080x1920 at "1080p"),
# each with a video bitrate ceiling in kbit/s (Apple's HLS authoring
# guidelines, rounded). Renditions go up to, never above, the source.
RUNGS = ((240, 400), (360, 800), (480, 1400), (720, 2800), (1080, 5000))
# The progressive fallback is for players without HLS; 720p keeps it to one
# more encode of modest cost rather than a second full-resolution one.
MP4_MAX_RUNG = 720
FULL_HD_PIXELS = 1920 * 1080
HLS_PLAYLIST_TYPE = "application/vnd.apple.mpegurl"
# The poster is taken this far in (or half-way through shorter clips): the
# first frame is often black.
POSTER_AT_S = 1.0
X264 = ["-c:v", "libx264", "-preset", "veryfast", "-profile:v", "high", "-crf", "23"]
# The first segment of a video is this long, the others FAIRLANE_HLS_SEGMENT_S:
# a player needs a whole segment before its first frame, and every
# rendition's first segment is written once that much of the video is
# encoded (the ladder's encoders run in step), so the video is playable
# after one second of it is encoded instead of four. It costs one keyframe
# more per video (docs/architecture.md, "Playable in seconds").
HEAD_SEGMENT_S = 1.0


@dataclass(frozen=True)
class Rendition:
    name: str
    width: int
    height: int
    max_kbps: int

    def as_json(self) -> dict:
        return {"name": self.name, "width": self.width, "height": self.height, "max_kbps": self.max_kbps}


def _even(value: float) -> int:
    return max(2, 2 * round(value / 2))


def fit_within(display: tuple[int, int], short_side: int) -> tuple[int, int]:
    """Fit in a 16:9 box whose short side is `short_side`, oriented like the
    source; never upscale."""
    width, height = display
    long_side = short_side * 16 / 9
    box = (long_side, short_side) if width >= height else (short_side, long_side)
    scale = min(box[0] / width, box[1] / height, 1.0)
    return _even(width * scale), _even(height * scale)


def renditions_for(probe: Probe) -> list[Rendition]:
    display = probe.display_size
    short = min(display)
    rungs = [(side, kbps) for side, kbps in RUNGS if side <= short]
    if not rungs:  # smaller than the smallest rung: one rendition at source size
        rungs = [(short - short % 2, RUNGS[0][1])]
    return [Rendition(f"{side}p", *fit_within(display, side), kbps) for side, kbps in rungs]


def mp4_rendition(renditions: list[Rendition]) -> Rendition:
    fitting = [r for r in renditions if int(r.name[:-1]) <= MP4_MAX_RUNG]
    return (fitting or renditions[:1])[-1]


def output_fps(probe: Probe) -> float:
    """Constant output rate: the source's average, capped; VFR phone video
    gets its average rate, so motion speed and audio sync are kept."""
    return round(min(probe.frame_rate, MAX_OUTPUT_FPS), 3)


def normalise(probe: Probe, fps: float) -> list[str]:
    """Filters applied once, before the split. Rotation needs none: ffmpeg
    autorotates decoded frames from the display matrix."""
    chain = []
    if probe.interlaced:
        chain.append("bwdif=mode=send_frame:deint=interlaced")
    if probe.hdr_transfer:
        # PQ/HLG BT.2020 -> linear light -> tone-mapped -> BT.709 SDR.
        chain += [
            f"zscale=tin={probe.hdr_transfer}:pin=bt2020:min=bt2020nc:t=linear:npl=100",
            "format=gbrpf32le", "zscale=p=bt709", "tonemap=tonemap=hable:desat=0",
            "zscale=t=bt709:m=bt709:r=tv",
        ]
    chain.append(f"fps={fps}")
    return chain


def poster_frame_index(probe: Probe, fps: float) -> int:
    return int(min(POSTER_AT_S, probe.duration_s / 2) * fps)


def scaled(size: tuple[int, int]) -> str:
    # Exact even size, square pixels, limited range 8-bit 4:2:0: what every browser decodes.
    return f"scale={size[0]}:{size[1]}:flags=bicubic:out_range=tv,setsar=1,format=yuv420p"


@dataclass
class LadderPlan:
    renditions: list[Rendition]
    mp4: Rendition
    fps: float
    args: list[str]
    sound: aac.Aac | None  # the AAC of every rendition and the MP4 (transcoding/aac.py); None: no sound

    @property
    def has_audio(self) -> bool:
        return self.sound is not None


def plan(src: Path, workdir: Path, probe: Probe, *, threads: int) -> LadderPlan:
    """The whole ffmpeg argument list (after `ffmpeg`) for HLS + MP4 + poster."""
    renditions = renditions_for(probe)
    mp4 = mp4_rendition(renditions)
    fps = output_fps(probe)
    has_audio = probe.audio_index is not None
    sound = aac.for_source(probe, stereo_max_kbps=aac.VIDEO_STEREO_MAX_KBPS) if has_audio else None
    t = str(threads)
    args = ["-y", "-threads", t, *ffmpeg.input_args(src, probe.container),
            "-filter_complex", _graph(probe, renditions, mp4, fps, sound), "-filter_complex_threads", t]
    audio_codec = sound.args() if sound else []
    args += _hls_outputs(workdir / "hls", renditions, fps, has_audio, [*audio_codec, "-threads", t])
    # Progressive fallback, moov atom first so playback starts before the download ends.
    args += ["-map", "[vmp4]"] + (["-map", f"[a{len(renditions)}]"] if has_audio else [])
    args += [*X264, "-maxrate", f"{mp4.max_kbps}k", "-bufsize", f"{2 * mp4.max_kbps}k", "-threads", t,
             *audio_codec, *ffmpeg.NO_METADATA, "-movflags", "+faststart", str(workdir / "video.mp4")]
    args += ["-map", "[vposter]", "-frames:v", "1", "-c:v", "mjpeg", "-q:v", "3", "-update", "1",
             str(workdir / "poster.jpg")]
    return LadderPlan(renditions, mp4, fps, args, sound)


def _graph(probe: Probe, renditions: list[Rendition], mp4: Rendition, fps: float, sound: aac.Aac | None) -> str:
    """Decode once, normalise once, split: [v<i>] per rendition, [vmp4],
    [vposter], and [a<i>] audio copies (one per rendition, one for the MP4)."""
    n = len(renditions)
    graph = [f"[0:v:0]{','.join(normalise(probe, fps))},split={n + 2}" + "".join(f"[s{i}]" for i in range(n + 2))]
    graph += [f"[s{i}]{scaled((r.width, r.height))}[v{i}]" for i, r in enumerate(renditions)]
    graph.append(f"[s{n}]{scaled((mp4.width, mp4.height))}[vmp4]")
    graph.append(f"[s{n + 1}]select='gte(n\\,{poster_frame_index(probe, fps)})',"
                 f"scale={mp4.width}:{mp4.height},setsar=1[vposter]")
    if sound is not None:
        # async=1 stretches or pads audio to its timestamps, so gaps in the
        # source do not drift the sound away from the picture.
        graph.append(f"[0:a:{probe.audio_index}]aresample={sound.sample_rate}:async=1,asplit={n + 1}"
                     + "".join(f"[a{i}]" for i in range(n + 1)))
    return ";".join(graph)


def segment_s() -> int:
    return settings.FAIRLANE_HLS_SEGMENT_S


def rendition_maps(renditions: list[Rendition], has_audio: bool) -> list[str]:
    """Each rendition's video (and its own copy of the audio) with its bitrate ceiling."""
    args = []
    for i, r in enumerate(renditions):
        args += ["-map", f"[v{i}]"] + (["-map", f"[a{i}]"] if has_audio else [])
        # -b:v is not used by CRF; it gives the muxer a BANDWIDTH for clips too short to measure.
        args += [f"-b:v:{i}", f"{r.max_kbps}k", f"-maxrate:v:{i}", f"{r.max_kbps}k",
                 f"-bufsize:v:{i}", f"{2 * r.max_kbps}k"]
    return args


def head_s(segment_duration_s: float) -> float:
    """The first segment's length when it is shorter than the others (0: it is not)."""
    return HEAD_SEGMENT_S if HEAD_SEGMENT_S < segment_duration_s - 1e-6 else 0.0


def video_encoder(fps: float, segment_duration_s: float, *, head: float = 0.0) -> list[str]:
    """x264 with a keyframe at every segment start, so each segment plays on
    its own; the same for a single pass and for every chunk of one. With a
    `head`, the first segment ends there and the next at one segment's
    length, then every segment's: keyframes at 0, head, s, 2s, ..."""
    gop = str(max(1, round(fps * segment_duration_s)))
    at = (f"if(lt(n_forced,2),n_forced*{head:g},(n_forced-1)*{segment_duration_s:g})" if head
          else f"n_forced*{segment_duration_s:g}")
    return [*X264, "-g", gop, "-keyint_min", gop, "-sc_threshold", "0", "-force_key_frames", f"expr:gte(t,{at})"]


def hls_muxer(hls: Path, renditions: list[Rendition], has_audio: bool, *, segment_duration_s: float,
              head: float = 0.0, segment_name: str = "seg_%03d.ts", master: bool = True) -> list[str]:
    """One HLS muxer for every rendition (var_stream_map), MPEG-TS segments,
    cut at the encoder's keyframes (with a `head`, at every one: the muxer
    cuts at the first keyframe past hls_time times the segments so far).
    Written as they are finished, for the attempt's streamer
    (transcoding/live.py): each segment under a temporary name until it is
    whole, each playlist an EVENT playlist replaced after every segment;
    playlist_vod makes the finished ones VOD."""
    stream_map = " ".join(f"v:{i}" + (f",a:{i}" if has_audio else "") + f",name:{r.name}"
                          for i, r in enumerate(renditions))
    return ["-f", "hls", "-hls_time", f"{head or segment_duration_s:g}", *LIVE_PLAYLISTS,
            "-hls_segment_type", "mpegts", "-hls_segment_filename", str(hls / "%v" / segment_name),
            *(["-master_pl_name", "master.m3u8"] if master else []),
            "-var_stream_map", stream_map, str(hls / "%v" / "index.m3u8")]


# The HLS muxer's options for playlists that grow while it writes (see hls_muxer).
LIVE_PLAYLISTS = ["-hls_playlist_type", "event", "-hls_flags", "independent_segments+temp_file"]


def playlist_vod(playlist: Path) -> None:
    """A finished EVENT playlist (it ends with EXT-X-ENDLIST) made VOD: what
    the ladder publishes."""
    playlist.write_text(playlist.read_text().replace("#EXT-X-PLAYLIST-TYPE:EVENT", "#EXT-X-PLAYLIST-TYPE:VOD"))


def _hls_outputs(hls: Path, renditions: list[Rendition], fps: float, has_audio: bool, extra: list[str]) -> list[str]:
    """Every rendition (with its own copy of the audio) in one HLS muxer."""
    head = head_s(segment_s())
    return [*rendition_maps(renditions, has_audio), *video_encoder(fps, segment_s(), head=head), *extra,
            *ffmpeg.NO_METADATA, *hls_muxer(hls, renditions, has_audio, segment_duration_s=segment_s(), head=head)]


_EXTINF = re.compile(r"^#EXTINF:([0-9.]+),")


def playlist_entries(playlist: Path) -> list[tuple[float, str]]:
    """(duration, segment URI) of each segment of a media playlist."""
    entries, duration = [], None
    for line in playlist.read_text().splitlines():
        if (m := _EXTINF.match(line)) is not None:
            duration = float(m.group(1))
        elif line and not line.startswith("#") and duration is not None:
            entries.append((duration, line))
            duration = None
    return entries


def playlist_segments(playlist: Path) -> list[Path]:
    """The segment files of a local media playlist, in playing order (not
    by name: seg_999.ts sorts after seg_1000.ts)."""
    return [playlist.parent / uri for _, uri in playlist_entries(playlist)]


def segments_joined(segments: list[Path], to: Path) -> Path:
    """MPEG-TS is a stream of packets: segments in order, byte for byte, are one file."""
    with open(to, "wb") as out:
        out.writelines(path.read_bytes() for path in segments)
    return to


def master_playlist_ensure(hls_dir: Path, renditions: list[Rendition], duration_s: float, audio_kbps: int) -> None:
    """ffmpeg writes no variant into the master playlist when a clip is too
    short for it to know a bitrate (under about a third of a second). Then we
    write it from what was produced: peak and average segment bitrates
    measured from the files, sizes from the plan."""
    master = hls_dir / "master.m3u8"
    if master.is_file() and master.read_text().count("#EXT-X-STREAM-INF:") == len(renditions):
        return
    lines = ["#EXTM3U", "#EXT-X-VERSION:6", "#EXT-X-INDEPENDENT-SEGMENTS"]
    for r in renditions:
        total = sum(p.stat().st_size for p in (hls_dir / r.name).glob("*.ts"))
        average = max(1, round(total * 8 / max(duration_s, 0.04)))
        peak = max(average, (r.max_kbps + audio_kbps) * 1000)
        lines += [f"#EXT-X-STREAM-INF:BANDWIDTH={peak},AVERAGE-BANDWIDTH={average},"
                  f"RESOLUTION={r.width}x{r.height}", f"{r.name}/index.m3u8"]
    master.write_text("\n".join(lines) + "\n")


def master_playlist_start_mid_ladder(hls_dir: Path) -> None:
    """List a mid-ladder rendition first in the master playlist, the rest
    after it in ladder order. Players (native HLS in Safari and Chromium,
    hls.js without a start level) start with the first variant listed
    (Apple's HLS authoring spec: "the first entry is played first"), so a
    ladder listed lowest-first plays its first segments at 240p before
    switching up. The middle rung (rounded up: 360p of 240/360/480, 480p of
    four or five) looks fine on most screens and starts fast on slow links;
    the player moves from there once it has measured the connection."""
    master = hls_dir / "master.m3u8"
    lines = master.read_text().splitlines()
    head: list[str] = []
    variants: list[list[str]] = []  # each: its tags, ending with its URI
    pending: list[str] = []
    for line in lines:
        if variants or pending or line.startswith("#EXT-X-STREAM-INF:"):
            pending.append(line)
            if line and not line.startswith("#"):
                variants.append(pending)
                pending = []
        else:
            head.append(line)
    if len(variants) < 2:
        return
    first = variants[len(variants) // 2]
    ordered = [first, *(v for v in variants if v is not first)]
    master.write_text("\n".join([*head, *(line for v in ordered for line in v), *pending]) + "\n")
