"""What growing playlists cost (issue 35): part 5 of `make bench-media`.

A video's ladder made two ways on the same 1080p source, in interleaved
pairs, in this process (the worker's side of a job: the pipeline and the
upload of its outputs to object storage, a private SeaweedFS):

- today's path, as before issue 35: no head segment (keyframes every
  segment), VOD playlists written by the muxer, no streamer; every output
  stored after the encoder has ended (media.put_tree);
- the new path, what a job runs now: a 1 s head segment, EVENT playlists
  with each segment renamed into place, the streamer thread uploading
  segments while the encoder writes them (transcoding/live.py), put_tree
  skipping what it stored.

For each run: CPU seconds of this process (the pipeline, the streamer's and
put_tree's upload threads) plus those of its ffmpeg children (the ladder,
the storyboard), wall seconds, bytes stored, and the top rendition's PSNR
against the source (measured between the encode and the upload, outside
the timed part). The target: the new path's total CPU within 5 % of
today's, the same quality. The live record's database write (one small
UPDATE per new segment, in production) is replaced by a call that counts
them: it is the database's work, not the worker's CPU.
"""
from __future__ import annotations

import os
import resource
import shutil
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PAIRS = int(os.environ.get("BENCH_LIVE_PAIRS", "3"))
LIVE_SECONDS = float(os.environ.get("BENCH_LIVE_SECONDS", "20"))
TARGET_CPU_RATIO = 1.05


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def _todays_muxer() -> Iterator[None]:
    """The ladder's ffmpeg as it was before growing playlists (b598244's
    parent): no head segment, VOD playlists, no temporary names."""
    from transcoding import ladder
    head, playlists = ladder.HEAD_SEGMENT_S, ladder.LIVE_PLAYLISTS
    ladder.HEAD_SEGMENT_S = float("inf")
    ladder.LIVE_PLAYLISTS = ["-hls_playlist_type", "vod", "-hls_flags", "independent_segments"]
    try:
        yield
    finally:
        ladder.HEAD_SEGMENT_S, ladder.LIVE_PLAYLISTS = head, playlists


def _one(path: str, src: Path, work: Path, probe, top: tuple[str, tuple[int, int]], n: int) -> dict:
    import media
    from tests.hls_checks import joined, psnr
    from transcoding import ladder, live, pipelines

    workdir = work / f"{path}-{n}"
    workdir.mkdir()
    prefix = f"bench-live/{path}-{n}/"
    records: list[bool] = []
    sink = live.Sink(prefix=prefix, record=lambda state, playable: records.append(playable)) if path == "new" else None
    cpu, wall = _cpu(), time.monotonic()
    if sink is None:
        with _todays_muxer():
            pipelines.video(src, workdir, probe, lambda percent: None)
    else:
        pipelines.video(src, workdir, probe, lambda percent: None, sink=sink)
    encode_cpu, encode_wall = _cpu() - cpu, time.monotonic() - wall
    name, size = top
    quality = psnr(joined(ladder.playlist_segments(workdir / "hls" / name / "index.m3u8"), work / f"{path}-{n}.ts"),
                   src, size)
    cpu, wall = _cpu(), time.monotonic()
    sizes = media.put_tree(workdir, prefix, skip=sink.stored if sink else None)
    cpu_s, wall_s = encode_cpu + _cpu() - cpu, encode_wall + time.monotonic() - wall
    shutil.rmtree(workdir, ignore_errors=True)
    return {"cpu_s": round(cpu_s, 2), "wall_s": round(wall_s, 2), "bytes": sum(sizes.values()),
            "files": len(sizes), "streamed": len(sink.stored) if sink else 0,
            "records": len(records), "top_psnr_db": round(quality, 3), "load_before": round(os.getloadavg()[0], 2)}


def measure(work: Path, s3_settings: dict) -> dict:
    """Interleaved pairs (today's, then the new path) on one source; medians
    and the ratio of the medians."""
    from django.test import override_settings

    from bench.media import SOURCE_ARGS, SOURCE_SIZE
    from tests.media import make_video
    from transcoding import ladder
    from transcoding.probe import probe_file

    src = make_video(work / "live-src.mp4", seconds=LIVE_SECONDS, size=SOURCE_SIZE, video_args=SOURCE_ARGS)
    probe = probe_file(src)
    top_rendition = ladder.renditions_for(probe)[-1]
    top = (top_rendition.name, (top_rendition.width, top_rendition.height))
    runs: dict[str, list[dict]] = {"today": [], "new": []}
    with override_settings(**s3_settings):
        _one("new", src, work, probe, top, -1)  # warm-up: imports, the store's connections
        for n in range(PAIRS):
            for path in runs:
                runs[path].append(_one(path, src, work, probe, top, n))
    med = {path: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("cpu_s", "wall_s", "top_psnr_db")}
           for path, rs in runs.items()}
    ratio = med["new"]["cpu_s"] / med["today"]["cpu_s"]
    return {"source": f"{SOURCE_SIZE} {LIVE_SECONDS:g} s h264 CRF 18 + aac", "top_rendition": top[0],
            "pairs": PAIRS, "runs": runs, "median": med, "cpu_ratio": round(ratio, 4),
            "psnr_difference_db": round(med["new"]["top_psnr_db"] - med["today"]["top_psnr_db"], 3),
            "target_cpu_ratio": TARGET_CPU_RATIO, "met": ratio <= TARGET_CPU_RATIO}


def table(result: dict) -> str:
    lines = [f"growing playlists, {result['source']}, {result['pairs']} interleaved pairs, medians:",
             "path  | CPU s  | wall s | top PSNR dB",
             *(f"{p:<5} | {m['cpu_s']:>6.2f} | {m['wall_s']:>6.2f} | {m['top_psnr_db']:>6.2f}"
               for p, m in result["median"].items()),
             f"new / today CPU: {result['cpu_ratio']:.3f} (target <= {result['target_cpu_ratio']}: "
             f"{'met' if result['met'] else 'MISSED'}); PSNR difference {result['psnr_difference_db']:+.3f} dB"]
    return "\n".join(lines)


def plot(ax, result: dict) -> None:
    """CPU of each run, today's and the new path's, pair by pair."""
    for path, marker in (("today", "o"), ("new", "s")):
        ax.plot([r["cpu_s"] for r in result["runs"][path]], marker=marker, label=f"{path} path")
    ax.set_xlabel("pair")
    ax.set_ylabel("CPU s (process + ffmpeg)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"growing playlists: CPU new/today {result['cpu_ratio']:.3f}")
    ax.legend()
