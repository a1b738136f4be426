"""Chunked encoding (transcoding/chunks.py) on a generated clip with a moving
pattern and a tone, every part run here in turn as the workers would run
them: the joins, the quality against a single pass, the finalizer's files."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import media
from tests.hls_checks import (
    continuity_breaks,
    joined,
    master_audio_uri,
    playlist_segments,
    psnr,
    stream_facts,
)
from tests.media import make_video, video_facts
from transcoding import chunks, ffmpeg, ladder, streamed
from transcoding.probe import Probe, probe_file

SECONDS, FPS = 14, 25


@pytest.fixture
def short_segments(settings):
    """2 s segments, chunks of 4 s (two segments): a 14 s clip is 4 chunks,
    the last one short, so the test has three joins and a ragged end."""
    settings.FAIRLANE_HLS_SEGMENT_S = 2
    settings.FAIRLANE_CHUNK_S = 4
    settings.FAIRLANE_CHUNK_THRESHOLD_S = 6


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("src") / "long.mp4", seconds=SECONDS, size="640x360", rate=FPS)


def chunked_ladder(src: Path, out: Path, probe: Probe, *, first_feed=None) -> tuple[chunks.ChunkPlan, list]:
    """Run every chunk (the first also makes the sound) and the finalizer,
    each in a folder of its own, moving files between them as the store
    (and transcoding.services._finalize) would. `first_feed`: the first
    chunk reads the source from it, as while the source is still being
    fetched (transcoding/streamed.py)."""
    plan = chunks.plan_for(probe)
    hls, playlists = out / "final" / "hls", []
    hls.mkdir(parents=True)
    for index in range(len(plan.chunks)):
        work = out / f"chunk{index}"
        work.mkdir()
        if index == 0 and first_feed is not None:
            chunks.encode_chunk(None, work, probe, plan, index, lambda pct: None, feed=first_feed)
        else:
            chunks.encode_chunk(src, work, probe, plan, index, lambda pct: None)
        playlists.append(out / f"playlists{index}")
        for path in (work / "hls").rglob("*"):
            if path.is_file():
                target = (playlists[-1] if path.suffix == ".m3u8" else hls) / path.relative_to(work / "hls")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
        if index == 0:
            shutil.copy(work / "poster.jpg", out / "final" / "poster.jpg")
    assert plan.sound_in_first_chunk
    (playlists[0] / "audio" / "index.m3u8").replace(hls / "audio" / "index.m3u8")
    scratch = out / "scratch"
    scratch.mkdir()
    produced = chunks.finalize(hls, playlists, out / "final", scratch, plan, lambda pct: None)
    return plan, produced


@pytest.fixture(params=["file", "streamed"])
def chunked(request, short_segments, source, tmp_path, settings):
    """The ladder with every chunk read from the file, and with the first
    chunk (and the sound) read through the stream a large upload on object
    storage is encoded from while it arrives (the rest from the file, as
    the other parts read the whole upload)."""
    probe = probe_file(source)
    feed = None
    if request.param == "streamed":
        request.getfixturevalue("s3_storage")
        settings.FAIRLANE_SCRATCH_DIR = tmp_path / "worker-scratch"
        settings.FAIRLANE_STREAM_INPUT_BYTES = 0  # streamed, small as it is
        key = media.upload_key(owner_id=1)
        media.put_file(source, key)
        stream = streamed.start(key, tmp_path / "input")
        assert stream is not None and stream.layout.insert_at is not None  # ffmpeg wrote the moov last
        feed = stream.feed
    plan, produced = chunked_ladder(source, tmp_path, probe, first_feed=feed)
    return plan, produced, tmp_path / "final"


@pytest.mark.parametrize(("duration", "fps", "expected"), [
    (14.0, 25, [(0, 2), (2, 2), (4, 2), (6, 1)]),  # a ragged last segment in its own chunk
    (16.0, 25, [(0, 2), (2, 2), (4, 2), (6, 2)]),
    (3.0, 30, [(0, 2)]),
    (9.0, 24, [(0, 2), (2, 2), (4, 1)]),
])
def test_chunks_are_whole_segments_cut_at_the_same_frames(short_segments, duration, fps, expected):
    probe = Probe("video", "mov", duration, 640, 360, fps=fps)
    plan = chunks.plan_for(probe)
    assert plan.chunks == expected
    assert plan.segment_frames == 2 * fps
    assert [plan.start_s(i) for i in range(len(expected))] == [first * 2.0 for first, _ in expected]


def test_only_videos_longer_than_the_threshold_are_chunked(short_segments, settings):
    assert chunks.should_chunk(Probe("video", "mov", 6.5, 640, 360, fps=25))
    assert not chunks.should_chunk(Probe("video", "mov", 6.0, 640, 360, fps=25))
    assert not chunks.should_chunk(Probe("audio", "mov", 600.0))
    settings.FAIRLANE_CHUNKING = False
    assert not chunks.should_chunk(Probe("video", "mov", 600.0, 640, 360, fps=25))


def test_every_join_is_continuous_in_every_rendition_and_the_audio(chunked, source, tmp_path):
    plan, _, final = chunked
    master = final / "hls" / "master.m3u8"
    source_facts = video_facts(source)
    frame = 1 / FPS
    for r in plan.renditions:
        segments = playlist_segments(final / "hls" / r["name"] / "index.m3u8")
        assert len(segments) == plan.segment_files() == 8  # 7 segments of 2 s, the first split at its head
        stream = joined(segments, tmp_path / f"{r['name']}.ts")
        facts = stream_facts(stream, "video")
        assert facts.errors == 0
        # every frame exactly one frame after the one before: none duplicated, none missing
        assert facts.steps == {round(frame, 4)}, facts.steps
        assert facts.decoded == len(facts.pts_s) == source_facts["frames"] == SECONDS * FPS
        # a keyframe at every segment start, the head's end and the joins included, and nowhere else
        start = facts.pts_s[0]
        assert [round(k - start, 3) for k in facts.keyframes_s] == [0.0, ladder.HEAD_SEGMENT_S,
                                                                    *(2.0 * i for i in range(1, 7))]
        assert abs(len(facts.pts_s) * frame - source_facts["duration_s"]) <= frame
        assert continuity_breaks(stream) == 0
    audio_uri = master_audio_uri(master)
    assert audio_uri == "audio/index.m3u8"
    audio = stream_facts(joined(playlist_segments(final / "hls" / audio_uri), tmp_path / "audio.ts"), "audio")
    assert audio.errors == 0 and audio.steps == {round(1024 / 48000, 4)}
    assert abs(audio.decoded / 48000 - SECONDS) <= frame + 1024 / 48000
    video_start = stream_facts(joined(playlist_segments(final / "hls" / "240p" / "index.m3u8"),
                                      tmp_path / "v.ts"), "video").pts_s[0]
    assert abs(audio.pts_s[0] - video_start) < 0.05  # in sync from the start (AAC's priming delay only)


def test_the_master_names_the_audio_rendition_and_the_mp4_is_a_remux(chunked, source):
    _, produced, final = chunked
    master = (final / "hls" / "master.m3u8").read_text()
    assert master.count("#EXT-X-STREAM-INF:") == 2 and master.count('AUDIO="audio"') == 2
    assert "#EXT-X-MEDIA:TYPE=AUDIO" in master and 'CODECS="avc1.64' in master
    assert 'CHANNELS="1"' in master  # the source's sine is mono: so is its AAC (transcoding/aac.py)
    mp4 = video_facts(final / "video.mp4")
    assert (mp4["video_codec"], mp4["audio_codec"], mp4["display"], mp4["frames"]) == (
        "h264", "aac", (640, 360), SECONDS * FPS)
    assert abs(mp4["duration_s"] - SECONDS) <= 1 / FPS + 0.03
    assert {p.name for p in produced} == {"hls", "mp4", "poster", "storyboard", "storyboard_vtt"}
    assert produced[0].metadata["chunks"] == 4


def test_chunked_quality_equals_a_single_pass_within_half_a_decibel(chunked, source, tmp_path):
    plan, _, final = chunked
    probe = probe_file(source)
    single = tmp_path / "single"
    single.mkdir()
    ffmpeg.run(ladder.plan(source, single, probe, threads=1).args, duration_s=probe.duration_s)
    for r in plan.renditions:
        size = (r["width"], r["height"])
        one = psnr(joined(playlist_segments(single / "hls" / r["name"] / "index.m3u8"), tmp_path / "one.ts"),
                   source, size)
        parts = psnr(joined(playlist_segments(final / "hls" / r["name"] / "index.m3u8"), tmp_path / "parts.ts"),
                     source, size)
        assert abs(one - parts) <= 0.5, (r["name"], one, parts)
        assert parts > 30  # and both are a faithful picture, not equally broken


def test_continuity_counters_are_renumbered_across_joins(short_segments, source, tmp_path):
    probe = probe_file(source)
    plan = chunks.plan_for(probe)
    made = []
    for index in (0, 1):
        work = tmp_path / f"c{index}"
        work.mkdir()
        chunks.encode_chunk(source, work, probe, plan, index, lambda pct: None)
        made += sorted((work / "hls" / "240p").glob("seg_*.ts"))
    assert continuity_breaks(joined(made, tmp_path / "before.ts")) > 0  # each chunk's muxer starts again at 0
    chunks.continuity_renumber(made)
    assert continuity_breaks(joined(made, tmp_path / "after.ts")) == 0


def test_a_plan_stored_before_the_sound_followed_its_source_keeps_the_sound_of_its_time():
    """A long video split before (its plan in the parent's media_info) has
    parts still to run: they make the sound as its first parts did."""
    stored = {"duration_s": 90.0, "fps": 25.0, "segment_frames": 100, "chunks": [[0, 8], [8, 15]],
              "renditions": [{"name": "240p", "width": 426, "height": 240, "max_kbps": 400}], "mp4": "240p",
              "has_audio": True}
    assert chunks.ChunkPlan.from_json(stored).sound.args() == ["-c:a", "aac", "-b:a", "128k", "-ac", "2"]
