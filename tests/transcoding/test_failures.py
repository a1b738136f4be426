"""Files that must fail, each with its own code, before any output exists."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.media import ffmpeg, make_video
from transcoding import pipelines
from transcoding.errors import MediaError
from transcoding.probe import ALLOWED_CONTAINERS, Probe, _probe_av, probe_file
from transcoding.services import limits_check


def _code(fn, *args) -> str:
    with pytest.raises(MediaError) as err:
        fn(*args)
    assert err.value.message
    return err.value.code


def test_binary_junk_is_not_media_whatever_its_name(tmp_path: Path):
    path = tmp_path / "movie.mp4"
    path.write_bytes(bytes(range(1, 256))[::-1] * 100 + b"\x00" * 1000)
    assert _code(probe_file, path) == "not_media"


def test_a_playlist_with_a_byte_order_mark_is_still_text(tmp_path: Path):
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"\xef\xbb\xbf#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n")
    assert _code(probe_file, path) == "not_media"


def test_a_cut_off_video_is_truncated(tmp_path: Path):
    whole = make_video(tmp_path / "whole.mp4", seconds=2, size="320x240",
                       video_args=("-c:v", "libx264", "-preset", "ultrafast", "-movflags", "+faststart"))
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert _code(probe_file, cut) == "truncated"


def test_a_cut_off_jpeg_is_truncated(tmp_path: Path, transcode):
    Image.effect_noise((400, 300), 64).convert("RGB").save(tmp_path / "whole.jpg", quality=90)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes((tmp_path / "whole.jpg").read_bytes()[:3000])
    assert _code(transcode, cut) == "truncated"


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path: Path):
    Image.new("1", (14000, 14000)).save(tmp_path / "bomb.png")  # ~25 MB of pixels in a few KB
    assert (tmp_path / "bomb.png").stat().st_size < 200_000
    assert _code(probe_file, tmp_path / "bomb.png") == "too_large"


def test_pictures_above_the_pixel_limit_are_too_large(tmp_path: Path, settings):
    settings.FAIRLANE_MAX_PIXELS = 100 * 100
    Image.new("RGB", (101, 100)).save(tmp_path / "big.png")
    assert _code(limits_check, probe_file(tmp_path / "big.png")) == "too_large"
    assert _code(limits_check, probe_file(make_video(tmp_path / "big.mp4", size="160x120"))) == "too_large"


def test_media_above_the_duration_limit_is_too_long(tmp_path: Path, settings):
    settings.FAIRLANE_MAX_DURATION_S = 0.5
    assert _code(limits_check, probe_file(make_video(tmp_path / "long.mp4", seconds=1))) == "too_long"


def test_a_container_outside_the_allow_list_is_refused(tmp_path: Path):
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:duration=0.2", "-pix_fmt", "yuv420p", str(tmp_path / "raw.y4m"))
    assert _code(probe_file, tmp_path / "raw.y4m") == "unsupported_container"


def test_a_codec_outside_the_allow_list_is_refused(tmp_path: Path):
    src = make_video(tmp_path / "odd.mkv", seconds=0.2, audio=False, video_args=("-c:v", "ffvhuff"))
    assert _code(probe_file, src) == "unsupported_codec"


def test_demuxers_that_open_other_files_are_never_allowed():
    assert not ALLOWED_CONTAINERS & {"hls", "concat", "image2", "tee", "http", "data", "lavfi", "ffmetadata"}


@pytest.mark.parametrize("text", [
    "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n{secret}\n#EXT-X-ENDLIST\n",
    "ffconcat version 1.0\nfile '{secret}'\n",
])
def test_a_playlist_that_slips_past_the_text_check_is_refused_by_the_demuxer_allow_list(tmp_path: Path, text):
    secret = make_video(tmp_path / "secret.ts", seconds=0.5, audio=False)
    playlist = tmp_path / "upload.mp4"
    playlist.write_text(text.format(secret=secret))
    # Refused at open: as an unreadable MP4, or as a demuxer off the list.
    assert _code(_probe_av, playlist) in {"not_media", "unsupported_container"}


def test_a_playlist_that_slips_past_the_probe_is_still_not_followed(tmp_path: Path):
    """Defence in depth: ffmpeg is forced to the probed demuxer, so a playlist
    naming a real local segment is read as a (broken) MP4, never as HLS."""
    secret = make_video(tmp_path / "secret.ts", seconds=0.5, audio=False)
    playlist = tmp_path / "upload.mp4"
    playlist.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n{secret}\n#EXT-X-ENDLIST\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    fake = Probe("video", "mov", 1.0, 160, 120, fps=25.0)
    assert _code(pipelines.video, playlist, workdir, fake, lambda pct: None) == "decode_failed"
    assert not (workdir / "video.mp4").exists() or (workdir / "video.mp4").stat().st_size == 0
