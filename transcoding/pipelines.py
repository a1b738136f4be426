"""One function per media kind: probe result in, files in a private work
directory out. They never touch the database; transcoding/services.py
records what they produced."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pypdfium2
from django.conf import settings
from PIL import Image, ImageOps

from transcoding import ffmpeg
from transcoding.errors import MediaError
from transcoding.probe import Probe

ProgressFn = Callable[[int], None]

# Longest edge of each image variant; images are never upscaled.
IMAGE_VARIANTS = {"thumbnail": 320, "large": 1600}


@dataclass
class Produced:
    name: str
    filename: str
    content_type: str
    metadata: dict = field(default_factory=dict)


def video(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    threads = str(settings.FAIRLANE_FFMPEG_THREADS)
    has_audio = any(s.type == "audio" for s in probe.streams)
    args = [*ffmpeg.input_args(src, probe.container), "-map", "0:v:0"]
    if has_audio:
        args += ["-map", "0:a:0", "-c:a", "aac", "-b:a", "128k", "-ac", "2"]
    args += [
        # Even dimensions and 8-bit 4:2:0: what every browser decodes.
        "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2,format=yuv420p",
        "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-threads", threads,
        "-movflags", "+faststart", "-y", str(workdir / "video.mp4"),
    ]
    ffmpeg.run(args, duration_s=probe.duration_s, on_progress=on_progress)
    poster_at = f"{min(1.0, probe.duration_s / 2):.3f}"
    ffmpeg.run(
        ["-ss", poster_at, *ffmpeg.input_args(src, probe.container), "-frames:v", "1",
         "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2", "-threads", threads, "-y", str(workdir / "poster.jpg")],
        duration_s=1.0,
    )
    return [
        Produced("mp4", "video.mp4", "video/mp4", {"duration_s": probe.duration_s}),
        Produced("poster", "poster.jpg", "image/jpeg"),
    ]


def audio(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    ffmpeg.run(
        [*ffmpeg.input_args(src, probe.container), "-map", "0:a:0", "-vn", "-c:a", "aac", "-b:a", "160k",
         "-movflags", "+faststart", "-y", str(workdir / "audio.m4a")],
        duration_s=probe.duration_s, on_progress=on_progress,
    )
    return [Produced("m4a", "audio.m4a", "audio/mp4", {"duration_s": probe.duration_s})]


def image(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    if (probe.width or 0) * (probe.height or 0) > settings.FAIRLANE_MAX_PIXELS:
        raise MediaError("image_too_large", f"Images above {settings.FAIRLANE_MAX_PIXELS} pixels are not accepted.")
    produced = []
    try:
        with Image.open(src) as img:
            img = ImageOps.exif_transpose(img)  # orientation applied; metadata is not copied
            has_alpha = img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info
            img = img.convert("RGBA" if has_alpha else "RGB")
            for name, edge in IMAGE_VARIANTS.items():
                variant = img.copy()
                variant.thumbnail((edge, edge))  # shrinks only, keeps aspect ratio
                variant.save(workdir / f"{name}.webp", "WEBP", quality=82)
                produced.append(Produced(name, f"{name}.webp", "image/webp",
                                         {"width": variant.width, "height": variant.height}))
    except (OSError, SyntaxError) as exc:
        raise MediaError("decode_failed", f"The image could not be decoded: {exc}") from exc
    return produced


def pdf(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    try:
        doc = pypdfium2.PdfDocument(str(src))
    except pypdfium2.PdfiumError as exc:
        raise MediaError("decode_failed", f"The PDF could not be read: {exc}") from exc
    try:
        pages = len(doc)
        if pages == 0:
            raise MediaError("decode_failed", "The PDF has no pages.")
        page = doc[0]
        scale = 320 / max(page.get_width(), page.get_height())
        bitmap = page.render(scale=scale)
        bitmap.to_pil().convert("RGB").save(workdir / "thumbnail.webp", "WEBP", quality=82)
    finally:
        doc.close()
    return [Produced("thumbnail", "thumbnail.webp", "image/webp", {"pages": pages})]


PIPELINES: dict[str, Callable[[Path, Path, Probe, ProgressFn], list[Produced]]] = {
    "video": video,
    "audio": audio,
    "image": image,
    "pdf": pdf,
}
