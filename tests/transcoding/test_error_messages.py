"""What a failed job tells its owner (the job page, the API, emails,
webhooks) never names the server's paths, work folders, host or memory:
each failing path below is driven by a real file through a whole job."""
from __future__ import annotations

import random
import re
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from tests.media import ffmpeg, make_video

pytestmark = pytest.mark.django_db

_ABSOLUTE_PATH = re.compile(r"(?:^|[\s'\"(:=])/[\w.~-]")
_MEMORY_ADDRESS = re.compile(r"0x[0-9a-f]{6,}", re.I)


def server_details(message: str, *, folders: list[Path]) -> list[str]:
    """What in `message` belongs to the server rather than to the file."""
    found = [str(f) for f in folders if str(f) in message]
    found += _ABSOLUTE_PATH.findall(message) + _MEMORY_ADDRESS.findall(message)
    host = socket.gethostname()
    if re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", message):
        found.append(host)
    return found


def _ogg_then_junk(tmp: Path) -> Path:
    """Two seconds of Vorbis followed by 70 KB without an Ogg page: the
    demuxer gives up with an error that PyAV words with the file's path."""
    ffmpeg("-f", "lavfi", "-i", "sine=duration=2", "-c:a", "libvorbis", str(tmp / "tone.ogg"))
    junk = random.Random(7).randbytes(70_000).replace(b"OggS", b"Oggs")
    (tmp / "tone-and-junk.ogg").write_bytes((tmp / "tone.ogg").read_bytes() + junk)
    return tmp / "tone-and-junk.ogg"


def _png_video(tmp: Path, *, smash: Callable[[int], bool]) -> Path:
    """A PNG-coded MKV whose frames `smash(n)` picks have their pixel data
    overwritten (the headers stay, so the probe sees a normal stream)."""
    data = bytearray(make_video(tmp / "png.mkv", seconds=1, size="64x48", audio=False, rate=10,
                                video_args=("-c:v", "png")).read_bytes())
    signature = b"\x89PNG\r\n\x1a\n"
    starts = [m.start() for m in re.finditer(re.escape(signature), data)]
    for n, start in enumerate(starts):
        if smash(n):
            at = start + len(signature) + 25 + 8  # after IHDR, into the first IDAT's data
            data[at:at + 32] = b"\x55" * 32
    (tmp / "smashed.mkv").write_bytes(bytes(data))
    return tmp / "smashed.mkv"


def _cut_jpeg(tmp: Path) -> Path:
    Image.effect_noise((400, 300), 64).convert("RGB").save(tmp / "whole.jpg", quality=90)
    (tmp / "cut.jpg").write_bytes((tmp / "whole.jpg").read_bytes()[:4000])
    return tmp / "cut.jpg"


def _pdf_header_on_junk(tmp: Path) -> Path:
    (tmp / "doc.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 8)
    return tmp / "doc.pdf"


CASES = [
    # (the failing path, make the file, code)
    ("the probe's packet scan (PyAV)", _ogg_then_junk, "truncated"),
    ("the probe's first-frame decode (PyAV)", lambda tmp: _png_video(tmp, smash=lambda n: n == 0), "decode_failed"),
    ("ffmpeg's stderr", lambda tmp: _png_video(tmp, smash=lambda n: n > 0), "decode_failed"),
    ("Pillow's decoder", _cut_jpeg, "truncated"),
    ("pdfium", _pdf_header_on_junk, "decode_failed"),
]


@pytest.mark.parametrize(("make", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_failed_job_names_no_server_path_host_or_address(run_job, tmp_path: Path, make, code):
    src = make(tmp_path)
    job = run_job(src)
    assert (job.status, job.error_code) == ("failed", code), job.error_message
    assert job.error_message
    assert server_details(job.error_message, folders=[run_job.media_root, tmp_path]) == [], job.error_message
