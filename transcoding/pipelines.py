"""One function per media kind: probe result in, files in a private work
directory out. They never touch the database; transcoding/services.py
records what they produced."""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pypdfium2
from django.conf import settings

from transcoding import aac, ffmpeg, images, ladder, live, sandbox, storyboard
from transcoding.errors import MediaError, decoder_failure, reason
from transcoding.probe import Probe
from transcoding.produced import ProgressFn, Produced, kbps

WAVEFORM_SIZE = "1200x240"
PDF_THUMBNAIL_EDGE = 320


def video(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn, *,
          sink: live.Sink | None = None) -> list[Produced]:
    """HLS ladder + MP4 fallback + poster from one ffmpeg run (transcoding/ladder.py), its
    segments stored as they are written when there is a `sink` (transcoding/live.py: the job is
    playable once every rendition's first one is), then the scrub previews from its lowest
    rendition (transcoding/storyboard.py)."""
    plan = ladder.plan(src, workdir, probe, threads=settings.FAIRLANE_FFMPEG_THREADS)
    # Decoding and scaling grow with the source's frame size; the ladder's
    # encodes stop growing at 1080p. Sources above 1080p get proportionally longer.
    size_factor = max(1.0, (probe.width or 0) * (probe.height or 0) / ladder.FULL_HD_PIXELS)
    audio_kbps = plan.sound.kbps if plan.sound else 0
    info = {"renditions": [r.as_json() for r in plan.renditions], "audio_kbps": audio_kbps,
            "target_s": math.ceil(ladder.segment_s())}
    with live.streaming(sink, workdir, {"video": [r.name for r in plan.renditions]}, info=info, needs=("video",)):
        ffmpeg.run(plan.args, duration_s=probe.duration_s, on_progress=on_progress,
                   timeout_s=ffmpeg.timeout_for(probe.duration_s) * size_factor, on_tick=sink and sink.flush)
    hls = workdir / "hls"
    ladder.master_playlist_ensure(hls, plan.renditions, probe.duration_s, audio_kbps)
    ladder.master_playlist_start_mid_ladder(hls)
    for name in ["master.m3u8", *(f"{r.name}/index.m3u8" for r in plan.renditions)]:
        if not (hls / name).is_file():
            raise MediaError("decode_failed", f"The video produced no {name}; the source has no usable frames.")
    for r in plan.renditions:
        ladder.playlist_vod(hls / r.name / "index.m3u8")
    for name in ("video.mp4", "poster.jpg"):
        if not (workdir / name).is_file() or not (workdir / name).stat().st_size:
            raise MediaError("decode_failed", "The video produced no frames; the source has no usable frames.")
    duration = probe.duration_s
    renditions = [
        {**r.as_json(), "playlist": f"{r.name}/index.m3u8",
         "kbps": kbps(sum(p.stat().st_size for p in (hls / r.name).glob("*.ts")), duration)}
        for r in plan.renditions
    ]
    low = plan.renditions[0]
    # The attempt's scratch folder (the input's) holds the joined stream: nothing in workdir is left unpublished.
    previews = storyboard.make(ladder.playlist_segments(hls / low.name / "index.m3u8"), (low.width, low.height),
                               duration, workdir, src.parent)
    common = {"duration_s": duration, "fps": plan.fps, "audio": plan.has_audio}
    return [
        Produced("hls", "hls/master.m3u8", ladder.HLS_PLAYLIST_TYPE,
                 {**common, "renditions": renditions, "width": plan.renditions[-1].width,
                  "height": plan.renditions[-1].height}),
        Produced("mp4", "video.mp4", "video/mp4",
                 {**common, "width": plan.mp4.width, "height": plan.mp4.height,
                  "kbps": kbps((workdir / "video.mp4").stat().st_size, duration)}),
        Produced("poster", "poster.jpg", "image/jpeg", {"width": plan.mp4.width, "height": plan.mp4.height}),
        *previews,
    ]


def audio(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    """AAC in M4A (never above the source: transcoding/aac.py) and a
    waveform picture, from one run (one decode)."""
    t = str(settings.FAIRLANE_FFMPEG_THREADS)
    sound = aac.for_source(probe, stereo_max_kbps=aac.AUDIO_STEREO_MAX_KBPS)
    graph = (f"[0:a:{probe.audio_index or 0}]aresample={sound.sample_rate}:async=1,asplit=2[a][w];"
             f"[w]aformat=channel_layouts=mono,showwavespic=s={WAVEFORM_SIZE}:colors=0x3b82f6[wave]")
    ffmpeg.run(
        ["-y", "-threads", t, *ffmpeg.input_args(src, probe.container), "-filter_complex", graph,
         "-map", "[a]", *sound.args(), *ffmpeg.NO_METADATA, "-movflags", "+faststart",
         str(workdir / "audio.m4a"),
         "-map", "[wave]", "-frames:v", "1", "-c:v", "png", "-update", "1", str(workdir / "waveform.png")],
        duration_s=probe.duration_s, on_progress=on_progress,
    )
    width, height = (int(v) for v in WAVEFORM_SIZE.split("x"))
    m4a_kbps = kbps((workdir / "audio.m4a").stat().st_size, probe.duration_s)
    return [
        Produced("m4a", "audio.m4a", "audio/mp4", {"duration_s": probe.duration_s, "kbps": m4a_kbps}),
        Produced("waveform", "waveform.png", "image/png", {"width": width, "height": height}),
    ]


# Wall time for the first page's render: pdfium renders a heavy page (large
# scans, thousands of vector paths) in seconds.
PDF_TIMEOUT_S = 120.0


def pdf(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    """The first page's thumbnail and the page count; pdfium parses and
    renders in a child (transcoding/sandbox.py) within a memory budget."""
    return sandbox.run(pdf_thumbnail, src, workdir, timeout_s=PDF_TIMEOUT_S,
                       memory_bytes=settings.FAIRLANE_DECODE_MAX_BYTES)


def pdf_thumbnail(src: Path, workdir: Path) -> list[Produced]:
    """In the decoding child."""
    try:
        doc = pypdfium2.PdfDocument(str(src))
    except pypdfium2.PdfiumError as exc:
        raise decoder_failure("decode_failed", f"The PDF could not be read: {reason(exc)}", exc) from exc
    try:
        pages = len(doc)
        if pages == 0:
            raise MediaError("decode_failed", "The PDF has no pages.")
        page = doc[0]  # a broken page dictionary fails here, not at the open
        scale = PDF_THUMBNAIL_EDGE / max(page.get_width(), page.get_height())
        thumb = page.render(scale=scale).to_pil().convert("RGB")
        thumb.save(workdir / "thumbnail.webp", "WEBP", quality=82)
    except pypdfium2.PdfiumError as exc:
        raise decoder_failure("decode_failed", f"The PDF's first page could not be read: {reason(exc)}", exc) from exc
    finally:
        doc.close()
    return [Produced("thumbnail", "thumbnail.webp", "image/webp",
                     {"pages": pages, "width": thumb.width, "height": thumb.height})]


PIPELINES: dict[str, Callable[[Path, Path, Probe, ProgressFn], list[Produced]]] = {
    "video": video,
    "audio": audio,
    "image": images.image,
    "pdf": pdf,
}
