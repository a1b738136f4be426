"""Files that must fail, each with its own code, as whole jobs: failed at the
first attempt, with a message, and nothing left on disk."""
from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from tests.media import ffmpeg, make_video, one_page_pdf, timestamped
from transcoding.probe import ALLOWED_CONTAINERS

pytestmark = pytest.mark.django_db


def _cut(path: Path, keep: float) -> Path:
    """The first `keep` of a file, as a download that stopped early leaves it."""
    cut = path.with_name(f"cut-{path.name}")
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
    return cut


def _cut_video(tmp: Path) -> Path:
    return _cut(make_video(tmp / "whole.mp4", seconds=2, size="320x240",
                           video_args=("-c:v", "libx264", "-preset", "ultrafast", "-movflags", "+faststart")), 0.5)


def _cut_jpeg(tmp: Path) -> Path:
    Image.effect_noise((400, 300), 64).convert("RGB").save(tmp / "whole.jpg", quality=90)
    return _cut(tmp / "whole.jpg", 0.1)


def _bomb(edge: int) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        Image.new("1", (edge, edge)).save(tmp / "bomb.png")  # megapixels in a few KB
        assert (tmp / "bomb.png").stat().st_size < 200_000
        return tmp / "bomb.png"

    return make


def _under_declared(tmp: Path) -> Path:
    """3 s of MKV whose header says 1 s (the Duration element rewritten)."""
    data = make_video(tmp / "long.mkv", seconds=3).read_bytes()
    at = data.index(b"\x44\x89\x88") + 3  # Duration, an 8-byte float in milliseconds
    (tmp / "liar.mkv").write_bytes(data[:at] + struct.pack(">d", 1000.0) + data[at + 8:])
    return tmp / "liar.mkv"


def _write(name: str, content: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        (tmp / name).write_bytes(content)
        return tmp / name

    return make


def _png(size: tuple[int, int]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        Image.new("RGB", size).save(tmp / "picture.png")
        return tmp / "picture.png"

    return make


def _y4m(tmp: Path) -> Path:
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:duration=0.2", "-pix_fmt", "yuv420p", str(tmp / "raw.y4m"))
    return tmp / "raw.y4m"


def _eps_with_preview(tmp: Path) -> Path:
    """A DOS EPS as drawing programs write it: a binary header, a TIFF
    preview, then the PostScript program that Pillow would hand to
    Ghostscript. The preview comes first, so the file does not look like text."""
    import io

    Image.new("RGB", (64, 48), "teal").save(tmp / "plain.eps", "EPS")
    preview = io.BytesIO()
    Image.effect_noise((64, 48), 80).convert("RGB").save(preview, "TIFF")
    tiff, program = preview.getvalue(), (tmp / "plain.eps").read_bytes()
    header = b"\xC5\xD0\xD3\xC6" + struct.pack("<6I", 30 + len(tiff), len(program), 0, 0, 30, len(tiff)) + b"\xff\xff"
    (tmp / "drawing.eps").write_bytes(header + tiff + program)
    return tmp / "drawing.eps"


def _avif_of_85_bit_samples(tmp: Path) -> Path:
    """An AVIF whose pixel-information box claims 85 bits a sample: Pillow's
    AVIF plugin takes the file, and its decoder then gives up."""
    Image.new("RGB", (64, 48), "teal").save(tmp / "photo.avif", "AVIF")
    data = bytearray((tmp / "photo.avif").read_bytes())
    depths = data.index(b"pixi") + 4 + 4 + 1  # box type, version and flags, channel count
    data[depths] = 85
    (tmp / "odd.avif").write_bytes(bytes(data))
    return tmp / "odd.avif"


def _pillow_saves(fmt: str, name: str, mode: str = "RGB") -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        Image.new(mode, (64, 48), "teal").save(tmp / name, fmt)
        return tmp / name

    return make


def _unknown_codec(old: bytes, new: bytes) -> Callable[[Path], Path]:
    """An MKV whose track names a codec nobody knows (its CodecID rewritten)."""
    def make(tmp: Path) -> Path:
        data = make_video(tmp / "clip.mkv", seconds=0.5).read_bytes()
        assert old in data and len(old) == len(new)
        (tmp / "odd.mkv").write_bytes(data.replace(old, new))
        return tmp / "odd.mkv"

    return make


def _subtitles_only(tmp: Path) -> Path:
    (tmp / "words.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    ffmpeg("-i", str(tmp / "words.srt"), str(tmp / "words.mkv"))
    return tmp / "words.mkv"


CASES = [
    # (what, make the file in a folder, settings, code)
    ("zero bytes", _write("empty.mp4", b""), {}, "empty_file"),
    ("binary junk named .mp4", _write("movie.mp4", bytes(range(1, 256))[::-1] * 100 + b"\0" * 1000), {},
     "not_media"),
    ("text named .mov", _write("notes.mov", b"Meeting notes\n\n- ship it\n" * 20), {}, "not_media"),
    ("a PDF header on junk", _write("doc.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 8), {}, "decode_failed"),
    ("a PDF whose first page is not a page", lambda tmp: one_page_pdf(tmp / "doc.pdf", b"", page=b"/Type /Pagx"), {},
     "decode_failed"),
    ("a video cut in half", _cut_video, {}, "truncated"),
    ("a JPEG cut off", _cut_jpeg, {}, "truncated"),
    ("a PNG bomb beyond twice the pixel limit", _bomb(14000), {}, "too_large"),
    ("a PNG bomb just above the pixel limit", _bomb(8200), {}, "too_large"),
    ("a picture above a configured pixel limit", _png((101, 100)), {"FAIRLANE_MAX_PIXELS": 100 * 100}, "too_large"),
    ("a video above a configured pixel limit", lambda tmp: make_video(tmp / "big.mp4"),
     {"FAIRLANE_MAX_PIXELS": 100 * 100}, "too_large"),
    ("media above a configured duration", lambda tmp: make_video(tmp / "long.mp4", seconds=1),
     {"FAIRLANE_MAX_DURATION_S": 0.5}, "too_long"),
    ("media whose header under-declares its duration", _under_declared, {"FAIRLANE_MAX_DURATION_S": 2}, "too_long"),
    # Limits come from the header, before packets are read or frames decoded:
    # this file would otherwise fail as truncated.
    ("a cut-off video above the pixel limit", _cut_video, {"FAIRLANE_MAX_PIXELS": 100 * 100}, "too_large"),
    ("a cut-off video above the duration limit", _cut_video, {"FAIRLANE_MAX_DURATION_S": 1}, "too_long"),
    ("a container off the allow-list", _y4m, {}, "unsupported_container"),
    ("a codec off the allow-list", lambda tmp: make_video(tmp / "odd.mkv", seconds=0.2, audio=False,
                                                          video_args=("-c:v", "ffvhuff")), {}, "unsupported_codec"),
    ("subtitles and nothing else", _subtitles_only, {}, "no_media_streams"),
    ("a video track in a codec nobody knows", _unknown_codec(b"V_MPEG4/ISO/AVC", b"V_FAIRLANE/NOPE"), {},
     "unsupported_codec"),
    ("an audio track in a codec nobody knows", _unknown_codec(b"A_AAC", b"A_ZZZ"), {}, "unsupported_codec"),
    # 2 KB whose last frame is at 14,000 s: without the check, hours of
    # repeated frames, and a retry with a time limit lifted to match.
    ("a few KB whose timestamps claim four hours", lambda tmp: timestamped(tmp / "gap.mkv", [0, 0.04, 14_000]), {},
     "sparse_media"),
    # Images in formats Pillow can read but Fairlane does not promise
    # (probe.ALLOWED_IMAGE_FORMATS): never handed to their Pillow plugin.
    ("an EPS drawing (PostScript for Ghostscript)", _eps_with_preview, {}, "not_media"),
    ("a BMP image", _pillow_saves("BMP", "old.bmp"), {}, "unsupported_container"),
    ("a TGA image", _pillow_saves("TGA", "game.tga"), {}, "not_media"),
    ("a PCX image", _pillow_saves("PCX", "paint.pcx"), {}, "unsupported_container"),
    ("a DDS texture", _pillow_saves("DDS", "texture.dds"), {}, "unsupported_container"),
    ("a QOI image", _pillow_saves("QOI", "quite.qoi"), {}, "unsupported_container"),
    ("a JPEG 2000 image", _pillow_saves("JPEG2000", "scan.jp2"), {}, "unsupported_container"),
    ("a SPIDER image", _pillow_saves("SPIDER", "cryo.spi", mode="F"), {}, "not_media"),
    ("an ICNS icon", _pillow_saves("ICNS", "app.icns"), {}, "not_media"),
    ("an AVIF its decoder gives up on", _avif_of_85_bit_samples, {}, "decode_failed"),
]


@pytest.mark.parametrize(("make", "overrides", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_file_that_cannot_be_processed_fails_its_job_once_with_its_code(run_job, settings, tmp_path: Path,
                                                                          make, overrides, code):
    src = make(tmp_path)
    for name, value in overrides.items():
        setattr(settings, name, value)
    job = run_job(src)
    assert (job.status, job.error_code) == ("failed", code), job.error_message
    assert job.error_message and job.attempts == 1 and not job.outputs.exists()
    assert run_job.leftovers() == []


def test_demuxers_that_open_other_files_are_never_allowed():
    assert not ALLOWED_CONTAINERS & {"hls", "concat", "image2", "tee", "http", "data", "lavfi", "ffmetadata", "srt",
                                     "ass", "webvtt"}


def test_a_file_whose_timestamps_claim_hours_earns_no_longer_time_limit(run_job, tmp_path: Path):
    """What used to lift the limit: the probe's estimate from the claimed
    duration, on the retry after the first attempt's soft time limit. The
    job fails at its first attempt, and the probe records no estimate."""
    from uploads.services import job_time_limits

    src = timestamped(tmp_path / "gap.mkv", [0, 0.04, 14_000])
    job = run_job(src)
    assert (job.status, job.error_code, job.attempts) == ("failed", "sparse_media", 1)
    assert job.media_info == {} and job_time_limits(job)["soft_time_limit"] < 600
