"""The probe decides from content, with real files made by ffmpeg and Pillow."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.media import make_video
from transcoding.errors import MediaError
from transcoding.probe import probe_file


def test_a_video_is_recognised_whatever_its_name(tmp_path: Path):
    video = make_video(tmp_path / "holiday.mov", seconds=1, size="160x120")
    probe = probe_file(video.rename(tmp_path / "holiday.jpg"))
    assert probe.kind == "video" and probe.container == "mov"
    assert (probe.width, probe.height) == (160, 120)
    assert 0.9 < probe.duration_s < 1.2
    assert {s.type for s in probe.streams} == {"video", "audio"}


def test_an_image_is_an_image(tmp_path: Path):
    Image.new("RGB", (64, 48), "red").save(tmp_path / "x.mp4", "PNG")
    probe = probe_file(tmp_path / "x.mp4")
    assert (probe.kind, probe.container, probe.width, probe.height) == ("image", "png", 64, 48)


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", "empty_file"),
        (b"#EXTM3U\n#EXTINF:10,\n/etc/passwd\n", "not_media"),
        (b"ffconcat version 1.0\nfile '/etc/passwd'\n", "not_media"),
        (bytes(range(256)) * 64, "not_media"),
    ],
)
def test_non_media_fails_with_a_specific_code(tmp_path: Path, content: bytes, code: str):
    path = tmp_path / "upload.mp4"
    path.write_bytes(content)
    with pytest.raises(MediaError) as err:
        probe_file(path)
    assert err.value.code == code
