"""The video pipeline on generated clips, checked with a real probe."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from tests.media import hls_variants, make_video, rotated, video_facts, web_ready
from transcoding import ladder
from transcoding.probe import Probe, probe_file


@pytest.mark.parametrize(
    ("size", "sar", "rotation", "expected"),
    [
        ((1920, 1080), "1:1", 0, ["426x240", "640x360", "854x480", "1280x720", "1920x1080"]),
        ((640, 360), "1:1", 0, ["426x240", "640x360"]),
        ((3840, 2160), "1:1", 0, ["426x240", "640x360", "854x480", "1280x720", "1920x1080"]),
        ((1920, 1080), "1:1", 90, ["240x426", "360x640", "480x854", "720x1280", "1080x1920"]),
        ((160, 120), "1:1", 0, ["160x120"]),
        ((641, 361), "1:1", 0, ["426x240", "640x360"]),
        ((720, 576), "64:45", 0, ["426x240", "640x360", "854x480"]),
    ],
)
def test_the_ladder_goes_up_to_but_never_above_the_source(size, sar, rotation, expected):
    probe = Probe("video", "mov", 10.0, *size, rotation=rotation, sample_aspect=sar)
    assert [f"{r.width}x{r.height}" for r in ladder.renditions_for(probe)] == expected


def test_a_clip_becomes_an_hls_ladder_an_mp4_and_a_poster_in_one_run(transcode, tmp_path: Path):
    out = transcode(make_video(tmp_path / "clip.mp4", seconds=2, size="640x360"))
    assert set(out) == {"hls", "mp4", "poster", "storyboard", "storyboard_vtt"}
    master, hls = out["hls"]
    assert master.name == "master.m3u8"
    variants = hls_variants(master)
    # Players start with the first variant listed: mid-ladder, not the lowest.
    assert [v["RESOLUTION"] for v in variants] == ["640x360", "426x240"]
    assert all("mp4a" in v["CODECS"] and int(v["BANDWIDTH"]) > 0 for v in variants)
    assert [r["name"] for r in hls.metadata["renditions"]] == ["240p", "360p"]
    for variant in variants:
        facts = video_facts(variant["segments"][0])
        assert (facts["video_codec"], facts["pix_fmt"], facts["audio_codec"]) == ("h264", "yuv420p", "aac")
    mp4, meta = out["mp4"]
    facts = video_facts(mp4)
    assert (facts["video_codec"], facts["pix_fmt"], facts["audio_codec"]) == ("h264", "yuv420p", "aac")
    assert facts["display"] == (640, 360) == (meta.metadata["width"], meta.metadata["height"])
    assert abs(facts["duration_s"] - 2.0) < 0.15 and meta.metadata["kbps"] > 0
    assert mp4.read_bytes().find(b"moov") < mp4.read_bytes().find(b"mdat")  # faststart
    with Image.open(out["poster"][0]) as poster:
        assert (poster.format, poster.size) == ("JPEG", (640, 360))


@pytest.mark.parametrize(
    ("names", "first"),
    [(["240p"], "240p"), (["240p", "360p"], "360p"), (["240p", "360p", "480p"], "360p"),
     (["240p", "360p", "480p", "720p"], "480p"), (["240p", "360p", "480p", "720p", "1080p"], "480p")],
)
def test_the_master_playlist_lists_a_mid_ladder_rendition_first_and_the_rest_in_order(names, first, tmp_path):
    lines = ["#EXTM3U", "#EXT-X-VERSION:6"]
    for name in names:
        lines += [f"#EXT-X-STREAM-INF:BANDWIDTH={int(name[:-1]) * 1000},RESOLUTION=1x{name[:-1]}",
                  f"{name}/index.m3u8"]
    (tmp_path / "master.m3u8").write_text("\n".join(lines) + "\n")
    ladder.master_playlist_start_mid_ladder(tmp_path)
    text = (tmp_path / "master.m3u8").read_text().splitlines()
    assert text[:2] == ["#EXTM3U", "#EXT-X-VERSION:6"]
    uris = [line.split("/")[0] for line in text if line.endswith(".m3u8")]
    assert uris == [first, *(n for n in names if n != first)]
    for uri in uris:  # each variant keeps its own attributes
        assert text[text.index(f"{uri}/index.m3u8") - 1].endswith(f"RESOLUTION=1x{uri[:-1]}")


def test_every_segment_starts_with_a_keyframe_at_the_segment_duration(transcode, tmp_path: Path, settings):
    settings.FAIRLANE_HLS_SEGMENT_S = 1
    out = transcode(make_video(tmp_path / "clip.mkv", seconds=3, size="320x240", audio=False))
    [variant] = hls_variants(out["hls"][0])
    durations = [float(line[8:].rstrip(",")) for line in variant["playlist"].read_text().splitlines()
                 if line.startswith("#EXTINF:")]
    assert len(durations) == 3 and all(abs(d - 1.0) < 0.05 for d in durations)
    for segment in variant["segments"]:
        with av.open(str(segment)) as container:
            first = next(container.demux(container.streams.video[0]))
            assert first.is_keyframe


def test_portrait_phone_video_comes_out_portrait(transcode, tmp_path: Path):
    phone = rotated(make_video(tmp_path / "land.mp4", size="320x240"), tmp_path / "phone.mov", 90)
    assert probe_file(phone).display_size == (240, 320)
    out = transcode(phone)
    facts = video_facts(out["mp4"][0])
    assert facts["display"] == (240, 320)
    with av.open(str(out["mp4"][0])) as container:  # upright pixels, no rotation left for players to apply
        assert next(container.decode(video=0)).rotation == 0
    assert hls_variants(out["hls"][0])[0]["RESOLUTION"] == "240x320"
    with Image.open(out["poster"][0]) as poster:
        assert poster.size == (240, 320)


def test_anamorphic_video_comes_out_with_square_pixels(transcode, tmp_path: Path):
    out = transcode(make_video(tmp_path / "dv.mkv", size="360x240", vf="setsar=32/27"))
    facts = video_facts(out["mp4"][0])
    assert facts["sar"] == "1:1" and facts["display"] == (426, 240)  # shown 16:9, not 3:2


@pytest.mark.parametrize(
    ("name", "vf", "codec_args"),
    [
        ("hdr10.mkv", "setparams=color_trc=smpte2084:color_primaries=bt2020:colorspace=bt2020nc,format=yuv420p10le",
         ("-c:v", "libx264", "-preset", "ultrafast")),
        ("hlg.mkv", "setparams=color_trc=arib-std-b67:color_primaries=bt2020:colorspace=bt2020nc,format=yuv420p10le",
         ("-c:v", "libx264", "-preset", "ultrafast")),
        ("tenbit.mov", "format=yuv422p10le", ("-c:v", "prores")),
    ],
)
def test_ten_bit_and_hdr_sources_become_8_bit_yuv420p(transcode, tmp_path: Path, name, vf, codec_args):
    src = make_video(tmp_path / name, size="320x240", vf=vf, video_args=codec_args)
    out = transcode(src)
    facts = video_facts(out["mp4"][0])
    assert (facts["video_codec"], facts["pix_fmt"], facts["display"]) == ("h264", "yuv420p", (320, 240))
    hls_variants(out["hls"][0])


def test_interlaced_video_is_deinterlaced(transcode, tmp_path: Path):
    src = make_video(tmp_path / "tv.ts", size="320x240", vf="setfield=tff",
                     video_args=("-c:v", "libx264", "-preset", "ultrafast", "-flags", "+ildct+ilme"))
    assert probe_file(src).interlaced
    facts = video_facts(transcode(src)["mp4"][0])
    assert not facts["interlaced"] and facts["pix_fmt"] == "yuv420p"


def test_variable_frame_rate_becomes_constant(transcode, tmp_path: Path):
    # Drop frames unevenly: every frame in the first half second, one in three after.
    src = make_video(tmp_path / "vfr.mkv", seconds=2, size="320x240", rate=30,
                     vf="select='lt(n\\,15)+not(mod(n\\,3))'",
                     video_args=("-fps_mode", "vfr", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"))
    out = transcode(src)
    with av.open(str(out["mp4"][0])) as container:
        stream = container.streams.video[0]
        pts = sorted(p.pts for p in container.demux(stream) if p.pts is not None)
    steps = {b - a for a, b in zip(pts, pts[1:])}
    assert len(steps) == 1, steps
    assert abs(video_facts(out["mp4"][0])["duration_s"] - 2.0) < 0.2


def test_a_clip_without_audio_gives_silent_outputs(transcode, tmp_path: Path):
    out = transcode(make_video(tmp_path / "silent.mp4", audio=False))
    assert video_facts(out["mp4"][0])["audio_streams"] == 0
    assert all("mp4a" not in v.get("CODECS", "") for v in hls_variants(out["hls"][0]))
    assert out["mp4"][1].metadata["audio"] is False


def _dominant_hz(path: Path) -> float:
    with av.open(str(path)) as container:
        samples = np.concatenate([f.to_ndarray()[0] for f in container.decode(audio=0)])
        rate = container.streams.audio[0].sample_rate
    crossings = np.count_nonzero(np.diff(np.signbit(samples)))
    return crossings / 2 / (len(samples) / rate)


def test_of_several_audio_tracks_the_default_one_is_used(transcode, tmp_path: Path):
    src = make_video(tmp_path / "tracks.mkv", seconds=1, audio_tracks=2,
                     audio_args=("-c:a", "aac", "-disposition:a:0", "0", "-disposition:a:1", "default"))
    out = transcode(src)
    facts = video_facts(out["mp4"][0])
    assert facts["audio_streams"] == 1
    assert abs(_dominant_hz(out["mp4"][0]) - 880) < 40  # the second track's tone, not the first's 440 Hz


def test_a_one_frame_clip_still_gives_every_output(transcode, tmp_path: Path):
    out = transcode(make_video(tmp_path / "still.mp4", seconds=0.04, audio=False))
    facts, variants = web_ready(out)
    assert facts["frames"] == 1 and facts["duration_s"] < 0.1 and facts["display"] == (160, 120)
    assert [v["RESOLUTION"] for v in variants] == ["160x120"]


def test_odd_width_and_height_come_out_even(transcode, tmp_path: Path):
    # A screen recording's size: VP9 codes odd sizes, H.264 4:2:0 cannot.
    src = make_video(tmp_path / "screen.webm", seconds=1, size="176x144", audio=False, vf="scale=175:143,setsar=1",
                     video_args=("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"))
    assert probe_file(src).display_size == (175, 143)
    facts, variants = web_ready(transcode(src))
    assert facts["display"] == (174, 142) and facts["sar"] == "1:1"
    assert [v["RESOLUTION"] for v in variants] == ["174x142"]
    assert abs(facts["duration_s"] - 1.0) < 0.1


def test_a_4k_source_is_capped_at_1080p(transcode, tmp_path: Path):
    out = transcode(make_video(tmp_path / "uhd.mp4", seconds=0.12, size="3840x2160", audio=False))
    facts, variants = web_ready(out)
    assert [v["RESOLUTION"] for v in variants] == ["854x480", "426x240", "640x360", "1280x720", "1920x1080"]
    assert facts["display"] == (1280, 720) and facts["frames"] == 3


@pytest.mark.parametrize(
    ("name", "video_args", "audio_args"),
    [
        ("clip.mov", ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"), ("-c:a", "aac")),
        ("clip.webm", ("-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8"), ("-c:a", "libopus")),
        ("clip.avi", ("-c:v", "mpeg4"), ("-c:a", "libmp3lame")),
        ("clip.ts", ("-c:v", "mpeg2video"), ("-c:a", "mp2")),
        ("clip.mkv", ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"), ("-c:a", "flac")),
    ],
)
def test_common_containers_are_transcoded(transcode, tmp_path: Path, name, video_args, audio_args):
    src = make_video(tmp_path / name, seconds=0.5, size="176x144", video_args=video_args, audio_args=audio_args)
    facts, variants = web_ready(transcode(src))
    assert facts["audio_codec"] == "aac" and facts["display"] == (176, 144)
    assert abs(facts["duration_s"] - 0.5) < 0.15
    assert [v["RESOLUTION"] for v in variants] == ["176x144"]
    assert video_facts(variants[0]["segments"][0])["audio_codec"] == "aac"


def test_progress_is_reported_from_ffmpeg_while_the_ladder_runs(tmp_path: Path, monkeypatch):
    from transcoding import ffmpeg, pipelines

    monkeypatch.setattr(ffmpeg, "PROGRESS_INTERVAL_S", 0.0)  # every report, not one a second
    src = make_video(tmp_path / "clip.mp4", seconds=3, size="320x240")
    workdir = tmp_path / "work"
    workdir.mkdir()
    seen: list[int] = []
    pipelines.video(src, workdir, probe_file(src), seen.append)
    assert seen and seen == sorted(seen) and all(0 <= p <= 99 for p in seen), seen


def test_a_videos_sound_never_carries_more_than_its_source(transcode, tmp_path: Path):
    """A phone's mono 48 kbit/s sound stays mono at 48 kbit/s (it was
    128 kbit/s stereo in every rendition and the MP4)."""
    src = make_video(tmp_path / "phone.mp4", seconds=4, size="320x240", audio_args=("-c:a", "aac", "-b:a", "48k"))
    out = transcode(src)
    source, mp4 = probe_file(src), probe_file(out["mp4"][0])
    assert mp4.audio_stream.channels == 1 and mp4.audio_kbps <= source.audio_kbps * 1.01, mp4.audio_kbps
    # Each rendition's copy too (its packets measure 2.6 kbit/s more: MPEG-TS frames AAC in ADTS headers).
    segment = probe_file(ladder.playlist_segments(out["hls"][0].parent / "240p" / "index.m3u8")[0])
    assert segment.audio_stream.channels == 1 and segment.audio_kbps <= source.audio_kbps + 3, segment.audio_kbps
