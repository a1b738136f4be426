"""What the scrub previews cost: `python -m bench.storyboard`. Writes
bench/results/storyboard.json and prints a table.

One 1080p clip encoded like a phone's (bench/media.py's source settings,
BENCH_STORYBOARD_SECONDS long, 60 by default) goes through the single-pass
ladder with one thread, as one slot of the lane runs it; then the storyboard
is made as the pipeline makes it (transcoding/storyboard.py: the lowest
rendition's segments joined and decoded once through fps, scale and tile),
and, for comparison, from the source instead (a 1080p decode). CPU seconds
are the ffmpeg children's (getrusage(RUSAGE_CHILDREN)). Needs Django's
settings only (no database, no Redis).
"""
from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

from bench.media import SOURCE_ARGS, SOURCE_SIZE  # noqa: E402
from tests.media import make_video  # noqa: E402
from transcoding import ffmpeg, ladder, storyboard  # noqa: E402
from transcoding.probe import probe_file  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SECONDS = float(os.environ.get("BENCH_STORYBOARD_SECONDS", "60"))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measured(fn) -> dict:
    cpu, wall = _cpu(), time.monotonic()
    fn()
    return {"cpu_s": round(_cpu() - cpu, 3), "wall_s": round(time.monotonic() - wall, 3)}


def main() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src = make_video(work / "source.mp4", seconds=SECONDS, size=SOURCE_SIZE, video_args=SOURCE_ARGS)
        probe = probe_file(src)
        out = work / "out"
        out.mkdir()
        plan = ladder.plan(src, out, probe, threads=1)
        ladder_cost = _measured(lambda: ffmpeg.run(plan.args, duration_s=probe.duration_s))
        low = plan.renditions[0]
        segments = ladder.playlist_segments(out / "hls" / low.name / "index.m3u8")
        low_cost = _measured(lambda: storyboard.make(segments, (low.width, low.height), probe.duration_s, out, work))
        board = storyboard.plan_for(probe.duration_s, (low.width, low.height))
        source_dir = work / "from-source"
        source_dir.mkdir()
        source_cost = _measured(lambda: ffmpeg.run(_from_source_args(src, source_dir, board, probe.container),
                                                   duration_s=probe.duration_s))
        result = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "source": {"seconds": SECONDS, "size": SOURCE_SIZE, "encoding": " ".join(SOURCE_ARGS)},
            "storyboard": {**board.as_json(), "sprite_bytes": (out / storyboard.SPRITE).stat().st_size,
                           "vtt_bytes": (out / storyboard.VTT).stat().st_size, "from": low.name},
            "ladder": ladder_cost,
            "storyboard_from_lowest_rendition": low_cost,
            "storyboard_from_source": source_cost,
            "share_of_ladder_cpu": round(low_cost["cpu_s"] / ladder_cost["cpu_s"], 4),
            "cpu_s_per_media_minute": round(low_cost["cpu_s"] * 60 / SECONDS, 3),
            "cores": os.cpu_count(),
        }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "storyboard.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _from_source_args(src: Path, folder: Path, board: storyboard.Plan, container: str) -> list[str]:
    """The same filters on the source's own decode (its container, 1080p)."""
    made = storyboard.args(src, folder / storyboard.SPRITE, board)
    at = made.index("-f")
    return [*made[:at], "-f", container, *made[at + 2:]]


if __name__ == "__main__":
    r = main()
    print(f"{r['source']['seconds']:g} s of {r['source']['size']}, {r['storyboard']['frames']} frames every "
          f"{r['storyboard']['interval_s']:g} s from {r['storyboard']['from']}:")
    print(f"  ladder (1 thread):             {r['ladder']['cpu_s']:8.2f} CPU s")
    print(f"  storyboard, lowest rendition:  {r['storyboard_from_lowest_rendition']['cpu_s']:8.2f} CPU s "
          f"({100 * r['share_of_ladder_cpu']:.2f} % of the ladder; {r['cpu_s_per_media_minute']} s per media minute)")
    print(f"  storyboard, from the source:   {r['storyboard_from_source']['cpu_s']:8.2f} CPU s")
