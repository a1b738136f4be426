"""GIL turns benchmark: `python -m bench.gil_turns` (`make bench-gil-turns`).
Writes bench/results/gil_turns.json and .png and prints a table.

What a thread that waits on I/O pays to get the GIL back while another
thread of its process computes (project/gil_turns.py): a light user's
request in a web process where another user's request builds a chunk.
One thread makes ROUND_TRIPS round trips over a socket to an echo server
in a process of its own, alone and beside one thread that computes, at
CPython's own switch interval (5 ms, the baseline) and shorter ones,
Fairlane's FAIRLANE_GIL_SWITCH_MS among them. The two threads share one
core, as a one-core web host's do; the echo server has another, as a
database or Redis on a host of its own (on one core the returning thread
would mostly run before the computing one is scheduled at all, and there
would be nothing to measure). The intervals and the two cases take
turns, ROUNDS times, so the machine's drift falls on all alike; each
cell is the median of its rounds, and its ratio to the same case at 5 ms.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ROUND_TRIPS = 100
ROUNDS = int(os.environ.get("BENCH_GIL_ROUNDS", "15"))
BASELINE_MS = 5.0  # CPython's default switch interval
CORE = 0  # the measured process's
ECHO_CORE = (os.cpu_count() or 1) - 1  # the echo server's: another, where there is one


def _echo(listener: socket.socket) -> None:
    os.sched_setaffinity(0, {ECHO_CORE})
    conn, _ = listener.accept()
    while data := conn.recv(64):
        conn.sendall(data)


def _round(conn: socket.socket, interval_s: float, beside_computing: bool) -> float:
    """Seconds for ROUND_TRIPS round trips at `interval_s`."""
    sys.setswitchinterval(interval_s)
    stop = threading.Event()

    def compute() -> None:
        total = 0
        while not stop.is_set():
            for i in range(1000):
                total += i

    computing = threading.Thread(target=compute)
    if beside_computing:
        computing.start()
        time.sleep(0.05)  # it holds the GIL when the round trips start
    try:
        started = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            conn.sendall(b"x")
            conn.recv(64)
        return time.perf_counter() - started
    finally:
        stop.set()
        if beside_computing:
            computing.join()


def measure(intervals_ms: list[float]) -> dict:
    listener = socket.create_server(("127.0.0.1", 0))
    echo = multiprocessing.get_context("fork").Process(target=_echo, args=(listener,), daemon=True)
    echo.start()
    os.sched_setaffinity(0, {CORE})
    conn = socket.create_connection(listener.getsockname())
    cases = [(ms, beside) for ms in intervals_ms for beside in (False, True)]
    seconds: dict[tuple[float, bool], list[float]] = {case: [] for case in cases}
    try:
        for _ in range(ROUNDS):
            for ms, beside in cases:
                seconds[(ms, beside)].append(_round(conn, ms / 1000, beside))
    finally:
        conn.close()
        echo.join(timeout=5)
        echo.kill()
        sys.setswitchinterval(BASELINE_MS / 1000)
    rows = []
    for ms in intervals_ms:
        row = {"switch_interval_ms": ms}
        for beside, name in ((False, "alone"), (True, "beside_computing")):
            median = statistics.median(seconds[(ms, beside)])
            baseline = statistics.median(seconds[(BASELINE_MS, beside)])
            row[name] = {"ms_per_round": round(median * 1000, 2), "ratio_to_5ms": round(median / baseline, 3),
                         "rounds_ms": [round(s * 1000, 2) for s in seconds[(ms, beside)]]}
        rows.append(row)
    return {"round_trips_per_round": ROUND_TRIPS, "rounds": ROUNDS, "cores": {"measured": CORE, "echo": ECHO_CORE},
            "rows": rows}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    labels = [f"{row['switch_interval_ms']:g} ms" + (" (Fairlane)" if row["switch_interval_ms"] == result[
        "fairlane_ms"] else " (CPython)" if row["switch_interval_ms"] == BASELINE_MS else "") for row in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["alone"]["ms_per_round"] for r in rows], 0.4, label="alone")
    ax.bar([x + 0.2 for x in xs], [r["beside_computing"]["ms_per_round"] for r in rows], 0.4,
           label="beside one computing thread")
    for x, row in zip(xs, rows):
        ax.annotate(f"{row['beside_computing']['ms_per_round']:.0f} ms", (x + 0.2,
                    row["beside_computing"]["ms_per_round"]), ha="center", va="bottom")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel(f"ms per {ROUND_TRIPS} socket round trips (median)")
    ax.set_title("a thread back from I/O waits for the GIL: one core, by switch interval")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.conf import settings

    fairlane_ms = settings.FAIRLANE_GIL_SWITCH_MS
    intervals = sorted({BASELINE_MS, 1.0, fairlane_ms}, reverse=True)
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": sys.version.split()[0],
              "fairlane_ms": fairlane_ms, **measure(intervals)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gil_turns.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / "gil_turns.png")
    print(f"{'switch interval':>16} {'alone':>10} {'beside computing':>18} {'ratio to 5 ms':>14}")
    for row in result["rows"]:
        beside = row["beside_computing"]
        print(f"{row['switch_interval_ms']:>13g} ms {row['alone']['ms_per_round']:>7.1f} ms "
              f"{beside['ms_per_round']:>15.1f} ms {beside['ratio_to_5ms']:>13.3f}x")


if __name__ == "__main__":
    main()
