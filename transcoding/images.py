"""Still images with Pillow, animated GIFs with ffmpeg.

A still image is decoded once (JPEGs at reduced scale when the largest
variant allows it), turned upright from its EXIF orientation, converted to
8-bit sRGB (through its ICC profile when it has one: CMYK and wide-gamut
photos otherwise come out with wrong colours), and saved in the sizes of
VARIANTS that differ, each in WebP (keeping transparency) and JPEG
(flattened on white). Outputs worth their bytes:

- never larger than the source, in pixels, and no two of the same size: a
  size shared by several names goes by the smallest of them (a 64x64 icon
  is one thumbnail, a 600x400 picture a medium and a thumbnail), so every
  image has its thumbnail, and the largest is the source's size or 1600 px;
- WebP in every size (what pages show; every current browser reads it),
  JPEG in the largest only (`large_jpeg`, or the name of the largest size
  there is): one copy for whatever cannot read WebP, not one per size;
- never more bytes than the uploaded file: a WebP that comes out larger
  (a small PNG drawing, a tightly compressed JPEG) is made lossless when
  that is smaller, which it is for drawings, and a size whose WebP is
  still larger is left out; a JPEG that comes out larger is not kept. The
  thumbnail's WebP is kept whatever its size: it may be all there is.

Nothing of the source's metadata is copied: no EXIF (GPS position, camera
serial), no profile; browsers take untagged as sRGB.
"""
from __future__ import annotations

import io
import warnings
from pathlib import Path

from django.conf import settings
from PIL import Image, ImageCms, ImageOps

from transcoding import ffmpeg, ladder, sandbox
from transcoding.errors import decoder_failure, reason
from transcoding.probe import ALLOWED_IMAGE_FORMATS, Limits, Probe, configured_limits
from transcoding.produced import ProgressFn, Produced

# Longest edge of each variant, largest first (each is made from the previous).
VARIANTS = (("large", 1600), ("medium", 800), ("thumbnail", 320))
WEBP_QUALITY = 82
# Lossless WebP's effort (Pillow's quality): 80 of 100 gets within a few
# per cent of the smallest file at a fraction of the time of 100.
WEBP_LOSSLESS_EFFORT = 80
JPEG_QUALITY = 85
# Animated GIFs become an MP4 no larger than 720p: GIFs are small clips.
ANIMATION_MAX_RUNG = 720
_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
# ICC colour space signature -> the Pillow modes that profile can describe.
_PROFILE_MODES = {"RGB ": ("RGB", "RGBA"), "CMYK": ("CMYK",), "GRAY": ("L",)}


# Wall time for one still image's child: a picture at the pixel limit takes
# a few seconds to decode, convert and save six times.
STILL_TIMEOUT_S = 300.0


def image(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    if probe.animated:
        return _animation(src, workdir, probe, on_progress)
    # Pillow decodes in a child (transcoding/sandbox.py) within a memory budget.
    return sandbox.run(still, src, workdir, configured_limits(), timeout_s=STILL_TIMEOUT_S,
                       memory_bytes=settings.FAIRLANE_DECODE_MAX_BYTES)


def still(src: Path, workdir: Path, limits: Limits) -> list[Produced]:
    """The variants of a still image (in the decoding child)."""
    Image.MAX_IMAGE_PIXELS = limits.max_pixels  # as the probe: ours decides, Pillow only stops beyond twice it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(src, formats=ALLOWED_IMAGE_FORMATS)
    except (OSError, SyntaxError, ValueError, RuntimeError) as exc:  # RuntimeError: AVIF, HEIF
        raise decoder_failure("decode_failed", f"The image could not be opened: {reason(exc)}.", exc) from exc
    # The variants are made before the file is closed: the decoded pixels may
    # be `img`'s own (no copy), and closing an image drops them.
    with img:
        return _variants(_upright_srgb(img), workdir, src.stat().st_size)


def _upright_srgb(img: Image.Image) -> Image.Image:
    """Decode once, turned upright, in 8-bit sRGB. Copies only when a step
    changes the pixels: a 48 MP scan is 190 MB per copy."""
    try:
        if img.format in ("JPEG", "MPO"):
            img.draft(img.mode, (VARIANTS[0][1], VARIANTS[0][1]))  # decode at 1/2, 1/4, 1/8 when enough
        icc = img.info.get("icc_profile")
        ImageOps.exif_transpose(img, in_place=True)
        return to_srgb(img, icc)
    except (OSError, SyntaxError, ValueError, RuntimeError) as exc:  # RuntimeError: AVIF, HEIF
        code = "truncated" if "truncated" in str(exc) else "decode_failed"
        raise decoder_failure(code, f"The image could not be decoded: {reason(exc)}.", exc) from exc


def variant_sizes(source: tuple[int, int]) -> list[tuple[str, tuple[int, int]]]:
    """(name, size) of each variant an image of `source` pixels gets,
    largest first: sizes from the source (no rounding drift), never larger,
    each size once, named by the smallest name that has it."""
    sized = []
    for name, edge in VARIANTS:
        scale = min(1.0, edge / max(source))
        sized.append((name, (max(1, round(source[0] * scale)), max(1, round(source[1] * scale)))))
    return [(name, size) for i, (name, size) in enumerate(sized) if i + 1 == len(sized) or size != sized[i + 1][1]]


def _variants(rgb: Image.Image, workdir: Path, source_bytes: int) -> list[Produced]:
    produced: list[Produced] = []
    variant = rgb
    sizes = variant_sizes(rgb.size)
    for i, (name, size) in enumerate(sizes):
        # Pixels from the previous, larger variant (cheap); shrinks only.
        variant = variant.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0) if size != variant.size else variant
        size = {"width": variant.width, "height": variant.height}
        webp = workdir / f"{name}.webp"
        lossless = _webp(variant, webp, budget=source_bytes)
        if webp.stat().st_size > source_bytes and i + 1 < len(sizes):
            webp.unlink()  # more bytes than the upload: a smaller size will do
            continue
        if not produced:  # the largest size there is: its JPEG too
            produced += _jpeg(variant, workdir / f"{name}.jpg", f"{name}_jpeg", size, budget=source_bytes)
        produced.append(Produced(name, webp.name, "image/webp",
                                 {**size, "alpha": variant.mode == "RGBA", "lossless": lossless}))
    return produced


def _jpeg(img: Image.Image, path: Path, name: str, size: dict, *, budget: int) -> list[Produced]:
    """The JPEG, flattened on white, unless it is over `budget` bytes."""
    _flatten(img).save(path, "JPEG", quality=JPEG_QUALITY, optimize=True, progressive=True)
    if path.stat().st_size > budget:
        path.unlink()
        return []
    return [Produced(name, path.name, "image/jpeg", size)]


def _webp(img: Image.Image, path: Path, *, budget: int) -> bool:
    """Lossy WebP, or lossless when the lossy one is over `budget` bytes and
    lossless is smaller (drawings, screenshots, icons). True if lossless."""
    img.save(path, "WEBP", quality=WEBP_QUALITY, method=4)
    lossy = path.stat().st_size
    if lossy <= budget:
        return False
    exact = path.with_suffix(".lossless.webp")
    img.save(exact, "WEBP", lossless=True, quality=WEBP_LOSSLESS_EFFORT, method=4)
    if exact.stat().st_size < lossy:
        exact.replace(path)
        return True
    exact.unlink()
    return False


def _has_alpha(img: Image.Image) -> bool:
    return img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info


def _to_8bit(img: Image.Image) -> Image.Image:
    """16-bit and float greyscale down to L by scaling; Pillow's own
    conversion clips everything above 255 to white."""
    if img.mode.startswith("I;16") or img.mode == "I":
        return img.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    if img.mode == "F":
        return img.point(lambda v: v * 255).convert("L")
    return img


def to_srgb(img: Image.Image, icc: bytes | None) -> Image.Image:
    """8-bit RGB or RGBA in sRGB."""
    target = "RGBA" if _has_alpha(img) else "RGB"
    img = _to_8bit(img)
    if icc:
        try:
            profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        except (OSError, ImageCms.PyCMSError):
            profile = None  # a broken profile: fall back to treating the pixels as sRGB
        if profile is not None:
            modes = _PROFILE_MODES.get(profile.profile.xcolor_space, ())
            source = img if img.mode in modes else None
            if source is None and "RGB" in modes:
                source = img.convert(target)
            if source is not None:
                out_mode = target if source.mode in ("RGB", "RGBA") else "RGB"
                converted = ImageCms.profileToProfile(source, profile, _SRGB, outputMode=out_mode,
                                                      renderingIntent=ImageCms.Intent.PERCEPTUAL)
                return converted if converted.mode == target else converted.convert(target)
    return img if img.mode == target else img.convert(target)  # convert() to the same mode copies


def _flatten(img: Image.Image) -> Image.Image:
    if img.mode != "RGBA":
        return img
    background = Image.new("RGB", img.size, "white")
    background.paste(img, mask=img.getchannel("A"))
    return background


def _animation(src: Path, workdir: Path, probe: Probe, on_progress: ProgressFn) -> list[Produced]:
    """Animated GIF -> a silent H.264 MP4 (played muted and looped) and a poster."""
    display = probe.display_size
    width, height = ladder.fit_within(display, min(ANIMATION_MAX_RUNG, min(display)))
    t = str(settings.FAIRLANE_FFMPEG_THREADS)
    graph = f"[0:v:0]{ladder.scaled((width, height))},split=2[m][p]"
    ffmpeg.run(
        ["-y", "-threads", t, *ffmpeg.input_args(src, probe.container), "-filter_complex", graph,
         "-map", "[m]", *ladder.X264, "-threads", t, "-an", *ffmpeg.NO_METADATA,
         "-movflags", "+faststart", str(workdir / "video.mp4"),
         "-map", "[p]", "-frames:v", "1", "-c:v", "mjpeg", "-q:v", "3", "-update", "1",
         str(workdir / "poster.jpg")],
        duration_s=probe.duration_s, on_progress=on_progress,
    )
    size = {"width": width, "height": height}
    return [
        Produced("mp4", "video.mp4", "video/mp4", {**size, "duration_s": probe.duration_s, "loop": True,
                                                   "audio": False}),
        Produced("poster", "poster.jpg", "image/jpeg", size),
    ]
