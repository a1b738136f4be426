"""Long videos as chunks: the ffmpeg side (planning, one chunk, the audio,
the finalizer's playlists and MP4). The jobs side is uploads/parts.py.

A video longer than FAIRLANE_CHUNK_THRESHOLD_S is cut into chunks of whole
HLS segments. Every chunk is one ffmpeg run that decodes its stretch of the
source (an accurate input seek: frames before the cut are decoded and
dropped, not output), makes every rendition from it with the ladder's own
filters and encoder settings, and writes that rendition's segments directly,
numbered where the chunk starts and timestamped where it sits in the whole
(`-output_ts_offset`): there is no concatenation step, the finalizer only
writes playlists that list the segments of all chunks in order.

- Boundaries are frames: a segment is `segment_frames` output frames, a
  chunk a whole number of segments, so every rendition is cut at the same
  frames and no frame is output twice or lost at a join (`-frames:v`).
- Keyframes: the same GOP and forced keyframes as the single pass
  (ladder.video_encoder), so every segment of every chunk starts with one.
- Timestamps: every chunk (and the audio) is shifted by the same
  TIMELINE_OFFSET_S on top of where it starts. The shift keeps x264's first
  decoding timestamp (B-frames put it before the first picture) above zero;
  otherwise the muxer would move the first chunk alone by the B-frame delay
  and the join after it would overlap by two frames.
- MPEG-TS continuity counters restart with every ffmpeg run; the finalizer
  renumbers them across the whole rendition (continuity_renumber), so a
  demuxer that checks them sees one stream.
- Audio is encoded once, for the whole file, as its own HLS rendition
  (EXT-X-MEDIA TYPE=AUDIO): AAC cut per chunk would carry an encoder delay
  and a partial frame at every join. The first chunk encodes it, beside
  its own video in a second ffmpeg: a chunked video is playable once its
  first chunk's first segments and its sound's are stored, so the sound
  cannot wait for a job of its own (plans stored before had an audio part).
- The first chunk's first segment is one second (ladder.HEAD_SEGMENT_S),
  so it is playable after one second of video is encoded; the files after
  it are numbered one further on (ChunkPlan.file_number).
"""
from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from django.conf import settings

from transcoding import aac, ffmpeg, ladder, live, storyboard
from transcoding.errors import MediaError
from transcoding.probe import Probe
from transcoding.produced import Produced, kbps

# Seconds added to every chunk's and the audio's timestamps (see above);
# players start from the first timestamp, so the value is invisible.
TIMELINE_OFFSET_S = 1.0
AUDIO_GROUP = "audio"
TS_PACKET = 188
# How much nicer than the first chunk's video the sound's ffmpeg runs when
# both read a source still arriving (transcoding/streamed.py).
STREAMED_SOUND_NICENESS = 10


@dataclass(frozen=True)
class ChunkPlan:
    """How a video is cut, fixed when the parent job splits (stored in its
    media_info) so that every part, on any host, cuts the same way."""

    duration_s: float
    fps: float
    segment_frames: int
    chunks: list[tuple[int, int]]  # (first segment, segments) of each chunk
    renditions: list[dict]
    mp4: str  # the rendition remuxed into the MP4 fallback
    has_audio: bool
    # The sound's AAC (transcoding/aac.py). A plan stored before it followed
    # the source has none of these: the fixed settings of that time.
    audio_kbps: int = aac.VIDEO_STEREO_MAX_KBPS
    audio_channels: int = 2
    audio_sample_rate: int = aac.SAMPLE_RATE
    # The first chunk's short first segment (0: none, as in plans stored
    # before it), and whether the first chunk encodes the sound (else an
    # audio part of its own does, as in plans stored before).
    head_s: float = 0.0
    sound_in_first_chunk: bool = False

    @property
    def sound(self) -> aac.Aac:
        return aac.Aac(kbps=self.audio_kbps, channels=self.audio_channels, sample_rate=self.audio_sample_rate)

    @property
    def segment_duration_s(self) -> float:
        return self.segment_frames / self.fps

    def start_s(self, index: int) -> float:
        return self.chunks[index][0] * self.segment_duration_s

    def file_number(self, index: int) -> int:
        """The number of chunk `index`'s first segment file: its first
        segment's, one further on after the first chunk's split head."""
        return self.chunks[index][0] + (1 if self.head_s and index else 0)

    def segment_files(self) -> int:
        """How many segment files a rendition has in all."""
        return sum(count for _, count in self.chunks) + (1 if self.head_s else 0)

    def chunk_duration_s(self, index: int) -> float:
        count = self.chunks[index][1]
        return min(self.duration_s - self.start_s(index), count * self.segment_duration_s)

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ChunkPlan:
        return cls(**{**data, "chunks": [tuple(c) for c in data["chunks"]]})

    def rendition(self, name: str) -> ladder.Rendition:
        return next(ladder.Rendition(**r) for r in self.renditions if r["name"] == name)


def should_chunk(probe: Probe) -> bool:
    return (settings.FAIRLANE_CHUNKING and probe.kind == "video"
            and probe.duration_s > settings.FAIRLANE_CHUNK_THRESHOLD_S)


def plan_for(probe: Probe) -> ChunkPlan:
    fps = ladder.output_fps(probe)
    segment_frames = max(1, round(fps * ladder.segment_s()))
    segment_duration = segment_frames / fps
    segments = max(1, math.ceil(probe.duration_s / segment_duration - 1e-6))
    per_chunk = max(1, round(settings.FAIRLANE_CHUNK_S / segment_duration))
    renditions = ladder.renditions_for(probe)
    sound = aac.for_source(probe, stereo_max_kbps=aac.VIDEO_STEREO_MAX_KBPS)
    return ChunkPlan(
        duration_s=probe.duration_s, fps=fps, segment_frames=segment_frames,
        chunks=[(first, min(per_chunk, segments - first)) for first in range(0, segments, per_chunk)],
        renditions=[r.as_json() for r in renditions], mp4=ladder.mp4_rendition(renditions).name,
        has_audio=probe.audio_index is not None, audio_kbps=sound.kbps, audio_channels=sound.channels,
        audio_sample_rate=sound.sample_rate, head_s=ladder.head_s(segment_duration),
        sound_in_first_chunk=probe.audio_index is not None)


def chunk_args(src: Path | None, workdir: Path, probe: Probe, plan: ChunkPlan, index: int, *,
               threads: int) -> list[str]:
    """One chunk, every rendition, video only, into workdir/hls/<rendition>/;
    the first chunk also makes the poster."""
    first, count = plan.chunks[index]
    last = index == len(plan.chunks) - 1
    poster = index == 0
    renditions = [ladder.Rendition(**r) for r in plan.renditions]
    n, t = len(renditions), str(threads)
    frames = count * plan.segment_frames
    graph = [f"[0:v:0]{','.join(ladder.normalise(probe, plan.fps))},split={n + poster}"
             + "".join(f"[s{i}]" for i in range(n + poster))]
    graph += [f"[s{i}]{ladder.scaled((r.width, r.height))}[v{i}]" for i, r in enumerate(renditions)]
    if poster:
        mp4 = plan.rendition(plan.mp4)
        graph.append(f"[s{n}]select='gte(n\\,{ladder.poster_frame_index(probe, plan.fps)})',"
                     f"scale={mp4.width}:{mp4.height},setsar=1[vposter]")
    start = plan.start_s(index)
    head = plan.head_s if index == 0 else 0.0
    # Read a little past the chunk's end (the fps filter needs the next frame
    # to place the last one); -frames:v cuts at exactly the chunk's frames.
    window = [] if last else ["-t", f"{(frames + 2) / plan.fps:.6f}"]
    # A piped source (the first chunk of one still arriving) starts at 0 and
    # cannot seek: ffmpeg's seek to 0 after its stream analysis would go back
    # over the megabytes that analysis read, which a pipe cannot give again.
    if src is None and start != 0:
        raise ValueError("only a chunk that starts at 0 can read a piped source")
    seek = [] if src is None else ["-ss", f"{start:.6f}"]
    args = ["-y", "-threads", t, *seek, *window, *ffmpeg.input_args(src, probe.container),
            "-filter_complex", ";".join(graph), "-filter_complex_threads", t,
            *ladder.rendition_maps(renditions, has_audio=False), *([] if last else ["-frames:v", str(frames)]),
            *ladder.video_encoder(plan.fps, plan.segment_duration_s, head=head), "-threads", t, *ffmpeg.NO_METADATA,
            "-output_ts_offset", f"{start + TIMELINE_OFFSET_S:.6f}", "-start_number", str(plan.file_number(index)),
            *ladder.hls_muxer(workdir / "hls", renditions, False, segment_duration_s=plan.segment_duration_s,
                              head=head, segment_name="seg_%05d.ts", master=False)]
    if poster:
        args += ["-map", "[vposter]", "-frames:v", "1", "-c:v", "mjpeg", "-q:v", "3", "-update", "1",
                 str(workdir / "poster.jpg")]
    return args


def audio_args(src: Path | None, workdir: Path, probe: Probe, plan: ChunkPlan, *, threads: int) -> list[str]:
    """The whole file's audio as one HLS rendition in workdir/hls/audio/."""
    return ["-y", "-threads", str(threads), *ffmpeg.input_args(src, probe.container),
            "-map", f"0:a:{probe.audio_index or 0}", "-af", f"aresample={plan.audio_sample_rate}:async=1",
            *plan.sound.args(), *ffmpeg.NO_METADATA,
            "-output_ts_offset", f"{TIMELINE_OFFSET_S:.6f}",
            "-f", "hls", "-hls_time", f"{plan.segment_duration_s:g}", *ladder.LIVE_PLAYLISTS,
            "-hls_segment_type", "mpegts", "-hls_segment_filename", str(workdir / "hls" / AUDIO_GROUP / "seg_%05d.ts"),
            str(workdir / "hls" / AUDIO_GROUP / "index.m3u8")]


def encode_chunk(src: Path | None, workdir: Path, probe: Probe, plan: ChunkPlan, index: int, on_progress, *,
                 sink: live.Sink | None = None, feed=None, sound_feed=None, check=None) -> list[Produced]:
    """One chunk's segments of every rendition, stored as they are written
    when there is a `sink` (transcoding/live.py); the first chunk also
    makes the poster and, in a plan that says so, the whole file's sound
    (a second ffmpeg beside the chunk's: the job is playable once both
    have a segment stored). With `feed` (ffmpeg.run's) instead of `src`,
    the chunk's ffmpeg reads the source from a pipe that `feed` writes, and
    the sound's from one that `sound_feed` writes (transcoding/streamed.py):
    the first chunk of a source still arriving. `check` is called beside
    the progress reports and while the sound runs on: what it raises stops
    both (streamed.encode_scanned)."""
    if check is not None:
        report = on_progress

        def on_progress(pct: int) -> None:
            check()
            report(pct)
    duration = plan.chunk_duration_s(index)
    sound = index == 0 and plan.sound_in_first_chunk and plan.has_audio
    (workdir / "hls" / (AUDIO_GROUP if sound else "")).mkdir(parents=True)  # no muxer makes a folder without %v
    tracks = {"video": [r["name"] for r in plan.renditions], **({"audio": [AUDIO_GROUP]} if sound else {})}
    info = {"renditions": plan.renditions, "audio_kbps": plan.audio_kbps if plan.has_audio else 0,
            "audio_channels": plan.audio_channels, "target_s": math.ceil(plan.segment_duration_s - 1e-3)}
    args = chunk_args(src, workdir, probe, plan, index, threads=settings.FAIRLANE_FFMPEG_THREADS)
    with live.streaming(sink, workdir, tracks, info=info, needs=tuple(tracks) if index == 0 else ()):
        if sound:
            _run_beside_sound(args, audio_args(src, workdir, probe, plan, threads=settings.FAIRLANE_FFMPEG_THREADS),
                              duration_s=duration, sound_s=probe.duration_s, on_progress=on_progress, sink=sink,
                              feed=feed, sound_feed=sound_feed or feed, check=check)
        else:
            ffmpeg.run(args, duration_s=duration, on_progress=on_progress, on_tick=sink and sink.flush, feed=feed)
    first, count = plan.chunks[index]
    for r in plan.renditions:
        made = sorted((workdir / "hls" / r["name"]).glob("seg_*.ts"))
        if not made or made[0].name != f"seg_{plan.file_number(index):05d}.ts":
            raise MediaError("decode_failed", f"Part {index} of the video produced no frames.")
    produced = [Produced("segments", f"hls/{plan.renditions[0]['name']}/index.m3u8", ladder.HLS_PLAYLIST_TYPE,
                         {"chunk": index, "first_segment": first, "segments": count})]
    if index == 0:
        produced.append(Produced("poster", "poster.jpg", "image/jpeg", {}))
    if sound:
        produced.append(_sound_made(workdir))
    return produced


def _run_beside_sound(args: list[str], sound_args: list[str], *, duration_s: float, sound_s: float, on_progress,
                      sink: live.Sink | None, feed=None, sound_feed=None, check=None) -> None:
    """The chunk's ffmpeg here, the sound's in a thread beside it (each
    ffmpeg dies with the thread that waits for it); whichever fails stops
    the other. Progress is the chunk's; the sink is flushed from this
    thread until both are done."""
    stop, failed = threading.Event(), []

    def stop_check() -> None:
        if stop.is_set():
            raise MediaError("canceled", "Stopped: the video beside it failed.")
        if check is not None:
            check()

    def sound() -> None:
        try:
            # Fed from a source still arriving, the sound follows the fetch
            # to the end of the file: it yields the cores to the chunk's
            # first frames (its own first segment needs next to nothing).
            ffmpeg.run(sound_args, duration_s=sound_s, on_tick=stop_check, feed=sound_feed,
                       niceness=STREAMED_SOUND_NICENESS if sound_feed else 0)
        except BaseException as exc:  # handed to the chunk's thread, which raises it
            failed.append(exc)

    thread = threading.Thread(target=sound, name="chunk-sound", daemon=True)
    thread.start()
    try:
        ffmpeg.run(args, duration_s=duration_s, on_progress=on_progress, on_tick=sink and sink.flush, feed=feed)
        while thread.is_alive():
            thread.join(ffmpeg.TICK_S)
            if sink is not None:
                sink.flush()
            if check is not None:
                check()
    finally:
        stop.set()
        thread.join()
    if failed:
        raise failed[0]


def _sound_made(workdir: Path) -> Produced:
    if not (workdir / "hls" / AUDIO_GROUP / "index.m3u8").is_file():
        raise MediaError("decode_failed", "The video's sound produced no audio.")
    return Produced("audio", f"hls/{AUDIO_GROUP}/index.m3u8", ladder.HLS_PLAYLIST_TYPE, {})


def encode_audio(src: Path, workdir: Path, probe: Probe, plan: ChunkPlan, on_progress) -> list[Produced]:
    """The audio part of a plan stored before the first chunk made the sound."""
    (workdir / "hls" / AUDIO_GROUP).mkdir(parents=True)  # the muxer makes no folder without a %v in its path
    ffmpeg.run(audio_args(src, workdir, probe, plan, threads=settings.FAIRLANE_FFMPEG_THREADS),
               duration_s=probe.duration_s, on_progress=on_progress)
    made = _sound_made(workdir)
    return [Produced("segments", made.filename, made.content_type, {})]


# --- The finalizer ----------------------------------------------------------------------

def media_playlist(entries: list[tuple[float, str]]) -> str:
    target = max(1, math.ceil(max(d for d, _ in entries) - 1e-3))
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", f"#EXT-X-TARGETDURATION:{target}", "#EXT-X-MEDIA-SEQUENCE:0",
             "#EXT-X-PLAYLIST-TYPE:VOD", "#EXT-X-INDEPENDENT-SEGMENTS"]
    for duration, uri in entries:
        lines += [f"#EXTINF:{duration:.6f},", uri]
    return "\n".join([*lines, "#EXT-X-ENDLIST"]) + "\n"


def continuity_renumber(segments: list[Path]) -> None:
    """Rewrite the MPEG-TS continuity counters of `segments`, in order, as
    one run per PID: each chunk's muxer started its counters at 0, which a
    strict demuxer reads as lost packets at every join. A packet with a
    payload takes the next counter; one without repeats the last (ISO
    13818-1, 2.4.3.3). Vectorised (numpy): a 10-minute ladder is millions
    of packets, and the finalizer is the serial tail of a chunked job."""
    next_cc: dict[int, int] = {}
    for path in segments:
        data = np.fromfile(path, dtype=np.uint8)
        if data.size % TS_PACKET:
            raise MediaError("decode_failed", "A video segment is not whole MPEG-TS packets.")
        packets = data.reshape(-1, TS_PACKET)
        if (packets[:, 0] != 0x47).any():
            raise MediaError("decode_failed", "A video segment lost MPEG-TS sync.")
        pids = (packets[:, 1].astype(np.uint16) & 0x1F) << 8 | packets[:, 2]
        for pid in np.unique(pids):
            if pid == 0x1FFF:  # null packets carry no counter worth keeping
                continue
            rows = np.flatnonzero(pids == pid)
            header = packets[rows, 3]
            # The counter a packet carries: its payload packets so far, from
            # where the PID's run stands (the first packet ever keeps its own).
            start = next_cc.get(int(pid), int(header[0]) & 0x0F)
            taken = np.cumsum((header & 0x10) != 0)
            packets[rows, 3] = (header & 0xF0) | ((start - 1 + taken) & 0x0F).astype(np.uint8)
            next_cc[int(pid)] = (start + int(taken[-1])) & 0x0F
        data.tofile(path)


def avc_codec(segment: Path) -> str:
    """The RFC 6381 name of the H.264 stream in a segment (avc1.PPCCLL), read
    from its sequence parameter set; the master playlist's CODECS lets a
    player pick a rendition it can decode before loading one."""
    data = segment.read_bytes()[:64 * 1024]
    at = data.find(b"\x00\x00\x01\x67")
    if at < 0:
        return "avc1.640028"
    return "avc1." + data[at + 4:at + 7].hex()


def master_playlist(hls: Path, plan: ChunkPlan) -> str:
    """Master playlist: one variant per rendition, sharing the one audio rendition."""
    lines = ["#EXTM3U", "#EXT-X-VERSION:6", "#EXT-X-INDEPENDENT-SEGMENTS"]
    audio_codec = ""
    if plan.has_audio:
        lines.append(f'#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="{AUDIO_GROUP}",NAME="Audio",DEFAULT=YES,AUTOSELECT=YES,'
                     f'CHANNELS="{plan.audio_channels}",URI="{AUDIO_GROUP}/index.m3u8"')
        audio_codec = ",mp4a.40.2"
    audio_bits = plan.audio_kbps * 1000 if plan.has_audio else 0
    for r in plan.renditions:
        segments = sorted((hls / r["name"]).glob("seg_*.ts"))
        total = sum(p.stat().st_size for p in segments)
        average = max(1, round(total * 8 / max(plan.duration_s, 0.04))) + audio_bits
        peak = max(average, r["max_kbps"] * 1000 + audio_bits)
        lines.append(f"#EXT-X-STREAM-INF:BANDWIDTH={peak},AVERAGE-BANDWIDTH={average},"
                     f"RESOLUTION={r['width']}x{r['height']},FRAME-RATE={plan.fps:.3f},"
                     f'CODECS="{avc_codec(segments[0])}{audio_codec}"'
                     + (f',AUDIO="{AUDIO_GROUP}"' if plan.has_audio else ""))
        lines.append(f"{r['name']}/index.m3u8")
    return "\n".join(lines) + "\n"


def finalize(hls: Path, chunk_playlists: list[Path], workdir: Path, scratch: Path, plan: ChunkPlan,
             on_progress) -> list[Produced]:
    """Given every chunk's segments in hls/<rendition>/ (and the audio's in
    hls/audio/, with its playlist), and each chunk's own playlists under
    `chunk_playlists[i]/<rendition>/index.m3u8`: write the media and master
    playlists, renumber the continuity counters, and remux the MP4 fallback
    from the segments of its rendition (no encode). `hls` is workdir/hls."""
    duration = plan.duration_s
    renditions = []
    for r in plan.renditions:
        entries = [e for part in chunk_playlists for e in ladder.playlist_entries(part / r["name"] / "index.m3u8")]
        expected = plan.segment_files()
        if len(entries) != expected:
            raise MediaError("decode_failed", f"The {r['name']} rendition has {len(entries)} of {expected} segments.")
        (hls / r["name"] / "index.m3u8").write_text(media_playlist(entries))
        segments = [hls / r["name"] / uri for _, uri in entries]
        continuity_renumber(segments)
        renditions.append({**r, "playlist": f"{r['name']}/index.m3u8",
                           "kbps": kbps(sum(p.stat().st_size for p in segments), duration)})
    if plan.has_audio:  # the sound's encoder wrote an EVENT playlist (it was streamed): published as VOD
        sound = hls / AUDIO_GROUP / "index.m3u8"
        sound.write_text(media_playlist(ladder.playlist_entries(sound)))
    on_progress(50)
    (hls / "master.m3u8").write_text(master_playlist(hls, plan))
    ladder.master_playlist_start_mid_ladder(hls)
    mp4 = plan.rendition(plan.mp4)
    video_ts = ladder.segments_joined(ladder.playlist_segments(hls / mp4.name / "index.m3u8"), scratch / "video.ts")
    inputs = [*ffmpeg.input_args(video_ts, "mpegts")]
    maps = ["-map", "0:v:0"]
    if plan.has_audio:
        audio_ts = ladder.segments_joined(ladder.playlist_segments(hls / AUDIO_GROUP / "index.m3u8"),
                                          scratch / "audio.ts")
        inputs += ffmpeg.input_args(audio_ts, "mpegts")
        maps += ["-map", "1:a:0"]
    ffmpeg.run(["-y", *inputs, *maps, "-c", "copy", *ffmpeg.NO_METADATA, "-movflags", "+faststart",
                str(workdir / "video.mp4")], duration_s=duration)
    low = plan.renditions[0]
    previews = storyboard.make(ladder.playlist_segments(hls / low["name"] / "index.m3u8"),
                               (low["width"], low["height"]), duration, workdir, scratch)
    common = {"duration_s": duration, "fps": plan.fps, "audio": plan.has_audio, "chunks": len(plan.chunks)}
    top = plan.renditions[-1]
    return [
        Produced("hls", "hls/master.m3u8", ladder.HLS_PLAYLIST_TYPE,
                 {**common, "renditions": renditions, "width": top["width"], "height": top["height"]}),
        Produced("mp4", "video.mp4", "video/mp4",
                 {**common, "width": mp4.width, "height": mp4.height,
                  "kbps": kbps((workdir / "video.mp4").stat().st_size, duration)}),
        Produced("poster", "poster.jpg", "image/jpeg", {"width": mp4.width, "height": mp4.height}),
        *previews,
    ]
