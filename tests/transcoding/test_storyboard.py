"""Scrub previews (transcoding/storyboard.py): the sprite's grid and its
WebVTT index, and that each cue shows the frame of its time, for a single
pass and for a chunked video (made from the lowest rendition either way)."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.media import ffmpeg
from tests.transcoding.test_chunks import chunked_ladder, short_segments  # noqa: F401 (a fixture)
from transcoding import storyboard
from transcoding.probe import probe_file

# One colour a second: a cue's cell must be the colour of its second.
COLOURS = ["red", "lime", "blue", "yellow", "magenta", "cyan", "white", "orange"]
RGB = {"red": (255, 0, 0), "lime": (0, 255, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0),
       "magenta": (255, 0, 255), "cyan": (0, 255, 255), "white": (255, 255, 255), "orange": (255, 165, 0)}


def colour_seconds(path: Path, size: str = "640x360", seconds: int = len(COLOURS)) -> Path:
    """A video whose every second is one solid colour (with a tone)."""
    inputs = [arg for c in COLOURS[:seconds] for arg in ("-f", "lavfi", "-i", f"color=c={c}:s={size}:r=25:d=1")]
    graph = "".join(f"[{i}:v]" for i in range(seconds)) + f"concat=n={seconds}:v=1:a=0[v]"
    ffmpeg(*inputs, "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}", "-filter_complex", graph,
           "-map", "[v]", "-map", f"{seconds}:a", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
           "-c:a", "aac", "-shortest", str(path))
    return path


@pytest.mark.parametrize(("duration", "size", "expected"), [
    (5.0, (426, 240), (1.0, 5, 5, 1, 160, 90)),
    (13.2, (426, 240), (1.0, 14, 10, 2, 160, 90)),  # a partial last second has its frame
    (100.0, (426, 240), (1.0, 100, 10, 10, 160, 90)),
    (600.0, (426, 240), (6.0, 100, 10, 10, 160, 90)),  # longer: a longer interval, never a larger sprite
    (7200.0, (426, 240), (72.0, 100, 10, 10, 160, 90)),
    (0.04, (160, 120), (1.0, 1, 1, 1, 120, 90)),  # one frame
    (8.0, (136, 240), (1.0, 8, 8, 1, 90, 158)),  # portrait: the short side, 90, is the width
    (8.0, (320, 240), (1.0, 8, 8, 1, 120, 90)),
])
def test_frames_are_every_whole_second_or_more_at_most_a_hundred(duration, size, expected):
    plan = storyboard.plan_for(duration, size)
    assert (plan.interval_s, plan.frames, plan.columns, plan.rows, plan.width, plan.height) == expected


def test_the_vtt_maps_each_interval_to_its_cell_of_the_sprite():
    plan = storyboard.plan_for(13.2, (426, 240))
    text = storyboard.vtt(plan, 13.2)
    assert text.startswith("WEBVTT\n\n")
    cues = [block.splitlines() for block in text.strip().split("\n\n")[1:]]
    assert len(cues) == 14
    assert cues[0] == ["00:00:00.000 --> 00:00:01.000", "storyboard.jpg#xywh=0,0,160,90"]
    assert cues[10] == ["00:00:10.000 --> 00:00:11.000", "storyboard.jpg#xywh=0,90,160,90"]
    assert cues[13] == ["00:00:13.000 --> 00:00:13.200", "storyboard.jpg#xywh=480,90,160,90"]
    long = storyboard.vtt(storyboard.plan_for(7200.0, (426, 240)), 7200.0)
    assert "01:58:48.000 --> 02:00:00.000\nstoryboard.jpg#xywh=1440,810,160,90" in long


def cell_colours(sprite: Path, plan: storyboard.Plan) -> list[str]:
    """The colour each cell of the sprite shows (its middle pixel's nearest)."""
    with Image.open(sprite) as image:
        assert image.size == (plan.columns * plan.width, plan.rows * plan.height)
        rgb = image.convert("RGB")
        found = []
        for i in range(plan.frames):
            x, y = i % plan.columns * plan.width + plan.width // 2, i // plan.columns * plan.height + plan.height // 2
            pixel = rgb.getpixel((x, y))
            found.append(min(RGB, key=lambda name: sum((a - b) ** 2 for a, b in zip(RGB[name], pixel))))
        return found


def test_a_single_pass_makes_a_sprite_whose_cells_show_their_seconds(transcode, tmp_path: Path):
    out = transcode(colour_seconds(tmp_path / "colours.mp4"))
    assert {"storyboard", "storyboard_vtt"} <= set(out)
    sprite, produced = out["storyboard"]
    vtt, index = out["storyboard_vtt"]
    assert (produced.content_type, index.content_type) == ("image/jpeg", "text/vtt")
    assert sprite.parent == vtt.parent and index.metadata["sprite"] == sprite.name  # side by side, as the VTT says
    plan = storyboard.plan_for(len(COLOURS), (426, 240))
    assert produced.metadata == {"width": 1280, "height": 90, **plan.as_json()}
    assert cell_colours(sprite, plan) == COLOURS
    assert vtt.read_text() == storyboard.vtt(plan, probe_file(tmp_path / "colours.mp4").duration_s)
    assert not list(tmp_path.glob("**/storyboard-source.ts"))  # the joined stream is not left behind


def test_a_chunked_video_gets_the_same_storyboard_from_its_finalizer(short_segments, tmp_path: Path):
    source = colour_seconds(tmp_path / "colours.mp4")
    plan_, produced = chunked_ladder(source, tmp_path / "out", probe_file(source))
    final = tmp_path / "out" / "final"
    assert len(plan_.chunks) == 2  # 8 s in chunks of 4 s: one join, at 4 s
    by_name = {p.name: p for p in produced}
    assert {"storyboard", "storyboard_vtt"} <= set(by_name)
    plan = storyboard.plan_for(len(COLOURS), (426, 240))
    assert cell_colours(final / "storyboard.jpg", plan) == COLOURS
    assert (final / "storyboard.vtt").read_text().count("-->") == len(COLOURS)
    assert not (final / "storyboard-source.ts").exists()


def test_a_failed_preview_does_not_fail_the_video(tmp_path: Path):
    broken = tmp_path / "seg_000.ts"
    broken.write_bytes(b"\x47" + b"\x00" * 187)  # one empty MPEG-TS packet: nothing to decode
    work = tmp_path / "out"
    work.mkdir()
    assert storyboard.make([broken], (426, 240), 4.0, work, tmp_path) == []
    assert list(work.iterdir()) == []
