"""Large inputs from object storage: `python -m bench.fetch_large`.

Issue 35 asks for the first playable frame within 10 s for sources up to
4 GB. A worker copies its input whole into its scratch folder before it
probes (transcoding/services.transcode: ffmpeg keeps to local files), so
on object storage the copy comes before the first frame, where on local
disk it is a hard link. bench-ttfp measures with media on disk; this
measures what the copy adds: `media.fetch` (boto3's ranged, parallel
download) of 1 GiB and 4 GiB objects from a private SeaweedFS over
loopback, REPEATS times each, with the wall time and this process's CPU.

Writes bench/results/fetch_large.json and .png and prints a table.
Needs 3x the largest size free on the temporary folder's disk.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.harness import Environment

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1024 ** 3
SIZES_GIB = tuple(float(s) for s in os.environ.get("BENCH_FETCH_GIB", "1,4").split(","))
REPEATS = int(os.environ.get("BENCH_FETCH_REPEATS", "3"))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _random_file(path: Path, size: int) -> None:
    """Incompressible bytes, written in 64 MiB blocks (one block repeated:
    nothing between here and the disk compresses or dedupes)."""
    block = os.urandom(64 * 1024 * 1024)
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            fh.write(block[:min(left, len(block))])
            left -= len(block)


def measure(work: Path) -> list[dict]:
    import media

    rows = []
    for gib in SIZES_GIB:
        size = int(gib * GIB)
        src = work / "src.bin"
        _random_file(src, size)
        key = f"bench-fetch/{gib:g}GiB.bin"
        t0 = time.monotonic()
        media.put_file(src, key)
        put_s = time.monotonic() - t0
        src.unlink()
        runs = []
        for n in range(REPEATS):
            dest = work / f"copy-{n}.bin"
            cpu, t0 = _cpu(), time.monotonic()
            media.fetch(key, dest, read_only=True)
            wall = time.monotonic() - t0
            assert dest.stat().st_size == size
            runs.append({"wall_s": round(wall, 3), "cpu_s": round(_cpu() - cpu, 3),
                         "mb_per_s": round(size / 1e6 / wall, 1), "load_before": round(os.getloadavg()[0], 2)})
            dest.unlink()
        media.delete_prefix("bench-fetch/")
        med = statistics.median(r["wall_s"] for r in runs)
        rows.append({"gib": gib, "bytes": size, "put_s": round(put_s, 2), "runs": runs, "median_wall_s": med,
                     "median_mb_per_s": round(size / 1e6 / med, 1)})
        print(f"  {gib:g} GiB: fetch median {med:.2f} s ({size / 1e6 / med:.0f} MB/s); put {put_s:.1f} s",
              flush=True)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{r['gib']:g} GiB" for r in rows]
    ax.bar(labels, [r["median_wall_s"] for r in rows], color="#3b82f6")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['median_wall_s']:.2f} s\n{r['median_mb_per_s']:.0f} MB/s", (i, r["median_wall_s"]),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("input copied to scratch, s (median)")
    ax.set_title("a worker's copy of its input from SeaweedFS (loopback)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    env = Environment()
    from django.test import override_settings

    from bench.private_services import PrivateSeaweedFS

    work = Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    s3 = PrivateSeaweedFS("127.0.0.1")
    try:
        with override_settings(**s3.settings()):
            rows = measure(work)
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
        env.close()
    result = {"cores": os.cpu_count(), "repeats": REPEATS, "sizes": rows, "load_after": os.getloadavg()[0]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fetch_large.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, RESULTS / "fetch_large.png")
    print("size  | fetch median | MB/s   | CPU s (median)")
    for r in rows:
        print(f"{r['gib']:>3g} GiB | {r['median_wall_s']:>10.2f} s | {r['median_mb_per_s']:>6.0f} | "
              f"{statistics.median(x['cpu_s'] for x in r['runs']):.2f}")


if __name__ == "__main__":
    main()
