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
3. Orchestration overhead: a real job end to end versus the bare ffmpeg
   command it runs. The job goes the whole way: the upload service stores
   the file and commits the Job row, the fair dispatcher releases it, one
   real Celery prefork worker (concurrency 1, as one slot of the lane) claims
   it, probes, runs that same ffmpeg command under its watchdog, publishes
   the outputs and records the result; its time is the row's created_at to
   finished_at. The bare command runs alone, the same way, interleaved with
   the jobs; medians of OVERHEAD_REPEATS pairs, for clips of
   OVERHEAD_SECONDS, and the overhead as the median of the pairs' relative
   differences.
4. Output bytes per input byte: what the pipelines store for typical
   files (images, audio, a video), now and as they were before outputs
   were made worth their bytes, on the same files in the same run
   (bench/output_bytes.py).

A private Redis and a scratch SQLite database (bench/harness.py). About
five minutes on 2 cores; the ladder and lane parts use BENCH_SECONDS clips.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import live_cost, output_bytes
from bench.harness import Environment, Worker

# Django is set up by the Environment (its private Redis and database) in
# main(); these are imported after it.
ffmpeg = ladder = probe_file = make_video = None

RESULTS = Path(__file__).resolve().parent / "results"
BENCH_SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
CLIPS = int(os.environ.get("BENCH_CLIPS", "3"))
SOURCE_SIZE = "1920x1080"
SOURCE_ARGS = ("-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p")
LANES = ((1, 1), (2, 1), (1, 2), (2, 2))  # (concurrency, threads per ffmpeg)
OVERHEAD_SECONDS = tuple(int(s) for s in os.environ.get("BENCH_OVERHEAD_SECONDS", "1,3,10").split(","))
# Runs on this shared machine vary by +-10%: enough pairs for the median
# to settle at the few-percent level (longer clips vary less).
OVERHEAD_REPEATS = {1: 9, 3: 9}  # others: 5


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
    gop = str(round(fps * ladder.segment_s()))
    inp = ["-y", "-threads", "1", *ffmpeg.input_args(src, probe.container)]
    commands = []
    for r in renditions:
        (out / r.name).mkdir(parents=True, exist_ok=True)
        commands.append([*inp, "-map", "0:v:0", "-map", "0:a:0", "-vf", f"{pre},{ladder.scaled((r.width, r.height))}",
                         *ladder.X264, "-g", gop, "-keyint_min", gop, "-sc_threshold", "0", "-threads", "1",
                         "-maxrate", f"{r.max_kbps}k", "-bufsize", f"{2 * r.max_kbps}k", "-c:a", "aac",
                         "-f", "hls", "-hls_time", str(ladder.segment_s()), "-hls_playlist_type", "vod",
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


def _bare(src: Path, out: Path) -> float:
    """Wall seconds of the ladder command a job would run on `src`, alone."""
    out.mkdir(parents=True)
    probe = probe_file(src)
    args = ladder.plan(src, out, probe, threads=1).args
    started = time.monotonic()
    ffmpeg.run(args, duration_s=probe.duration_s)
    return time.monotonic() - started


def _job(src: Path, owner) -> dict:
    """One upload through the service, run by the worker; its row's times."""
    from django.core.files.uploadedfile import UploadedFile

    from uploads import services
    from uploads.models import Job

    with open(src, "rb") as fh:
        [upload] = services.uploads_create(owner=owner, files=[UploadedFile(
            fh, name=src.name, content_type="video/mp4", size=src.stat().st_size)])
    job = upload.jobs.get()
    while job.status not in Job.TERMINAL:  # the row's own times are measured, not this loop's
        time.sleep(0.25)  # rarely: this process must not take CPU from the ffmpeg being measured
        job.refresh_from_db()
    if job.status != Job.Status.SUCCEEDED:
        raise RuntimeError(f"benchmark job {job.id} {job.status}: {job.error}")
    return {"job_s": (job.finished_at - job.created_at).total_seconds(), "process_s": job.process_ms / 1000,
            "wait_s": job.wait_ms / 1000}


def overhead(work: Path) -> list[dict]:
    """Per clip length: median bare ffmpeg versus median job, interleaved."""
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.create_user("bench-media")
    worker = Worker("cpu-transcode", pool="prefork", concurrency=1, name="cpu-media", log_dir=work)
    rows = []
    try:
        worker.wait_ready()
        for seconds in OVERHEAD_SECONDS:
            src = make_video(work / f"overhead-{seconds}s.mp4", seconds=seconds, size=SOURCE_SIZE,
                             video_args=SOURCE_ARGS)
            _job(src, owner)  # warm-up: the worker's first job imports and connects
            bare, jobs = [], []
            for i in range(OVERHEAD_REPEATS.get(seconds, 5)):
                bare.append(_bare(src, work / f"bare-{seconds}-{i}"))
                jobs.append(_job(src, owner))
            job_s = statistics.median(j["job_s"] for j in jobs)
            bare_s = statistics.median(bare)
            # Each job runs right after its bare twin: the median of the
            # pairs' differences is less sensitive to the machine's drift.
            paired = statistics.median((j["job_s"] - b) / b for j, b in zip(jobs, bare))
            rows.append({
                "clip_s": seconds, "repeats": len(bare), "bare_ffmpeg_s": round(bare_s, 3),
                "job_s": round(job_s, 3), "job_processing_s": round(statistics.median(j["process_s"] for j in jobs), 3),
                "job_wait_s": round(statistics.median(j["wait_s"] for j in jobs), 3),
                "overhead_s": round(job_s - bare_s, 3), "overhead_pct": round(100 * paired, 2),
                "bare_runs_s": [round(b, 3) for b in bare], "job_runs_s": [round(j["job_s"], 3) for j in jobs],
            })
    finally:
        worker.stop()
    return rows


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c, d, e) = plt.subplots(1, 5, figsize=(27, 4.5), gridspec_kw={"width_ratios": [1, 1, 1, 1.4, 1]})
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
    rows = result["overhead"]
    x = range(len(rows))
    c.bar([i - 0.2 for i in x], [r["bare_ffmpeg_s"] for r in rows], 0.4, label="bare ffmpeg")
    c.bar([i + 0.2 for i in x], [r["job_s"] for r in rows], 0.4, label="job, end to end")
    for i, r in enumerate(rows):
        c.annotate(f"{r['overhead_pct']:+.1f}%", (i + 0.2, r["job_s"]), ha="center", va="bottom")
    c.set_xticks(list(x), [f"{r['clip_s']} s clip" for r in rows])
    c.set_ylabel("wall s (median)")
    c.set_title("orchestration overhead")
    c.legend()
    output_bytes.plot(d, result["output_bytes"])
    live_cost.plot(e, result["growing_playlists"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    global ffmpeg, ladder, probe_file, make_video
    env = Environment()
    from tests.media import make_video
    from transcoding import ffmpeg, ladder
    from bench.private_services import PrivateSeaweedFS
    from transcoding.probe import probe_file

    work = Path(tempfile.mkdtemp(prefix="bench-media-"))
    s3 = PrivateSeaweedFS("127.0.0.1")
    try:
        s3_settings = s3.settings()
        src = make_video(work / "src.mp4", seconds=BENCH_SECONDS, size=SOURCE_SIZE, video_args=SOURCE_ARGS)
        result = {"cores": os.cpu_count(), "clip": f"{SOURCE_SIZE} {BENCH_SECONDS:g} s h264 CRF 18 + aac",
                  "clips": CLIPS,
                  "ladder": ladder_vs_per_output(src, work), "lanes": lanes(src, work),
                  "overhead": overhead(work), "output_bytes": output_bytes.measure(work),
                  "growing_playlists": live_cost.measure(work, s3_settings)}
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
        env.close()
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
    print("\nclip | bare ffmpeg s | job s (created -> finished) | of which waiting | overhead")
    for o in result["overhead"]:
        print(f"{o['clip_s']:>3} s | {o['bare_ffmpeg_s']:>13.2f} | {o['job_s']:>27.2f} | {o['job_wait_s']:>16.3f} | "
              f"{o['overhead_s']:+.2f} s ({o['overhead_pct']:+.1f} %)")
    print("\n" + output_bytes.table(result["output_bytes"]))
    print("\n" + live_cost.table(result["growing_playlists"]))


if __name__ == "__main__":
    main()
