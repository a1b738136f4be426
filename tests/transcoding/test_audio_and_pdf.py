"""Audio becomes AAC and a waveform; a PDF a first-page thumbnail and a page count."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.media import ffmpeg, video_facts
from transcoding.probe import probe_file


def test_audio_becomes_aac_in_m4a_and_a_waveform(transcode, tmp_path: Path):
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=300:duration=1.5", "-c:a", "pcm_s16le", str(tmp_path / "take.wav"))
    out = transcode(tmp_path / "take.wav")
    facts = video_facts(out["m4a"][0])
    assert facts["audio_codec"] == "aac" and abs(facts["duration_s"] - 1.5) < 0.1
    with Image.open(out["waveform"][0]) as wave:
        assert (wave.format, wave.size) == ("PNG", (1200, 240))


SINE = ["-f", "lavfi", "-i", "sine=frequency=440:duration=10"]
STEREO = ["-f", "lavfi", "-i", "aevalsrc=sin(440*2*PI*t)|sin(660*2*PI*t):d=10"]


# (what the AAC is asked for, what the encoder gives at least): at 8 kHz it
# has no use for more than about 30 kbit/s.
@pytest.mark.parametrize(("name", "source", "channels", "kbps", "rate"), [
    # The case: an 80 KB mono MP3 had become a 203 KB stereo M4A at 162 kbit/s.
    ("voice.mp3", [*SINE, "-ac", "1", "-c:a", "libmp3lame", "-b:a", "64k"], 1, (64, 60), 48000),
    ("song.mp3", [*STEREO, "-c:a", "libmp3lame", "-b:a", "128k"], 2, (128, 120), 48000),
    ("take.wav", [*SINE, "-ac", "1", "-ar", "48000", "-c:a", "pcm_s16le"], 1, (96, 90), 48000),  # mono: 96 at most
    ("master.flac", [*STEREO, "-ar", "96000", "-c:a", "flac"], 2, (160, 150), 48000),
    ("memo.wav", [*SINE, "-ac", "1", "-ar", "8000", "-c:a", "pcm_u8"], 1, (64, 25), 8000),  # keeps its rate
    ("memo.3gp", [*SINE, "-ar", "8000", "-c:a", "libopencore_amrnb", "-b:a", "12.2k"], 1, (12, 11), 8000),
    ("surround.wav", [*SINE, "-ac", "6", "-ar", "48000", "-c:a", "pcm_s16le"], 2, (160, 150), 48000),
])
def test_the_aac_never_carries_more_than_the_source(transcode, tmp_path: Path, name, source, channels, kbps, rate):
    """Not above the source's bitrate or channels (stereo at most), nor above
    96 kbit/s mono, 160 kbit/s stereo; 48 kHz, or the source's rate below 32 kHz."""
    ffmpeg(*source, str(tmp_path / name))
    m4a = probe_file(transcode(tmp_path / name)["m4a"][0])
    assert (m4a.audio_stream.channels, m4a.audio_stream.sample_rate) == (channels, rate)
    asked, at_least = kbps
    assert at_least <= m4a.audio_kbps <= asked * 1.01, m4a.audio_kbps  # AAC's rate control: within 1 %


def test_an_mp3_with_cover_art_is_audio_not_video(transcode, tmp_path: Path):
    Image.new("RGB", (60, 60), "purple").save(tmp_path / "cover.jpg")
    ffmpeg("-f", "lavfi", "-i", "sine=duration=1", "-i", str(tmp_path / "cover.jpg"), "-map", "0:a", "-map", "1:v",
           "-c:a", "libmp3lame", "-c:v", "copy", "-disposition:v", "attached_pic", str(tmp_path / "song.mp3"))
    assert probe_file(tmp_path / "song.mp3").kind == "audio"
    assert set(transcode(tmp_path / "song.mp3")) == {"m4a", "waveform"}


def test_a_pdf_gives_a_first_page_thumbnail_and_its_page_count(transcode, tmp_path: Path):
    pages = [Image.new("RGB", (600, 800), c) for c in ("white", "gray", "black")]
    pages[0].save(tmp_path / "doc.pdf", save_all=True, append_images=pages[1:])
    path, produced = transcode(tmp_path / "doc.pdf")["thumbnail"]
    assert produced.metadata["pages"] == 3
    with Image.open(path) as thumb:
        assert thumb.size == (240, 320) and thumb.getpixel((100, 100))[0] > 240


def test_a_job_that_succeeds_leaves_its_outputs_stored_and_no_scratch(run_job, tmp_path: Path):
    src = tmp_path / "tone.wav"
    ffmpeg("-f", "lavfi", "-i", "sine=duration=1", str(src))
    job = run_job(src)
    assert job.status == "succeeded", job.error_message
    stored = run_job.leftovers()
    assert sorted(stored) == sorted(o.file.name for o in job.outputs.all())  # outputs only: scratch is gone
    assert all(key.startswith(f"outputs/{job.id}/1/") for key in stored)
