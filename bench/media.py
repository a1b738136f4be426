"""Media benchmark: `python -m bench.media`. Writes bench/results/media.json
and media.png and prints a table.

1. Single-pass ladder (one decode, `split`, every rendition + MP4 + poster
   from one ffmpeg) versus one ffmpeg per output (each decodes and
   normalises the source again): CPU seconds of the ffmpeg children
   (getrusage(RUSAGE_CHILDREN)) and wall time, on one 1080p clip encoded like
   a phone's (x264 veryfast, CRF 18: decoding it costs what real uploads do;
   an ultrafast test clip would make decoding look free).
2. Threads per ffmpeg versus lane concurrency on this machine: the same N
   clips through the single-pass ladder with (concurrency x threads) of
   1x1, 2x1, 1x2, 2x2; throughput in clips per minute.
3. Orchestration overhead: the worker's media work (probe, the pipeline with
   its checks and bookkeeping) versus the bare ffmpeg command it runs, best
   of REPEATS each. Database writes and the Celery hop are not in it (a few
   milliseconds per job).

Clips are short (BENCH_SECONDS) so the run takes about a minute on 2 cores.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup()

from tests.media import make_video  # noqa: E402
from transcoding import ffmpeg, ladder, pipelines  # noqa: E402
from transcoding.probe import probe_file  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BENCH_SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
CLIPS = int(os.environ.get("BENCH_CLIPS", "3"))
SOURCE_SIZE = "1920x1080"
SOURCE_ARGS = ("-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p")
LANES = ((1, 1), (2, 1), (1, 2), (2, 2))  # (concurrency, threads per ffmpeg)
REPEATS = 3


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measure(fn) -> dict:
    """Wall and children's CPU time; the load average before the run shows
    whether something else was competing for the cores."""
    load, cpu, wall = os.getloadavg()[0], _children_cpu(), time.monotonic()
    fn()
    wall = time.monotonic() - wall
    cpu = _children_cpu() - cpu
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "cores_busy": round(cpu / wall, 2),
            "load_before": round(load, 2)}


def _per_output_commands(src: Path, out: Path, probe) -> list[list[str]]:
    """What a transcoder without `split` runs: one ffmpeg per rendition, one
    for the MP4, one for the poster, each decoding the source again."""
    fps = ladder.output_fps(probe)
    pre = ",".join(ladder.normalise(probe, fps))
    renditions = ladder.renditions_for(probe)
    mp4 = ladder.mp4_rendition(renditions)
    gop = str(round(fps * ladder.SEGMENT_S))
    inp = ["-y", "-threads", "1", *ffmpeg.input_args(src, probe.container)]
    commands = []
    for r in renditions:
        (out / r.name).mkdir(parents=True, exist_ok=True)
        commands.append([*inp, "-map", "0:v:0", "-map", "0:a:0", "-vf", f"{pre},{ladder.scaled((r.width, r.height))}",
                         *ladder.X264, "-g", gop, "-keyint_min", gop, "-sc_threshold", "0", "-threads", "1",
                         "-maxrate", f"{r.max_kbps}k", "-bufsize", f"{2 * r.max_kbps}k", "-c:a", "aac",
                         "-f", "hls", "-hls_time", str(ladder.SEGMENT_S), "-hls_playlist_type", "vod",
                         str(out / r.name / "index.m3u8")])
    commands.append([*inp, "-map", "0:v:0", "-map", "0:a:0", "-vf", f"{pre},{ladder.scaled((mp4.width, mp4.height))}",
                     *ladder.X264, "-threads", "1", "-c:a", "aac", "-movflags", "+faststart", str(out / "v.mp4")])
    poster = ladder.poster_frame_index(probe, fps)
    commands.append([*inp, "-map", "0:v:0", "-vf", f"{pre},select='gte(n\\,{poster})'", "-frames:v", "1",
                     str(out / "poster.jpg")])
    return commands


def ladder_vs_per_output(src: Path, work: Path) -> dict:
    probe = probe_file(src)
    single_dir, multi_dir = work / "single", work / "multi"
    single_dir.mkdir()
    multi_dir.mkdir()
    plan = ladder.plan(src, single_dir, probe, threads=1)
    single = _measure(lambda: ffmpeg.run(plan.args, duration_s=probe.duration_s))
    per_output = _measure(lambda: [ffmpeg.run(c, duration_s=probe.duration_s)
                                   for c in _per_output_commands(src, multi_dir, probe)])
    return {"renditions": [r.name for r in plan.renditions], "single_pass": single, "per_output": per_output}


def lanes(src: Path, work: Path) -> list[dict]:
    probe = probe_file(src)
    rows = []
    for concurrency, threads in LANES:
        def one(i: int, threads=threads, tag=f"{concurrency}x{threads}") -> None:
            out = work / tag / str(i)
            out.mkdir(parents=True)
            ffmpeg.run(ladder.plan(src, out, probe, threads=threads).args, duration_s=probe.duration_s)

        def batch(concurrency=concurrency, one=one) -> None:
            with ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(one, range(CLIPS)))

        m = _measure(batch)
        rows.append({"concurrency": concurrency, "threads": threads, **m,
                     "clips_per_min": round(CLIPS * 60 / m["wall_s"], 2),
                     "cpu_per_clip_s": round(m["cpu_s"] / CLIPS, 3)})
    return rows


def overhead(src: Path, work: Path) -> dict:
    bare, full = [], []
    for i in range(REPEATS):
        bare_dir, full_dir = work / f"bare{i}", work / f"full{i}"
        bare_dir.mkdir()
        full_dir.mkdir()
        args = ladder.plan(src, bare_dir, probe_file(src), threads=1).args
        bare.append(_measure(lambda args=args: ffmpeg.run(args, duration_s=BENCH_SECONDS))["wall_s"])
        full.append(_measure(lambda d=full_dir: pipelines.video(src, d, probe_file(src), lambda pct: None))["wall_s"])
    return {"bare_ffmpeg_s": min(bare), "worker_media_s": min(full),
            "overhead_pct": round(100 * (min(full) - min(bare)) / min(bare), 2)}


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["single_pass", "per_output"]
    x = range(len(names))
    a.bar([i - 0.2 for i in x], [result["ladder"][n]["cpu_s"] for n in names], 0.4, label="CPU s")
    a.bar([i + 0.2 for i in x], [result["ladder"][n]["wall_s"] for n in names], 0.4, label="wall s")
    a.set_xticks(list(x), ["one run, split", "one run per output"])
    a.set_title(f"{SOURCE_SIZE} {BENCH_SECONDS:g} s clip: ladder + MP4 + poster")
    a.legend()
    labels = [f"{r['concurrency']}x{r['threads']}" for r in result["lanes"]]
    b.bar(labels, [r["clips_per_min"] for r in result["lanes"]])
    b.set_xlabel("lane concurrency x ffmpeg threads")
    b.set_ylabel("clips per minute")
    b.set_title(f"{CLIPS} clips on {os.cpu_count()} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-media-"))
    try:
        src = make_video(work / "src.mp4", seconds=BENCH_SECONDS, size=SOURCE_SIZE, video_args=SOURCE_ARGS)
        result = {"cores": os.cpu_count(), "clip": f"{SOURCE_SIZE} {BENCH_SECONDS:g} s h264 CRF 18 + aac",
                  "clips": CLIPS,
                  "ladder": ladder_vs_per_output(src, work), "lanes": lanes(src, work),
                  "overhead": overhead(src, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "media.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / "media.png")
    lad = result["ladder"]
    print(f"{result['clip']}: ladder {', '.join(lad['renditions'])} + mp4 + poster")
    print("run          | CPU s  | wall s | cores busy | load before")
    for name in ("single_pass", "per_output"):
        m = lad[name]
        print(f"{name:<12} | {m['cpu_s']:>6.2f} | {m['wall_s']:>6.2f} | {m['cores_busy']:>10.2f} | "
              f"{m['load_before']:>5.2f}")
    print(f"\nconcurrency x threads | {CLIPS} clips wall s | CPU s  | cores busy | clips/min | load before")
    for r in result["lanes"]:
        print(f"{r['concurrency']} x {r['threads']:<17} | {r['wall_s']:>13.2f} | {r['cpu_s']:>6.2f} | "
              f"{r['cores_busy']:>10.2f} | {r['clips_per_min']:>9.2f} | {r['load_before']:>5.2f}")
    o = result["overhead"]
    print(f"\nbare ffmpeg {o['bare_ffmpeg_s']:.2f} s, probe + pipeline {o['worker_media_s']:.2f} s: "
          f"overhead {o['overhead_pct']:.1f} %")


if __name__ == "__main__":
    main()
