"""Chunking benchmark: `make bench-chunks` (as root: network namespaces).

Worker hosts as in bench/scale.py: network namespaces on a bridge, one
cpu-transcode worker each (prefork, concurrency 1) pinned to its own core
with taskset, private PostgreSQL, Redis and SeaweedFS; this process uploads
as the web does. One long video (by default 10 minutes of 1080p H.264 + AAC)
through the whole path.

Measured:
- speed-up: the long video, chunked, on one host and on two: wall time from
  upload to the job's end (the database's times); target: two hosts at least
  1.7x one host;
- CPU overhead of chunking: on one host (one core, one job at a time, so
  the core's busy time is the sum of the attempts' run times), the chunked
  job's parts (and the splitting attempt) against one unchunked job (the
  heavy video of the contention run with chunking off: it holds the core
  alone, the light users wait behind it); target: under 10 %;
- light users under a heavy one: on one host, the heavy user's long video,
  then light users arriving one at a time with a short clip each; their
  waits (queued -> started), p99, with chunking on and off. One host is the
  case where a long job holds every slot (with N hosts it takes N long
  videos); target: p99 bounded by about one chunk's time (at most 1.5x the
  median chunk of the chunked run on one host) instead of the whole
  video's. With chunking on, the heavy video is canceled once the light
  users are done: the rest of it measures nothing the chunked run on one
  host has not.

Everything is a parameter (`--help`); a small run proves the harness, e.g.
    python -m bench.chunks --seconds 32 --size 640x360 --chunk-s 4 --segment-s 2 \\
        --threshold-s 6 --light-users 6 --light-seconds 2
Writes bench/results/chunks.json and chunks.png and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT
from bench.scale import Bench, cannot_simulate_hosts, pct, print_targets

RESULTS = ROOT / "bench" / "results"
TARGET_SPEEDUP = 1.7
TARGET_OVERHEAD_PCT = 10.0
TARGET_WAIT_IN_CHUNKS = 1.5


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.chunks", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=600, help="the long video's duration")
    p.add_argument("--size", default="1920x1080", help="the long video's frame size")
    p.add_argument("--chunk-s", type=float, default=30, help="FAIRLANE_CHUNK_S")
    p.add_argument("--segment-s", type=int, default=4, help="FAIRLANE_HLS_SEGMENT_S")
    p.add_argument("--threshold-s", type=float, default=60, help="FAIRLANE_CHUNK_THRESHOLD_S")
    p.add_argument("--light-users", type=int, default=20)
    p.add_argument("--light-seconds", type=float, default=4, help="each light user's clip")
    p.add_argument("--light-size", default="640x360")
    p.add_argument("--light-gap-s", type=float, default=2.0, help="between light users' arrivals")
    return p.parse_args(argv)


class ChunkBench(Bench):
    """Hosts started with chunking on or off (a worker reads its settings once)."""

    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        super().__init__(work)
        self.args = args
        self.chunking: bool | None = None

    def hosts_up(self, count: int, *, chunking: bool) -> None:
        if chunking != self.chunking:
            for name in list(self.hosts):
                self.drop_host(name)
            self.chunking = chunking
        for n in range(count, 2):
            self.drop_host(f"cpu-{n + 1}")
        env = {"FAIRLANE_CHUNKING": "1" if chunking else "0", "FAIRLANE_CHUNK_S": str(self.args.chunk_s),
               "FAIRLANE_HLS_SEGMENT_S": str(self.args.segment_s),
               "FAIRLANE_CHUNK_THRESHOLD_S": str(self.args.threshold_s)}
        for n in range(count):
            self.host(f"cpu-{n + 1}", str(n), env=env)


def _seconds(start, end) -> float:
    return (end - start).total_seconds()


def _core_time(job) -> tuple[float, list]:
    """The busy time of the cores for `job`: every attempt's run, its parts'
    and the splitting one included; and its parts."""
    from uploads.models import Job, JobAttempt

    parts = list(Job.objects.filter(parent=job))
    attempts = JobAttempt.objects.filter(job__in=[job, *parts], finished_at__isnull=False)
    return sum(_seconds(a.started_at, a.finished_at) for a in attempts), parts


def long_video_run(b: ChunkBench, video: Path, *, hosts: int, chunking: bool) -> dict:
    from uploads.models import Job

    b.hosts_up(hosts, chunking=chunking)
    [job] = b.wait(b.upload(b.user("long"), [video]), timeout=6 * 3600)
    worker_s, parts = _core_time(job)
    chunk_s = [p.process_ms / 1000 for p in parts if p.part == Job.Part.CHUNK]
    return {"hosts": hosts, "chunking": chunking, "wall_s": round(_seconds(job.created_at, job.finished_at), 2),
            "worker_s": round(worker_s, 2), "parts": len(parts),
            "median_chunk_s": round(statistics.median(chunk_s), 2) if chunk_s else None}


def contention(b: ChunkBench, video: Path, clip: Path, *, chunking: bool) -> dict:
    from uploads import services
    from uploads.models import Job

    b.hosts_up(1, chunking=chunking)
    [heavy] = b.upload(b.user("heavy"), [video])
    deadline = time.monotonic() + 600
    # The heavy user's work is under way: its job running, or (chunked) a part of it.
    while not Job.objects.filter(status=Job.Status.RUNNING, progress__gt=0).filter(
            id=heavy).exists() and not Job.objects.filter(parent_id=heavy, status=Job.Status.RUNNING).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the heavy job did not start")
        time.sleep(0.5)
    light = []
    for _ in range(b.args.light_users):
        light += b.upload(b.user("light"), [clip])
        time.sleep(b.args.light_gap_s)
    light_jobs = b.wait(light, timeout=6 * 3600)
    waits = [j.wait_ms / 1000 for j in light_jobs]
    result = {"chunking": chunking, "light_waits_s": [round(w, 3) for w in waits],
              "light_p50_s": round(pct(waits, 50), 3), "light_p99_s": round(pct(waits, 99), 3)}
    if chunking:  # the light users are done: so is what this run measures
        done = list(Job.objects.filter(parent_id=heavy, status=Job.Status.SUCCEEDED))
        services.jobs_cancel(job_ids=[heavy], actor=Job.objects.get(id=heavy).owner)
        # The light users may all be done before a chunk is (the audio part
        # goes first): "one chunk" is then the chunked run's on this host.
        return {**result, "parts_done": sorted(f"{p.part} {p.part_index}" for p in done)}
    [heavy_job] = b.wait([heavy], timeout=6 * 3600)
    worker_s, _ = _core_time(heavy_job)
    return {**result, "heavy_wall_s": round(_seconds(heavy_job.created_at, heavy_job.finished_at), 2),
            "heavy_worker_s": round(worker_s, 2)}


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4))
    runs = result["runs"]
    labels = ["one job, 1 host", "chunked, 1 host", "chunked, 2 hosts"]
    single = result["contention"]["off"]
    a.bar(labels, [single["heavy_wall_s"], runs["chunked_1"]["wall_s"], runs["chunked_2"]["wall_s"]],
          color=["#9ca3af", "#3b82f6", "#10b981"])
    a.set_title(f"wall time: x{result['speedup']:.2f} with 2 hosts")
    a.set_ylabel("seconds")
    a.tick_params(axis="x", labelsize=8)
    b.bar(labels[:2], [single["heavy_worker_s"], runs["chunked_1"]["worker_s"]], color=["#9ca3af", "#3b82f6"])
    b.set_title(f"core time: chunking {result['cpu_overhead_pct']:+.1f} %")
    b.tick_params(axis="x", labelsize=8)
    for mode, colour in (("off", "#9ca3af"), ("on", "#3b82f6")):
        f = result["contention"][mode]
        c.plot(sorted(f["light_waits_s"]), marker="o", color=colour,
               label=f"chunking {mode}: p99 {f['light_p99_s']} s")
    chunk = runs["chunked_1"]["median_chunk_s"]
    c.axhline(chunk, color="#3b82f6", linestyle=":", label=f"one chunk, 1 host ({chunk} s)")
    c.set_title("light users' waits behind a long video (1 host)")
    c.set_xlabel("light jobs, sorted")
    c.set_ylabel("seconds")
    c.legend(fontsize=8)
    fig.suptitle(result["video"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if (why := cannot_simulate_hosts("bench-chunks")) is not None:
        print(why, file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-chunks-"))
    b = ChunkBench(work, args)
    result: dict = {"cores": os.cpu_count(), "params": vars(args),
                    "video": f"{args.size} {args.seconds:g} s h264 + aac, chunks of {args.chunk_s:g} s "
                             f"({args.segment_s} s segments)", "runs": {}, "contention": {}}
    try:
        from tests.media import make_video

        video = make_video(work / "long.mp4", seconds=args.seconds, size=args.size)
        clip = make_video(work / "clip.mp4", seconds=args.light_seconds, size=args.light_size)
        b.hosts_up(1, chunking=True)
        b.wait(b.upload(b.user("warmup"), [clip]))  # imports, connections, the decode sandbox
        for phase, run in (("chunked_1", lambda: long_video_run(b, video, hosts=1, chunking=True)),
                           ("chunked_2", lambda: long_video_run(b, video, hosts=2, chunking=True)),
                           ("off", lambda: contention(b, video, clip, chunking=False)),
                           ("on", lambda: contention(b, video, clip, chunking=True))):
            result["runs" if phase.startswith("chunked") else "contention"][phase] = run()
            # Each phase's numbers as soon as it ends: a run of an hour and
            # more that fails late keeps what it measured.
            print(f"phase {phase}: {json.dumps(result)}", flush=True)
    finally:
        b.close()
    runs = result["runs"]
    result["load_after"] = os.getloadavg()[0]
    result["speedup"] = round(runs["chunked_1"]["wall_s"] / runs["chunked_2"]["wall_s"], 3)
    on, off = result["contention"]["on"], result["contention"]["off"]
    result["cpu_overhead_pct"] = round(100 * (runs["chunked_1"]["worker_s"] / off["heavy_worker_s"] - 1), 2)
    chunk = runs["chunked_1"]["median_chunk_s"]
    wait_in_chunks = round(on["light_p99_s"] / chunk, 2)
    result["targets"] = {
        "speedup_two_hosts": {"target": f">= {TARGET_SPEEDUP}", "value": result["speedup"],
                              "met": result["speedup"] >= TARGET_SPEEDUP},
        "cpu_overhead_pct": {"target": f"< {TARGET_OVERHEAD_PCT}", "value": result["cpu_overhead_pct"],
                             "met": result["cpu_overhead_pct"] < TARGET_OVERHEAD_PCT},
        "light_p99_in_chunk_times": {"target": f"<= {TARGET_WAIT_IN_CHUNKS}", "value": wait_in_chunks,
                                     "met": wait_in_chunks <= TARGET_WAIT_IN_CHUNKS},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "chunks.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / "chunks.png")
    print(result["video"])
    for key, run in runs.items():
        print(f"{key}: wall {run['wall_s']} s, core time {run['worker_s']} s, {run['parts']} parts")
    print(f"one job, 1 host: wall {off['heavy_wall_s']} s, core time {off['heavy_worker_s']} s")
    print(f"speed-up with 2 hosts: x{result['speedup']}; CPU overhead of chunking: {result['cpu_overhead_pct']:+.1f} %")
    print(f"light users' p99 wait behind the long video: {off['light_p99_s']} s unchunked, {on['light_p99_s']} s "
          f"chunked (one chunk on 1 host: {chunk} s)")
    print_targets(result["targets"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
