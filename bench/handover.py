"""Where a slot's time between two jobs goes, plain Celery FIFO against
Fairlane: `python -m bench.handover` (`make bench-handover`). Writes
bench/results/handover.json and .png and prints a table.

`make bench-fairness` reports utilisation under cost skew (50 ms and 500 ms
jobs, both users backlogged) and the idle slot time per job behind it. This
benchmark runs the same scenario (bench.fairness.two_heavy_runs), the same
workers (prefork x cores, prefetch 1, acks_late, task events on), with
bench/handover_probe.py in both, and splits every hand-over inside the
backlogged interval, on one clock, into:

- job end -> task success: the job's own last write (bench/recorder.py)
  and Celery's bookkeeping after the body;
- finish: the task_postrun receivers (in the fair mode, the dispatcher's
  finish call, which releases the next job into the queue; plain Celery
  has none);
- to the parent: the child's result to the worker's main process, its
  acknowledgement, the fetch of the next message (BRPOP), until Celery
  has turned it into a request;
- to the child: the request written to the idle child and read there;
- prerun -> job start: Celery's bookkeeping before the body.

Their sum is the gap, the mean of which is `idle_ms_per_job` in
bench.fairness. It also reports the gap that would give 0.98 utilisation
for each mode's mix of jobs: utilisation = mean job / (mean job + mean gap),
and fair sharing gives the 50 ms user half the worker time, so Fairlane runs
about three times as many jobs per second of worker time as FIFO does.
ROUNDS rounds per mode (BENCH_HANDOVER_ROUNDS, 3), alternating; about
1.5 minutes.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from bench.fairness import (
    CORES,
    LABELS,
    RESULTS,
    Runner,
    backlogged_interval,
    busy_time,
    idle_ms_per_job,
    markdown_table,
    start_workers,
    two_heavy_runs,
    utilisation,
)
from bench.harness import Environment

MODES = ("fifo", "fair")
ROUNDS = int(os.environ.get("BENCH_HANDOVER_ROUNDS", "3"))
A_MS, B_MS = 50, 500  # the cost skew (#15)
TARGET_UTILISATION = 0.98
STEPS = ("job end -> task success", "finish", "to the parent", "to the child", "prerun -> job start")
Event = tuple[float, int, str, str]  # time, pid, event, task id


def read_events(path: Path) -> list[Event]:
    """The probe's lines (bench/handover_probe.py)."""
    events = []
    for line in path.read_text().splitlines():
        at, pid, event, task_id = line.split()
        events.append((float(at), int(pid), event, task_id))
    return events


def handovers(runs: dict[str, dict], events: list[Event], start: float, end: float) -> tuple[list[list[float]], int]:
    """Each hand-over between two jobs of one child whose second job started
    in [start, end], as its steps in seconds (STEPS' order), and how many
    were left out because an event is missing or out of order (a message
    the parent received before the previous job ended: none at prefetch 1
    with every slot busy)."""
    at: dict[tuple[str, str], float] = {}
    for t, _, event, task_id in events:
        at[(event, task_id.partition("@")[0])] = t  # a fair job's message id is <job id>@<tag>
    by_pid: dict[int, list[tuple[str, dict]]] = {}
    for job_id, run in runs.items():
        by_pid.setdefault(run["pid"], []).append((job_id, run))
    steps, skipped = [], 0
    for jobs in by_pid.values():
        jobs.sort(key=lambda job: job[1]["start"])
        for (a, ra), (b, rb) in zip(jobs, jobs[1:]):
            if not start <= rb["start"] < end:
                continue
            marks = [ra["end"], at.get(("success", a)), at.get(("postrun", a)), at.get(("received", b)),
                     at.get(("prerun", b)), rb["start"]]
            if None in marks or any(x > y for x, y in zip(marks, marks[1:])):
                skipped += 1
                continue
            steps.append([y - x for x, y in zip(marks, marks[1:])])
    return steps, skipped


def summarize(rounds: list[dict]) -> dict:
    """One mode's rounds: medians and means of each step over every
    hand-over, utilisation per round, and the gap that 0.98 allows."""
    steps = [s for r in rounds for s in r["steps"]]
    columns = list(zip(*steps))
    totals = [sum(s) for s in steps]
    mean_job_ms = statistics.median(r["mean_job_ms"] for r in rounds)
    return {
        "handovers": len(steps), "skipped": sum(r["skipped"] for r in rounds),
        "steps_ms": {name: {"p50": round(statistics.median(c) * 1000, 3), "mean": round(statistics.mean(c) * 1000, 3)}
                     for name, c in zip(STEPS, columns)},
        "gap_ms": {"p50": round(statistics.median(totals) * 1000, 3), "mean": round(statistics.mean(totals) * 1000, 3),
                   "p90": round(sorted(totals)[int(len(totals) * 0.9)] * 1000, 3)},
        "utilisation_per_round": [r["utilisation"] for r in rounds],
        "idle_ms_per_job_per_round": [r["idle_ms_per_job"] for r in rounds],
        # What the gap would be if the finish step cost nothing.
        "gap_ms_without_finish_mean": round(statistics.mean(t - s[1] for t, s in zip(totals, steps)) * 1000, 3),
        "mean_job_ms": round(mean_job_ms, 1),
        "gap_ms_for_098": round(mean_job_ms * (1 / TARGET_UTILISATION - 1), 3),
    }


def one_round(runs: dict[str, dict], events: list[Event]) -> dict:
    """A round's runs (two_heavy_runs) with the probe's events, in numbers."""
    first, end = backlogged_interval(runs, ["heavyA", "heavyB"])
    steps, skipped = handovers(runs, events, first, end)
    started = sum(1 for run in runs.values() if first <= run["start"] < end)
    return {"steps": steps, "skipped": skipped, "utilisation": round(utilisation(runs, first, end), 4),
            "idle_ms_per_job": round(idle_ms_per_job(runs, first, end), 2),
            "mean_job_ms": busy_time(runs, first, end) * 1000 / started}


def table(res: dict) -> str:
    rows = [["", *(LABELS[m] for m in MODES)]]
    for name in STEPS:
        rows.append([f"{name} (median / mean)",
                     *(f"{res[m]['steps_ms'][name]['p50']:.2f} / {res[m]['steps_ms'][name]['mean']:.2f} ms"
                       for m in MODES)])
    rows.append(["gap between jobs (median / mean / p90)",
                 *(f"{res[m]['gap_ms']['p50']:.2f} / {res[m]['gap_ms']['mean']:.2f} / {res[m]['gap_ms']['p90']:.2f} ms"
                   for m in MODES)])
    rows.append(["the same without the finish step (mean)",
                 *(f"{res[m]['gap_ms_without_finish_mean']:.2f} ms" for m in MODES)])
    rows.append(["mean job", *(f"{res[m]['mean_job_ms']:.0f} ms" for m in MODES)])
    rows.append(["gap for 0.98 utilisation", *(f"{res[m]['gap_ms_for_098']:.2f} ms" for m in MODES)])
    rows.append(["utilisation per round", *(", ".join(f"{u:.3f}" for u in res[m]["utilisation_per_round"])
                                            for m in MODES)])
    return markdown_table(rows)


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 3.6))
    labels = [LABELS[m] for m in MODES]
    left = [0.0] * len(MODES)
    for name in STEPS:
        widths = [res[m]["steps_ms"][name]["mean"] for m in MODES]
        ax.barh(labels, widths, left=left, label=name)
        left = [x + w for x, w in zip(left, widths)]
    for i, m in enumerate(MODES):
        ax.plot([res[m]["gap_ms_for_098"]] * 2, [i - 0.4, i + 0.4], color="black", lw=2,
                label="gap for 0.98 utilisation" if i == 0 else None)
    ax.set_xlabel("mean slot time between two jobs (ms)")
    ax.set_title(f"Hand-over between jobs, {A_MS} ms / {B_MS} ms users both backlogged, prefork x {CORES}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    env = Environment()
    log = env.var / "handover.log"
    workers = start_workers(env, MODES, include=("bench.handover_probe",), worker_env={"BENCH_HANDOVER_LOG": str(log)})
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    try:
        for worker in workers.values():
            worker.wait_ready()
        r = Runner()
        for i in range(ROUNDS):
            for mode in MODES if i % 2 == 0 else reversed(MODES):
                runs[mode].append(two_heavy_runs(r, mode, A_MS, B_MS))
                print(f"  round {i + 1} {mode} done", file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.stop()
        env.close()
    events = read_events(log)  # every round's, each job's under ids of its own
    res = {m: summarize([one_round(mode_runs, events) for mode_runs in runs[m]]) for m in MODES}
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": CORES, "python": platform.python_version(), "platform": platform.platform()},
        "setup": {"worker": f"prefork x {CORES}, prefetch 1, acks_late, task events on; one worker per mode",
                  "scenario": f"two_heavy {A_MS} ms / {B_MS} ms", "rounds": ROUNDS, "steps": STEPS},
        "results": res,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "handover.json").write_text(json.dumps(report, indent=2))
    plot(res, RESULTS / "handover.png")
    print(table(res))
    print(f"\nwrote {RESULTS / 'handover.json'} and handover.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
