"""CPU slices benchmark: `python -m bench.cpu_slices` (`make bench-cpu-slices`).
Writes bench/results/cpu_slices.json and .png and prints a table.

What a process that wakes for a moment pays to run again on a core that
others keep busy, at the kernel's own slice (the baseline) and at the one
Fairlane's request-serving processes ask for (FAIRLANE_CPU_SLICE_US,
project/cpu_slices.py): a web thread or a database backend back from a
round trip, beside another user's poll or a job's bookkeeping. On one
core, two processes compute half the time each (4 ms on, 4 ms off), each
in a session of its own (so each is a task group of its own under the
kernel's autogroups, as the web, PostgreSQL and the store are); the
measured process, in a session of its own too, sleeps 0.5-2 ms (seeded)
then computes 0.2 ms, WAKEUPS times, and each wake-up's delay is the time
it slept past what it asked. The cases take turns, ROUNDS times, each in
a new process, so the machine's drift falls on all alike; each
percentile is over all of a case's wake-ups, with the median of its
rounds' beside it.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
WAKEUPS = 1000
ROUNDS = int(os.environ.get("BENCH_CPU_SLICES_ROUNDS", "6"))
CORE = 0
COMPUTING = 2  # processes computing half the time each beside the measured one
PERCENTILES = (50, 90, 99)


def _spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def _computing() -> None:
    os.setsid()
    os.sched_setaffinity(0, {CORE})
    while True:
        _spin(0.004)
        time.sleep(0.004)


def _measured(slice_us: int, seed: int, out) -> None:
    from project.cpu_slices import ask_for_short_slices, slice_of

    os.setsid()
    os.sched_setaffinity(0, {CORE})
    ask_for_short_slices(slice_us)
    rng = random.Random(seed)
    delays = []
    for _ in range(WAKEUPS):
        asked = rng.uniform(0.0005, 0.002)
        started = time.perf_counter()
        time.sleep(asked)
        delays.append(time.perf_counter() - started - asked)
        _spin(0.0002)
    out.put({"slice_ns": slice_of(os.getpid()), "delays_ms": [d * 1000 for d in delays]})


def _percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100)[p - 1]


def measure(fairlane_us: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    cases = [("alone, kernel's slice", 0, False), ("beside computing, kernel's slice", 0, True),
             (f"beside computing, {fairlane_us} us (Fairlane)", fairlane_us, True)]
    delays: dict[str, list[list[float]]] = {name: [] for name, _, _ in cases}
    slices: dict[str, int | None] = {}
    out = ctx.Queue()
    hogs: list = []
    try:
        for round_no in range(ROUNDS):
            for name, slice_us, beside in cases:
                if beside and not hogs:
                    hogs = [ctx.Process(target=_computing, daemon=True) for _ in range(COMPUTING)]
                    for hog in hogs:
                        hog.start()
                    time.sleep(0.3)
                elif not beside and hogs:
                    for hog in hogs:
                        hog.kill()
                        hog.join()
                    hogs = []
                proc = ctx.Process(target=_measured, args=(slice_us, round_no, out))
                proc.start()
                got = out.get(timeout=120)
                proc.join()
                delays[name].append(got["delays_ms"])
                slices[name] = got["slice_ns"]
    finally:
        for hog in hogs:
            hog.kill()
            hog.join()
    rows = []
    for name, _, _ in cases:
        pooled = [d for one in delays[name] for d in one]
        rows.append({"case": name, "slice_ns": slices[name],
                     **{f"p{p}_ms": round(_percentile(pooled, p), 3) for p in PERCENTILES},
                     "rounds": {f"p{p}_ms": [round(_percentile(one, p), 3) for one in delays[name]]
                                for p in PERCENTILES}})
    baseline = rows[1]
    for row in rows[2:]:
        row["ratio_to_kernels"] = {f"p{p}": round(row[f"p{p}_ms"] / baseline[f"p{p}_ms"], 3) for p in PERCENTILES}
    return {"wakeups_per_round": WAKEUPS, "rounds": ROUNDS, "core": CORE, "computing_processes": COMPUTING,
            "rows": rows}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        xs = [x + (i - (len(rows) - 1) / 2) * width for x in range(len(PERCENTILES))]
        values = [row[f"p{p}_ms"] for p in PERCENTILES]
        ax.bar(xs, values, width, label=row["case"])
        for x, v in zip(xs, values):
            ax.annotate(f"{v:.2f}", (x, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(PERCENTILES)), [f"p{p}" for p in PERCENTILES])
    ax.set_ylabel(f"ms a wake-up waits past its sleep ({result['rounds']} x {result['wakeups_per_round']})")
    ax.set_title("a process waking on a busy core: the kernel's slice against a short one")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.conf import settings

    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "kernel": os.uname().release,
              "fairlane_slice_us": settings.FAIRLANE_CPU_SLICE_US,
              **measure(settings.FAIRLANE_CPU_SLICE_US or 100)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cpu_slices.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / "cpu_slices.png")
    print(f"{'case':>42} {'slice':>9} " + " ".join(f"{'p' + str(p):>8}" for p in PERCENTILES))
    for row in result["rows"]:
        print(f"{row['case']:>42} {row['slice_ns'] or 0:>7} ns "
              + " ".join(f"{row[f'p{p}_ms']:>5.2f} ms" for p in PERCENTILES))
    print("rounds' p90 (ms):", {row["case"]: statistics.median(row["rounds"]["p90_ms"]) for row in result["rows"]})
    sys.stdout.flush()


if __name__ == "__main__":
    main()
