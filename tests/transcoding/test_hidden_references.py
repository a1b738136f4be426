"""Files that try to make ffmpeg read other files or the network: playlists
and concat lists uploaded as video, and references hidden inside ordinary
containers. Each is either refused with its code or processed without
anything it names ever being opened, which a Tripwire (a FIFO and a
listening socket named by the file) would notice."""
from __future__ import annotations

import subprocess
from pathlib import Path

import av
import pytest

import media

from tests.media import (
    FFMPEG, Tripwire, avi_with_gab2_subtitle, bait_playlist, make_video, video_facts, with_external_track,
)
from tests.media import ffmpeg as ffmpeg_cli
from transcoding import ffmpeg, pipelines
from transcoding.errors import MediaError
from transcoding.probe import Probe, _probe_av, configured_limits, open_options

pytestmark = pytest.mark.django_db


@pytest.fixture
def tripwire(run_job):
    """Bait in the folder the user's uploads are stored in, where a relative
    reference inside an upload would point."""
    with Tripwire(run_job.folder) as wire:
        yield wire


@pytest.mark.parametrize("text", [
    "{playlist}",
    "ffconcat version 1.0\nfile '{path}'\nfile '{url}'\n",
    "\ufeff{playlist}",  # a byte order mark in front
])
def test_a_playlist_or_concat_list_uploaded_as_mp4_fails_as_not_media_and_opens_nothing(run_job, tripwire,
                                                                                        tmp_path: Path, text):
    upload = tmp_path / "clip.mp4"
    upload.write_text(text.format(playlist=bait_playlist(tripwire), path=tripwire.path, url=tripwire.url))
    job = run_job(upload)
    assert (job.status, job.error_code, job.attempts) == ("failed", "not_media", 1)
    assert tripwire.touched == []


@pytest.mark.parametrize("text", [
    "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n{path}\n#EXT-X-ENDLIST\n",
    "ffconcat version 1.0\nfile '{path}'\n",
])
def test_a_playlist_that_slips_past_the_text_check_is_refused_by_the_demuxer_allow_list(tmp_path: Path, text):
    with Tripwire(tmp_path) as wire:
        playlist = tmp_path / "upload.mp4"
        playlist.write_text(text.format(path=wire.path))
        with pytest.raises(MediaError) as err:
            _probe_av(playlist, configured_limits())  # as an unreadable MP4, or as a demuxer off the list
    assert err.value.code in {"not_media", "unsupported_container"} and wire.touched == []


def test_a_playlist_that_slips_past_the_probe_is_still_not_followed(tmp_path: Path):
    """Defence in depth: ffmpeg is forced to the probed demuxer, so a playlist
    is read as a (broken) MP4, never as HLS."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    with Tripwire(tmp_path) as wire:
        (tmp_path / "upload.mp4").write_text(bait_playlist(wire))
        with pytest.raises(MediaError) as err:
            pipelines.video(tmp_path / "upload.mp4", workdir, Probe("video", "mov", 1.0, 160, 120, fps=25.0),
                            lambda pct: None)
    assert err.value.code == "decode_failed" and wire.touched == []


def test_a_reference_movie_fails_and_the_file_it_names_is_never_opened(run_job, tripwire, tmp_path: Path):
    movie = with_external_track(make_video(tmp_path / "clip.mp4"), tmp_path / "reference.mov", tripwire.path)
    job = run_job(movie)
    assert (job.status, job.error_code, job.attempts) == ("failed", "external_reference", 1)
    stored = run_job.folder / "stored.mov"  # where a relative reference points
    media.fetch(job.upload.file.name, stored)
    with pytest.raises(MediaError):  # ffmpeg itself, past the probe: the references stay closed
        ffmpeg.run([*ffmpeg.input_args(stored, "mov"), "-map", "0", "-f", "null", "-"], duration_s=1.0)
    assert tripwire.touched == []
    # The bait is live: a demuxer allowed to follow references opens it.
    subprocess.run([FFMPEG, "-v", "quiet", "-enable_drefs", "1", "-i", str(stored), "-f", "null", "-"], timeout=60)
    assert tripwire.touched


def _with_playlist_subtitle(dst: Path, playlist: str, *extra: str) -> Path:
    """A 1 s clip with a subtitle track whose text is the playlist, the
    playlist in a tag too, and `extra` output options."""
    subs = dst.with_suffix(".srt")
    subs.write_text(f"1\n00:00:00,000 --> 00:00:01,000\n{playlist}\n")
    ffmpeg_cli("-f", "lavfi", "-i", "testsrc2=size=160x120:duration=1", "-f", "lavfi", "-i", "sine=duration=1",
               "-f", "srt", "-i", str(subs), "-map", "0:v", "-map", "1:a", "-map", "2:s",
               "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac",
               "-metadata", f"comment={playlist}", *extra, str(dst))
    return dst


def _mkv_with_playlist_subtitle_and_attachment(tmp: Path, playlist: str) -> Path:
    (tmp / "playlist.m3u8").write_text(playlist)
    return _with_playlist_subtitle(tmp / "hidden.mkv", playlist, "-c:s", "srt", "-attach", str(tmp / "playlist.m3u8"),
                                   "-metadata:s:t", "mimetype=application/vnd.apple.mpegurl")


def _mp4_with_playlist_subtitle(tmp: Path, playlist: str) -> Path:
    return _with_playlist_subtitle(tmp / "hidden.mp4", playlist, "-c:s", "mov_text")


def _avi_with_gab2_playlist(tmp: Path, playlist: str) -> Path:
    return avi_with_gab2_subtitle(tmp / "hidden.avi", playlist)


@pytest.mark.parametrize("make", [_mkv_with_playlist_subtitle_and_attachment, _mp4_with_playlist_subtitle,
                                  _avi_with_gab2_playlist], ids=["mkv subtitle, attachment and tag",
                                                                 "mp4 subtitle and tag", "avi gab2 subtitle"])
def test_a_playlist_hidden_inside_a_container_is_never_followed_nor_copied(run_job, tripwire, tmp_path: Path,
                                                                           make):
    """Subtitle, attachment and data streams are neither refused (phones and
    editors write them) nor mapped; the file's own video comes out."""
    src = make(tmp_path, bait_playlist(tripwire))
    with av.open(str(src)) as container:  # the bait really is in there
        assert any(s.type in ("subtitle", "attachment") for s in container.streams)
    job = run_job(src)
    assert job.status == "succeeded", job.error_message
    assert tripwire.touched == []
    outputs = run_job.outputs(job, tmp_path)
    assert outputs
    for output in outputs:
        content = output.read_bytes()
        assert str(tripwire.path).encode() not in content and Tripwire.MARKER not in content, output
    mp4 = tmp_path / "copies" / job.outputs.get(name="mp4").file.name
    facts = video_facts(mp4)
    assert (facts["video_codec"], facts["pix_fmt"]) == ("h264", "yuv420p")
    with av.open(str(mp4)) as container:
        assert {s.type for s in container.streams} <= {"video", "audio"}


def test_a_gab2_subtitle_never_reaches_a_nested_demuxer(tmp_path: Path):
    """The AVI demuxer opens a GAB2 payload with a nested demuxer; ours
    inherits the demuxer allow-list, which names no subtitle format."""
    avi = avi_with_gab2_subtitle(tmp_path / "subs.avi", "1\n00:00:00,000 --> 00:00:01,000\nhello\n")

    def subtitle_codec(options: dict) -> str | None:
        with av.open(str(avi), options=options) as container:
            ctx = container.streams.subtitles[0].codec_context
            return ctx.name if ctx is not None else None

    assert subtitle_codec({}) == "srt"  # unrestricted, the nested demuxer reads it
    assert subtitle_codec(open_options()) is None
