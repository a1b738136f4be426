"""Images: upright, sRGB, stripped, never upscaled, each distinct size in
WebP and the largest in JPEG too, no file more bytes than the upload; GIF -> MP4."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.media import SRGB_PRIMARIES_D50, ffmpeg, icc_rgb_profile, video_facts
from transcoding import images
from transcoding.errors import MediaError
from transcoding.probe import Probe


def _sizes(out: dict) -> dict:
    result = {}
    for name, (path, produced) in out.items():
        with Image.open(path) as img:
            assert img.size == (produced.metadata["width"], produced.metadata["height"])
            assert not img.info.get("exif") and not img.getexif() and not img.info.get("icc_profile")
            result[name] = img.size
    return result


def photo(path: Path, size: tuple[int, int], colour="teal") -> Path:
    """A picture with a photo's grain (a flat colour compresses like no photo)."""
    grain = Image.effect_noise(size, 40).convert("RGB")
    Image.blend(Image.new("RGB", size, colour), grain, 0.12).save(path, quality=92)
    return path


def test_variants_shrink_large_images_in_webp_with_one_jpeg_at_the_largest(transcode, tmp_path: Path):
    sizes = _sizes(transcode(photo(tmp_path / "photo.jpg", (3000, 2000))))
    assert sizes == {"large": (1600, 1067), "large_jpeg": (1600, 1067), "medium": (800, 533),
                     "thumbnail": (320, 213)}


@pytest.mark.parametrize(("size", "expected"), [
    ((64, 64), {"thumbnail": (64, 64), "thumbnail_jpeg": (64, 64)}),  # one size: it is a thumbnail
    ((200, 101), {"thumbnail": (200, 101), "thumbnail_jpeg": (200, 101)}),
    ((600, 400), {"medium": (600, 400), "medium_jpeg": (600, 400), "thumbnail": (320, 213)}),
    ((1000, 1600), {"large": (1000, 1600), "large_jpeg": (1000, 1600), "medium": (500, 800),
                    "thumbnail": (200, 320)}),
])
def test_each_size_once_never_upscaled_named_by_the_smallest_it_fits(transcode, tmp_path: Path, size, expected):
    assert _sizes(transcode(photo(tmp_path / "small.jpg", size))) == expected


@pytest.mark.parametrize(("name", "make"), [
    ("icon.png", lambda path: ffmpeg("-f", "lavfi", "-i", "testsrc2=s=64x64", "-frames:v", "1", str(path))),
    ("drawing.png", lambda path: ffmpeg("-f", "lavfi", "-i", "testsrc=s=1280x800", "-frames:v", "1", str(path))),
    ("logo.png", lambda path: Image.new("RGBA", (500, 300), (20, 90, 200, 255)).save(path)),
    ("photo.jpg", lambda path: photo(path, (2000, 1500))),
    ("tight.jpg", lambda path: Image.open(photo(path.with_name("p.png"), (900, 600))).save(path, quality=40)),
])
def test_no_output_has_more_bytes_than_the_upload(transcode, tmp_path: Path, name, make):
    src = tmp_path / name
    make(src)
    out = transcode(src)
    assert "thumbnail" in out
    bigger = {n: path.stat().st_size for n, (path, _) in out.items() if path.stat().st_size > src.stat().st_size}
    assert not bigger, f"{src.stat().st_size} bytes uploaded, {bigger}"


def test_a_drawing_too_big_as_lossy_webp_is_lossless(transcode, tmp_path: Path):
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=1280x800", "-frames:v", "1", str(tmp_path / "drawing.png"))
    out = transcode(tmp_path / "drawing.png")
    assert out["large"][1].metadata["lossless"] is True
    with Image.open(out["large"][0]) as webp, Image.open(tmp_path / "drawing.png") as png:
        assert webp.convert("RGB").tobytes() == png.convert("RGB").tobytes()  # pixel for pixel


def test_exif_orientation_is_applied_then_metadata_stripped(transcode, tmp_path: Path):
    img = Image.new("RGB", (64, 32), "blue")
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 CW to display
    exif[0x010F] = "PhoneMaker"
    img.save(tmp_path / "phone.jpg", exif=exif)
    assert _sizes(transcode(tmp_path / "phone.jpg"))["thumbnail"] == (32, 64)


def test_transparency_is_kept_in_webp_and_flattened_on_white_in_jpeg(transcode, tmp_path: Path):
    img = Image.open(photo(tmp_path / "red.png", (40, 40), "red")).convert("RGBA")
    img.paste((0, 0, 0, 0), (0, 0, 20, 40))
    img.save(tmp_path / "logo.png")
    out = transcode(tmp_path / "logo.png")
    with Image.open(out["thumbnail"][0]) as webp:
        assert webp.mode == "RGBA" and webp.getpixel((5, 5))[3] == 0 and webp.getpixel((30, 5))[3] == 255
    with Image.open(out["thumbnail_jpeg"][0]) as jpeg:
        assert jpeg.mode == "RGB" and min(jpeg.getpixel((5, 5))) > 240


def test_cmyk_becomes_rgb(transcode, tmp_path: Path):
    Image.new("CMYK", (50, 50), (0, 255, 255, 0)).save(tmp_path / "print.jpg")  # pure red ink
    out = transcode(tmp_path / "print.jpg")
    with Image.open(out["thumbnail"][0]) as webp:
        r, g, b = webp.getpixel((25, 25))
        assert webp.mode == "RGB" and r > 200 and g < 60 and b < 60


def test_16_bit_greyscale_is_scaled_not_clipped(transcode, tmp_path: Path):
    Image.new("I;16", (50, 50), 32768).save(tmp_path / "scan.png")
    with Image.open(transcode(tmp_path / "scan.png")["thumbnail"][0]) as webp:
        assert 120 <= webp.convert("L").getpixel((25, 25)) <= 136


@pytest.mark.parametrize(("name", "pix_fmt"), [("scan.png", "rgb48be"), ("scan.tiff", "rgb48le"),
                                              ("layer.png", "rgba64be")])
def test_16_bit_colour_images_keep_their_colours(transcode, tmp_path: Path, name, pix_fmt):
    ffmpeg("-f", "lavfi", "-i", "color=c=0xff8000:size=64x48", "-frames:v", "1", "-pix_fmt", pix_fmt,
           str(tmp_path / name))
    with Image.open(transcode(tmp_path / name)["thumbnail"][0]) as webp:
        r, g, b = webp.convert("RGB").getpixel((32, 24))
        assert webp.size == (64, 48) and r > 240 and 110 < g < 145 and b < 20


def test_colours_are_converted_through_the_icc_profile_to_srgb(transcode, tmp_path: Path):
    """A profile whose red and green primaries are swapped: a pixel stored as
    pure red *is* green, and must come out green, with no profile attached."""
    red, green, blue = SRGB_PRIMARIES_D50
    Image.new("RGB", (30, 30), (255, 0, 0)).save(tmp_path / "odd.jpg", quality=95,
                                                 icc_profile=icc_rgb_profile((green, red, blue)))
    out = transcode(tmp_path / "odd.jpg")
    _sizes(out)  # also: no profile, no EXIF left
    with Image.open(out["thumbnail"][0]) as webp:
        r, g, b = webp.getpixel((15, 15))
        assert r < 40 and g > 215 and b < 40


def test_transparent_images_with_a_profile_keep_their_alpha(transcode, tmp_path: Path):
    img = Image.new("RGBA", (20, 20), (200, 100, 50, 128))
    img.save(tmp_path / "tagged.png", icc_profile=icc_rgb_profile())
    with Image.open(transcode(tmp_path / "tagged.png")["thumbnail"][0]) as webp:
        r, g, b, a = webp.getpixel((10, 10))
        assert webp.mode == "RGBA" and abs(a - 128) <= 2 and abs(r - 200) < 10 and abs(g - 100) < 10


def test_heic_photos_are_supported(transcode, tmp_path: Path):
    Image.new("RGB", (128, 96), "orange").save(tmp_path / "iphone.heic", format="HEIF")
    assert _sizes(transcode(tmp_path / "iphone.heic"))["thumbnail"] == (128, 96)


def test_avif_photos_are_images_not_one_frame_videos(transcode, tmp_path: Path):
    Image.new("RGB", (128, 96), "orange").save(tmp_path / "photo.avif", format="AVIF")
    assert _sizes(transcode(tmp_path / "photo.avif"))["thumbnail"] == (128, 96)


def test_the_image_pipeline_opens_only_allowed_formats_whatever_it_is_handed(tmp_path: Path):
    """Defence in depth: the pipeline does not rely on the probe's verdict."""
    Image.new("RGB", (64, 48), "teal").save(tmp_path / "old.bmp", "BMP")
    (tmp_path / "work").mkdir()
    with pytest.raises(MediaError) as caught:
        images.image(tmp_path / "old.bmp", tmp_path / "work", Probe(kind="image", container="bmp", width=64, height=48),
                     lambda pct: None)
    assert caught.value.code == "decode_failed" and not list((tmp_path / "work").iterdir())


def test_an_animated_gif_becomes_an_mp4_loop_and_a_poster(transcode, tmp_path: Path):
    frames = [Image.new("RGB", (65, 49), (i * 50, 255 - i * 50, 0)) for i in range(5)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    out = transcode(tmp_path / "anim.gif")
    assert set(out) == {"mp4", "poster"} and out["mp4"][1].metadata["loop"] is True
    facts = video_facts(out["mp4"][0])
    assert (facts["video_codec"], facts["pix_fmt"]) == ("h264", "yuv420p")
    assert facts["display"][0] % 2 == 0 and facts["display"][1] % 2 == 0 and facts["frames"] >= 4


@pytest.mark.parametrize("mode", ["L", "LA", "P", "RGB"])
def test_other_modes_come_out_as_rgb_or_rgba(transcode, tmp_path: Path, mode):
    Image.new(mode, (20, 20)).save(tmp_path / f"{mode}.png")
    with Image.open(transcode(tmp_path / f"{mode}.png")["thumbnail"][0]) as webp:
        assert webp.mode in ("RGB", "RGBA")


# Run in a child, with its peak resident size reset (Linux: clear_refs 5)
# just before the pipeline, so that the peak is this image's alone.
_PROCESS_IN_A_CHILD = """
import json, sys
from pathlib import Path
import django
django.setup()
from transcoding import pipelines
from transcoding.probe import probe_file

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

src, workdir = Path(sys.argv[1]), Path(sys.argv[2])
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
before = kib("VmRSS")
produced = pipelines.PIPELINES["image"](src, workdir, probe_file(src), lambda pct: None)
print(json.dumps({"grew_bytes": (kib("VmHWM") - before) * 1024,
                  "sizes": {p.name: [p.metadata["width"], p.metadata["height"]] for p in produced}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_a_huge_but_legal_image_is_processed_in_bounded_memory(tmp_path: Path, fmt):
    """48 MP, under FAIRLANE_MAX_PIXELS: a phone's full-resolution JPEG (decoded
    at reduced scale) and a scan's PNG (decoded whole). At most about one
    full-size copy (Pillow keeps RGB in 4 bytes a pixel) may be alive at a
    time, plus the variants."""
    width, height = 8000, 6000
    src = tmp_path / f"huge.{fmt.lower()}"
    Image.linear_gradient("L").resize((width, height)).convert("RGB").save(src, fmt)
    workdir = tmp_path / "work"
    workdir.mkdir()
    child = subprocess.run([sys.executable, "-c", _PROCESS_IN_A_CHILD, str(src), str(workdir)], capture_output=True,
                           text=True, check=True, cwd=Path(__file__).resolve().parents[2],
                           env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings"})
    result = json.loads(child.stdout)
    assert result["sizes"] == {"large": [1600, 1200], "large_jpeg": [1600, 1200], "medium": [800, 600],
                               "thumbnail": [320, 240]}
    assert result["grew_bytes"] < 1.5 * width * height * 4, f"{result['grew_bytes'] / 2**20:.0f} MiB"
