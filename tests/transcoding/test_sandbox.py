"""Pillow, pdfium and the probe decode in a child process with a memory
budget (transcoding/sandbox.py): a file beyond it fails as
`resource_limit` at its first attempt, and the worker goes on."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from tests.media import make_video, one_page_pdf
from transcoding import probe, sandbox
from transcoding.errors import MediaError

pytestmark = pytest.mark.django_db

MiB = 1024**2


def _shapes_pdf(count: int) -> Callable[[Path], Path]:
    """A page of `count` one-point squares: pdfium builds an object for each
    before it renders anything (about 350 bytes each), from about 25 bytes
    of file per 1,000 of them."""
    return lambda tmp: one_page_pdf(tmp / "shapes.pdf", b"0 0 1 1 re f\n" * count)


def _big_png(tmp: Path) -> Path:
    Image.new("RGBA", (4096, 4096), (10, 20, 30, 40)).save(tmp / "poster.png")  # 64 MiB decoded
    return tmp / "poster.png"


CASES = [
    # (what, make the file, budget): each needs a few times its budget.
    ("pdfium: a page of a million shapes (25 KB)", _shapes_pdf(1_000_000), 128 * MiB),
    ("Pillow: a 16-megapixel PNG", _big_png, 32 * MiB),
    # One 2160p frame is 12 MiB, beyond the budget with any number of decoder
    # threads (a 1080p frame's 3 MiB fitted when the decoder had one core).
    ("the probe's first-frame decode: a 2160p video", lambda tmp: make_video(tmp / "clip.mp4", seconds=0.2,
                                                                             size="3840x2160", audio=False), 8 * MiB),
]


@pytest.mark.parametrize(("make", "budget"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_file_beyond_the_decoding_budget_fails_as_resource_limit_and_the_worker_goes_on(
        run_job, settings, tmp_path: Path, make, budget):
    settings.FAIRLANE_DECODE_MAX_BYTES = budget
    job = run_job(make(tmp_path))
    assert (job.status, job.error_code, job.attempts) == ("failed", "resource_limit", 1), job.error_message
    assert job.error_message and run_job.leftovers() == []
    # This process (the worker) decoded nothing of it and carries on.
    settings.FAIRLANE_DECODE_MAX_BYTES = 2048 * MiB
    Image.new("RGB", (64, 48), "teal").save(tmp_path / "next.png")
    assert run_job(tmp_path / "next.png").status == "succeeded"


@pytest.mark.slow
def test_a_pdf_bomb_fails_as_resource_limit_with_the_default_budget(run_job, tmp_path: Path):
    """250 KB that pdfium would turn into about 3.5 GB of page objects."""
    job = run_job(_shapes_pdf(10_000_000)(tmp_path))
    assert (job.status, job.error_code, job.attempts) == ("failed", "resource_limit", 1), job.error_message


def test_a_call_returns_the_result_and_media_errors_cross_as_themselves(tmp_path: Path):
    assert sandbox.run(sum, [1, 2, 3], timeout_s=60, memory_bytes=256 * MiB) == 6
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(MediaError) as caught:
        sandbox.run(probe._probe, tmp_path / "empty", probe.configured_limits(), timeout_s=60,
                    memory_bytes=256 * MiB)
    assert caught.value.code == "empty_file"


@pytest.mark.parametrize(("fn", "args"), [(bytearray, (512 * MiB,)), (os.abort, ())],
                         ids=["an allocation beyond the budget", "a decoder that aborts"])
def test_a_child_beyond_its_budget_or_crashing_is_a_resource_limit(fn, args):
    with pytest.raises(MediaError) as caught:
        sandbox.run(fn, *args, timeout_s=60, memory_bytes=64 * MiB)
    assert caught.value.code == "resource_limit" and caught.value.message


def test_a_child_that_hangs_is_stopped_at_its_timeout_and_the_next_call_works():
    with pytest.raises(MediaError) as caught:
        sandbox.run(time.sleep, 600, timeout_s=0.5, memory_bytes=64 * MiB)
    assert caught.value.code == "timeout"
    assert sandbox.run(sum, [2, 2], timeout_s=60, memory_bytes=64 * MiB) == 4


def test_a_bug_in_the_child_is_not_blamed_on_the_file():
    with pytest.raises(RuntimeError, match="invalid literal"):
        sandbox.run(int, "not a number", timeout_s=60, memory_bytes=64 * MiB)
