"""Still images with Pillow, animated GIFs with ffmpeg.

A still image is decoded once (JPEGs at reduced scale when the largest
variant allows it), turned upright from its EXIF orientation, converted to
8-bit sRGB (through its ICC profile when it has one: CMYK and wide-gamut
photos otherwise come out with wrong colours), and saved as variants that
never exceed the source, each in WebP (keeping transparency) and JPEG
(flattened on white). Nothing of the source's metadata is copied: no EXIF
(GPS position, camera serial), no profile; browsers take untagged as sRGB.
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
        return _variants(_upright_srgb(img), workdir)


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


def _variants(rgb: Image.Image, workdir: Path) -> list[Produced]:
    produced = []
    variant = rgb
    for name, edge in VARIANTS:
        # Size from the source (no rounding drift), pixels from the previous,
        # larger variant (cheap); shrinks only.
        scale = min(1.0, edge / max(rgb.size))
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        variant = variant.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0) if size != variant.size else variant
        size = {"width": variant.width, "height": variant.height}
        variant.save(workdir / f"{name}.webp", "WEBP", quality=WEBP_QUALITY, method=4)
        _flatten(variant).save(workdir / f"{name}.jpg", "JPEG", quality=JPEG_QUALITY, optimize=True,
                               progressive=True)
        produced += [
            Produced(name, f"{name}.webp", "image/webp", {**size, "alpha": variant.mode == "RGBA"}),
            Produced(f"{name}_jpeg", f"{name}.jpg", "image/jpeg", size),
        ]
    return produced


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
