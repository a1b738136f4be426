"""The probe decides from content, with real files made by ffmpeg and Pillow."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.media import ffmpeg, make_video, rotated, timestamped
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


def test_the_probe_reads_rotation_hdr_and_the_default_audio_track(tmp_path: Path):
    src = make_video(tmp_path / "hdr.mkv", size="320x240", audio_tracks=2,
                     vf="setparams=color_trc=smpte2084:color_primaries=bt2020:colorspace=bt2020nc,format=yuv420p10le",
                     video_args=("-c:v", "libx264", "-preset", "ultrafast"),
                     audio_args=("-c:a", "aac", "-disposition:a:0", "0", "-disposition:a:1", "default"))
    probe = probe_file(src)
    assert (probe.hdr_transfer, probe.audio_index, probe.fps, probe.frames) == ("smpte2084", 1, 25.0, 25)
    phone = rotated(make_video(tmp_path / "land.mp4", audio=False), tmp_path / "phone.mp4", -90)
    assert probe_file(phone).rotation in (90, 270) and probe_file(phone).display_size == (120, 160)


def test_cover_art_does_not_make_music_a_video(tmp_path: Path):
    Image.new("RGB", (32, 32)).save(tmp_path / "cover.png")
    ffmpeg("-f", "lavfi", "-i", "sine=duration=0.5", "-i", str(tmp_path / "cover.png"), "-map", "0:a", "-map", "1:v",
           "-c:a", "aac", "-c:v", "png", "-disposition:v", "attached_pic", str(tmp_path / "song.m4a"))
    probe = probe_file(tmp_path / "song.m4a")
    assert probe.kind == "audio" and [s.type for s in probe.streams] == ["audio"]


def test_decoders_off_the_allow_list_are_never_opened_not_even_for_unused_streams(tmp_path: Path):
    """Opening a file opens a decoder for every stream to learn its
    parameters (PyAV in the probe, ffmpeg before it maps anything). A
    subtitle stream is never checked nor used, so its decoder must not run:
    libavcodec says so when it refuses one."""
    import subprocess

    import av.logging

    from transcoding import ffmpeg as fairlane_ffmpeg
    from transcoding.probe import open_options

    (tmp_path / "words.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    src = make_video(tmp_path / "subtitled.mkv", seconds=0.5, size="64x48", audio=False)
    ffmpeg("-i", str(src), "-i", str(tmp_path / "words.srt"), "-map", "0", "-map", "1", "-c", "copy",
           str(tmp_path / "both.mkv"))
    refused = "Codec (srt) not on whitelist"
    level = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture(True) as logs, av.open(str(tmp_path / "both.mkv"), options=open_options()):
            pass
    finally:
        av.logging.set_level(level)
    assert any(refused in message for _, _, message in logs), logs
    run = subprocess.run([fairlane_ffmpeg.FFMPEG, "-hide_banner", "-loglevel", "error",
                          *fairlane_ffmpeg.input_args(tmp_path / "both.mkv", "matroska"), "-map", "0:v", "-f", "null",
                          "-"], capture_output=True, text=True)
    assert run.returncode == 0 and refused in run.stderr, run.stderr
    assert probe_file(tmp_path / "both.mkv").kind == "video"  # and the file itself is fine


# Four hours (the duration limit) minus a little: what the truncation check
# and the duration limit both let through.
_HOURS_S = 14_000.0


@pytest.mark.parametrize(("name", "frames_at_s", "audio_at_s"), [
    ("gap.mkv", [0, 0.04, 0.08, _HOURS_S], []),
    ("gap.mp4", [0, 0.04, 0.08, _HOURS_S], []),
    ("clip-then-far-frame.mkv", [n / 25 for n in range(50)] + [_HOURS_S], []),
    ("audio-gap.mkv", [0, 0.04, 0.08], [0, 1024 / 48000, _HOURS_S]),
    # mov's index makes the average rate 3 frames / 600 s: each frame held
    # MAX_FRAME_REPEAT intervals of that rate backed 1,600 s.
    ("ten-minutes.mp4", [0, 0.04, 600], []),
], ids=["two frames hours apart (mkv)", "two frames hours apart (mp4)", "a clip, then one frame hours later",
        "two audio packets hours apart", "three frames, the last ten minutes on (mp4)"])
def test_a_few_packets_whose_timestamps_claim_hours_are_refused(tmp_path: Path, name, frames_at_s, audio_at_s):
    """The ladder's constant frame rate fills gaps with repeated frames and
    the audio resampler with silence: the work must follow what the file
    holds, not what its timestamps say."""
    src = timestamped(tmp_path / name, frames_at_s, audio_at_s=audio_at_s)
    assert src.stat().st_size < 8_000
    with pytest.raises(MediaError) as caught:
        probe_file(src)
    assert caught.value.code == "sparse_media", caught.value.message


@pytest.mark.parametrize(("name", "frames_at_s", "audio_at_s"), [
    # A still picture over continuous sound (podcasts, music): the audio backs the length.
    ("still.mkv", [0], [n * 1024 / 48000 for n in range(round(20 * 48000 / 1024))]),
    # A clip that pauses on one frame for a few seconds (variable frame rate).
    ("pause.mkv", [n / 25 for n in range(50)] + [2.0 + n / 25 for n in range(50)] + [9.0], []),
    # A slideshow: one picture every 10 s (each may back 8 s: 80 % is backed).
    ("slideshow.mp4", [10.0 * n for n in range(7)], []),
], ids=["a still picture over 20 s of sound", "a clip that holds a frame for 5 s", "a slideshow, a picture each 10 s"])
def test_media_whose_packets_back_its_length_passes(tmp_path: Path, name, frames_at_s, audio_at_s):
    probe = probe_file(timestamped(tmp_path / name, frames_at_s, audio_at_s=audio_at_s))
    assert probe.kind == "video" and probe.duration_s > 8
