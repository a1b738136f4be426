"""Fairness benchmark: plain Celery FIFO, a queue per user (what a Celery
user builds for fairness) and Fairlane's fair lane, same run.
`make bench-fairness` (or `python -m bench.fairness [scenario ...]`).

Real Celery prefork workers (concurrency = cores), one per mode, a private
Redis, synthetic jobs that burn CPU for a known time (bench/recorder.py,
recorded by the jobs themselves the same way in every mode). Modes: a plain
Celery app without Fairlane's hooks (bench/plain_celery.py), the same with a
queue per user added at runtime, and the project's app with jobs submitted
through the fair dispatcher. Wait = job start - submit, measured on one
clock. Redis cost per job: INFO commandstats and CPU deltas over the no-op
rounds. Writes bench/results/fairness.json and fairness.png and prints
a table. Scenarios follow shared/design/fair-dispatcher.md.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from bench.harness import ROOT, Environment, Worker

RESULTS = ROOT / "bench" / "results"
CORES = os.cpu_count() or 2
# The burst's job service time. 100 ms keeps the machine's scheduling noise
# (a few ms) small against it, so p99 over 20 light users is stable.
SERVICE_MS = 100
LIGHT_GAP_S = 0.15  # light users arrive one at a time, this far apart


def pct(values: list[float], q: float) -> float:
    """Percentile by linear interpolation (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


MODES = ("fifo", "per-user", "fair")
LABELS = {"fifo": "plain Celery FIFO", "per-user": "queue per user", "fair": "Fairlane"}


class Runner:
    """Submits jobs in one of the three modes and collects what the jobs
    recorded (bench/recorder.py: the same in every mode).

    - fifo: a plain Celery app without Fairlane's hooks, one queue;
    - per-user: a plain app with a queue per user, added to the worker's
      consumers the first time the user submits (what a Celery user builds);
    - fair: the project's app and the fair dispatcher (`dispatcher.enqueue`).
    Each mode has its own worker (same pool, concurrency and settings), all
    running for the whole benchmark, so modes can be interleaved;
    `per_user_worker` names the per-user mode's (none: no per-user mode).
    """

    def __init__(self, per_user_worker: str | None = None) -> None:
        import dispatcher
        from bench.plain_celery import fifo_app, per_user_app
        from bench.recorder import RUNS_KEY, client
        from project.celery import app
        from project.lanes import Lane

        self.app, self.dispatch, self.lane = app, dispatcher, Lane.CPU_TRANSCODE
        self.fifo_app, self.per_user_app, self.per_user_worker = fifo_app, per_user_app, per_user_worker
        self.redis, self.runs_key = client(), RUNS_KEY
        self.submitted: dict[str, float] = {}
        self.consumed: set[str] = set()  # users whose queue the per-user worker consumes
        self.seq = 0
        self.polls = 0  # the runner's own Redis reads, left out of the Redis cost

    def reset(self) -> None:
        """Drop whatever is still held or queued, let running jobs end, forget them."""
        from bench.plain_celery import FIFO_QUEUE, user_queue

        self.dispatch.scheduler(self.lane).clear()
        self.app.control.purge()
        self.redis.delete(FIFO_QUEUE, *(user_queue(k) for k in self.consumed))
        time.sleep(1.5)  # running jobs end; the workers' ticker re-registers their slots after the clear
        self.redis.delete(self.runs_key, "bench:noop_done")
        self.submitted.clear()

    def ensure_consumer(self, key: str) -> None:
        """What a Celery user does when a user first appears: have the
        workers consume the user's queue (and wait for their answer, so the
        job is not sent to a queue nobody reads)."""
        from bench.plain_celery import user_queue

        if key not in self.consumed:
            self.per_user_app.control.add_consumer(user_queue(key), destination=[self.per_user_worker], reply=True,
                                                   timeout=5)
            self.consumed.add(key)

    def submit(self, mode: str, key: str, cost_ms: float, *, task: str = "bench.cpu.spin", weight: float = 1.0,
               group: str | None = None, group_weight: float = 1.0) -> str:
        """One job of user `key` (a member of organisation `group`, which only
        the fair mode knows: the plain modes have no notion of one)."""
        from bench.plain_celery import user_queue

        self.seq += 1
        job_id = f"{key}-{self.seq}"
        args = [job_id, key] if task == "bench.cpu.noop" else [job_id, key, cost_ms]
        self.submitted[job_id] = time.time()
        if mode == "fifo":
            self.fifo_app.send_task(task, args=args, task_id=job_id)
        elif mode == "per-user":
            self.ensure_consumer(key)
            self.per_user_app.send_task(task, args=args, task_id=job_id, queue=user_queue(key))
        else:
            self.dispatch.enqueue(task, args, task_id=job_id, fair_key=key, cost=cost_ms / 1000.0,
                                  policy=self.dispatch.KeyPolicy(weight=weight, group=group,
                                                                 group_weight=group_weight))
        return job_id

    def wait_all(self, timeout: float = 600) -> dict[str, dict]:
        deadline = time.monotonic() + timeout
        while self.redis.hlen(self.runs_key) < len(self.submitted):
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.redis.hlen(self.runs_key)}/{len(self.submitted)} jobs ran")
            time.sleep(0.05)
        runs = {k.decode(): json.loads(v) for k, v in self.redis.hgetall(self.runs_key).items()}
        for job_id, run in runs.items():
            run["submit"] = self.submitted[job_id]
            run["wait"] = run["start"] - run["submit"]
        return runs


class RedisCost:
    """Redis commands and CPU between two points of a run, from INFO
    commandstats (calls per command, those run inside Lua scripts included)
    and used_cpu_sys + used_cpu_user. `minus` takes out commands that are
    the benchmark's own bookkeeping, not dispatch (its polls, the no-op job's
    one INCR), the same for every mode: see `subtract`."""

    def __init__(self, client) -> None:
        self.client = client
        self.calls: dict[str, int] = {}
        self.cpu_s = 0.0
        self.jobs = 0

    def _sample(self) -> tuple[dict[str, int], float]:
        stats = self.client.info("commandstats")
        cpu = self.client.info("cpu")
        return ({name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()},
                cpu["used_cpu_sys"] + cpu["used_cpu_user"])

    def measure(self, run, jobs: int):
        before, cpu0 = self._sample()
        result = run()
        after, cpu1 = self._sample()
        for name, calls in after.items():
            self.subtract(**{name: before.get(name, 0) - calls})
        self.cpu_s += cpu1 - cpu0
        self.jobs += jobs
        return result

    def subtract(self, **calls: int) -> None:
        for name, n in calls.items():
            self.calls[name] = self.calls.get(name, 0) - n

    def report(self) -> dict:
        # INFO itself (two per sample) is the measurement's own.
        calls = {k: v for k, v in self.calls.items() if k != "info" and v > 0}
        total = sum(calls.values())
        return {"jobs": self.jobs, "commands_per_job": round(total / self.jobs, 2),
                "cpu_ms_per_job": round(self.cpu_s * 1000 / self.jobs, 4),
                "by_command_per_job": {k: round(v / self.jobs, 2)
                                       for k, v in sorted(calls.items(), key=lambda kv: -kv[1])}}


def waits(runs: dict[str, dict], prefix: str) -> list[float]:
    return [r["wait"] for r in runs.values() if r["key"].startswith(prefix)]


def shares(runs: dict[str, dict], keys: list[str], start: float, end: float) -> dict[str, float]:
    """Each key's share of worker time inside [start, end]."""
    busy = {k: 0.0 for k in keys}
    for r in runs.values():
        if r["key"] in busy:
            busy[r["key"]] += max(0.0, min(r["end"], end) - max(r["start"], start))
    total = sum(busy.values()) or 1.0
    return {k: v / total for k, v in busy.items()}


def busy_time(runs: dict[str, dict], start: float, end: float) -> float:
    """Worker time spent running jobs inside [start, end]."""
    return sum(max(0.0, min(r["end"], end) - max(r["start"], start)) for r in runs.values())


def utilisation(runs: dict[str, dict], start: float, end: float) -> float:
    """Busy worker time inside [start, end] over what CORES slots offer."""
    return busy_time(runs, start, end) / (CORES * (end - start))


def idle_ms_per_job(runs: dict[str, dict], start: float, end: float) -> float:
    """Slot time inside [start, end] that ran no job, per job started there:
    the per-job gap (result, acknowledgement, next delivery, and in the fair
    mode the finish script). Utilisation is 1 - gap / (mean job + gap), so a
    mode that runs shorter jobs (fair sharing gives the short-job user half
    the time) shows lower utilisation at the same gap; this number does not."""
    started = sum(1 for r in runs.values() if start <= r["start"] < end)
    return (CORES * (end - start) - busy_time(runs, start, end)) * 1000 / max(1, started)


def backlogged_interval(runs: dict[str, dict], keys: list[str]) -> tuple[float, float]:
    """From the first start until the first of `keys` has started its last job:
    the time during which every one of them had a backlog."""
    first = min(r["start"] for r in runs.values() if r["key"] in keys)
    last_starts = [max(r["start"] for r in runs.values() if r["key"] == k) for k in keys]
    return first, min(last_starts)


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": round(pct(values, 50) * 1000, 1), "p99_ms": round(pct(values, 99) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1) if values else None}


# --- scenarios ------------------------------------------------------------------------


BURST_REPEATS = int(os.environ.get("BENCH_BURST_REPEATS", "5"))


def burst_once(r: Runner, mode: str, n: int) -> dict[str, dict]:
    """One user submits n jobs; a second later 20 light users arrive, one
    every LIGHT_GAP_S, with one job each. Returns the light users' runs as
    soon as they all ran (the rest of the heavy backlog is dropped by the
    next reset: it no longer tells anything about the light users)."""
    r.reset()
    for _ in range(n):
        r.submit(mode, "heavy", SERVICE_MS)
    time.sleep(1.0)
    lights = []
    for i in range(20):
        lights.append(r.submit(mode, f"light{i:02d}", SERVICE_MS))
        time.sleep(LIGHT_GAP_S)
    deadline = time.monotonic() + 600
    while None in r.redis.hmget(r.runs_key, lights):
        if time.monotonic() > deadline:
            raise RuntimeError("light jobs did not run")
        time.sleep(0.05)
    runs = {job_id: json.loads(raw) for job_id, raw in zip(lights, r.redis.hmget(r.runs_key, lights))}
    for job_id, run in runs.items():
        run["wait"] = run["start"] - r.submitted[job_id]
    return runs


def burst(r: Runner, mode: str, n: int) -> dict:
    """FIFO once (its light users wait for the whole backlog: minutes at
    N = 2,000), the other modes BURST_REPEATS times: p99 of 20 waits is their
    maximum, so one run's p99 swings with the machine's noise; the median
    of the repeats does not."""
    repeats = 1 if mode == "fifo" else BURST_REPEATS
    rounds = [waits(burst_once(r, mode, n), "light") for _ in range(repeats)]
    p99s = [pct(w, 99) * 1000 for w in rounds]
    median_round = rounds[p99s.index(sorted(p99s)[len(p99s) // 2])]
    return {"light_wait": {**summary(median_round), "p99_ms": round(statistics.median(p99s), 1)},
            "light_p99_ms_per_run": [round(p, 1) for p in p99s],
            "light_waits_s": sorted(median_round)}


# The cost-skew scenario (#15): 50 ms and 500 ms jobs. The 20 ms /
# 200 ms variant, which this benchmark ran before, is reported beside it:
# the per-job gap between jobs is the same, so a mix of shorter jobs shows
# lower utilisation.
TWO_HEAVY_MS = {"two_heavy": (50, 500), "two_heavy_20ms": (20, 200)}


def two_heavy_runs(r: Runner, mode: str, a_ms: int, b_ms: int) -> dict[str, dict]:
    """Users A (a_ms jobs) and B (b_ms jobs, 10x) submit at the same pace
    (A, B, A, B, ...), then A alone, plus 5 light users trickling a_ms jobs;
    about 13 s of work either way. FIFO gives B ten times A's worker time;
    fair dispatch should split it evenly. Returns every job's run."""
    r.reset()
    pairs = round(1200 / a_ms)  # 60 at 20 ms, 24 at 50 ms
    for _ in range(pairs):
        r.submit(mode, "heavyA", a_ms)
        r.submit(mode, "heavyB", b_ms)
    for _ in range(4 * pairs):
        r.submit(mode, "heavyA", a_ms)
    start = time.time()
    i = 0
    while time.time() - start < 3.0:
        r.submit(mode, f"light{i % 5}", a_ms)
        i += 1
        time.sleep(0.25)
    return r.wait_all()


def two_heavy(r: Runner, mode: str, a_ms: int, b_ms: int) -> dict:
    """The cost-skew scenario (two_heavy_runs) in numbers: shares and
    utilisation while both heavy users are backlogged."""
    runs = two_heavy_runs(r, mode, a_ms, b_ms)
    first, end = backlogged_interval(runs, ["heavyA", "heavyB"])
    s = shares(runs, ["heavyA", "heavyB"], first, end)
    return {"shares": {k: round(v, 4) for k, v in s.items()}, "interval_s": round(end - first, 2),
            "utilisation": round(utilisation(runs, first, end), 4),
            "idle_ms_per_job": round(idle_ms_per_job(runs, first, end), 2),
            "light_wait": summary(waits(runs, "light")),
            "max_share_deviation": round(max(abs(v - 0.5) / 0.5 for v in s.values()), 4)}


ALONE_ROUNDS = int(os.environ.get("BENCH_ALONE_ROUNDS", "5"))
ALONE_JOBS = int(os.environ.get("BENCH_ALONE_JOBS", "300"))


def alone_round(r: Runner, mode: str) -> float:
    r.reset()
    for _ in range(ALONE_JOBS):
        r.submit(mode, "solo", SERVICE_MS)
    runs = r.wait_all()
    return max(x["end"] for x in runs.values()) - min(r.submitted.values())


def alone(r: Runner) -> dict:
    """One user alone: does fairness cost throughput? The modes interleaved
    for ALONE_ROUNDS rounds; medians (a single pair differs by a few % either
    way on this machine)."""
    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(ALONE_ROUNDS):
        for mode in runs:
            runs[mode].append(alone_round(r, mode))
    return {mode: {"rounds_s": [round(x, 3) for x in xs], "makespan_s": round(statistics.median(xs), 3)}
            for mode, xs in runs.items()}


NEWCOMER_ROUNDS = 5


def newcomer(r: Runner) -> dict:
    """A user never seen before submits one job to idle workers: how long
    until it starts (median of NEWCOMER_ROUNDS, modes interleaved). The
    per-user mode pays for adding the user's queue first."""
    waits_ms: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(NEWCOMER_ROUNDS):
        for mode in MODES:
            r.reset()
            job_id = r.submit(mode, f"new-{mode}-{i}-{os.getpid()}", 10)
            waits_ms[mode].append(r.wait_all(60)[job_id]["wait"] * 1000)
    return {mode: {"rounds_ms": [round(x, 1) for x in xs], "wait_ms": round(statistics.median(xs), 1)}
            for mode, xs in waits_ms.items()}


def weighted(r: Runner, mode: str) -> dict:
    """Three backlogged users with weights 1:2:4, equal 30 ms jobs."""
    r.reset()
    weights = {"w1": 1.0, "w2": 2.0, "w4": 4.0}
    for _ in range(300):
        for key, w in weights.items():
            r.submit(mode, key, 30, weight=w)
    runs = r.wait_all()
    first, end = backlogged_interval(runs, list(weights))
    s = shares(runs, list(weights), first, end)
    total_w = sum(weights.values())
    target = {k: w / total_w for k, w in weights.items()}
    return {"shares": {k: round(v, 4) for k, v in s.items()}, "target": {k: round(v, 4) for k, v in target.items()},
            "interval_s": round(end - first, 2),
            "max_relative_error": round(max(abs(s[k] - target[k]) / target[k] for k in weights), 4),
            "jain_weighted": round(jain([s[k] / weights[k] for k in weights]), 4)}


def org_backlogged(runs: dict[str, dict], members: dict[str, str]) -> tuple[float, float, dict[str, float]]:
    """The interval in which every organisation (members: user -> its
    organisation) had a backlog, and each organisation's share of the
    worker time in it."""
    orgs = sorted(set(members.values()))
    first = min(r["start"] for r in runs.values() if r["key"] in members)
    end = min(max(r["start"] for r in runs.values() if members.get(r["key"]) == o) for o in orgs)
    by_key = shares(runs, list(members), first, end)
    return first, end, {o: sum(v for k, v in by_key.items() if members[k] == o) for o in orgs}


ORG_JOB_MS = 30
ORG_A_MEMBERS = 50


def organisations(r: Runner, mode: str) -> dict:
    """Organisation A's 50 members flood (8 jobs each) against organisation
    B's one member (400 jobs), submitted round by round; equal weights.
    Per-user fairness gives A 50 shares to B's one (~0.98:0.02); two
    levels give 0.5:0.5."""
    r.reset()
    members = {f"orgA-{i}": "A" for i in range(ORG_A_MEMBERS)} | {"orgB-0": "B"}
    for _ in range(8):
        for i in range(ORG_A_MEMBERS):
            r.submit(mode, f"orgA-{i}", ORG_JOB_MS, group="A")
        for _ in range(ORG_A_MEMBERS):
            r.submit(mode, "orgB-0", ORG_JOB_MS, group="B")
    first, end, s = org_backlogged(r.wait_all(), members)
    return {"shares": {o: round(v, 4) for o, v in s.items()}, "interval_s": round(end - first, 2)}


def organisation_weights(r: Runner, mode: str) -> dict:
    """Organisations weighted 1:3, two members in A and one in B, all
    backlogged (30 ms jobs): worker time 0.25:0.75."""
    r.reset()
    members = {"owA-0": "A", "owA-1": "A", "owB-0": "B"}
    for _ in range(200):
        for key, org in members.items():
            r.submit(mode, key, ORG_JOB_MS, group=org, group_weight=1.0 if org == "A" else 3.0)
    first, end, s = org_backlogged(r.wait_all(), members)
    return {"shares": {o: round(v, 4) for o, v in s.items()}, "interval_s": round(end - first, 2)}


def organisation_members(r: Runner, mode: str) -> dict:
    """Within organisation A, members weighted 1:2 (B, one member, beside
    it): A's time splits 1:2 between them.

    What a job records (its spin, bench/recorder.py) is not quite what the
    dispatcher shares: the worker charges a job from Celery's prerun to its
    postrun, which also holds the job's own write of its record, after the
    spin's end. Idle, that write is a fraction of a millisecond for every
    job alike; on a loaded machine it is most of the difference between the
    two (8 ms a job on average, up to 0.5 s, at a 35% CPU quota), and a
    single run's ratio moves by a few percent (1.91 to 2.06 over eight runs
    at a 35-60% quota; 1.98 to 2.03 over nine unthrottled). The 2.195 of
    19:18Z (load average ~20, not kept) is most likely that: driven without
    workers or timing, with the same submissions, interval and shares, the
    scheduler gives 2.00 (tests/dispatcher/test_groups.py)."""
    r.reset()
    keys = {"omA-1": 1.0, "omA-2": 2.0}
    for _ in range(300):
        for key, w in keys.items():
            r.submit(mode, key, ORG_JOB_MS, weight=w, group="A")
        r.submit(mode, "omB-0", ORG_JOB_MS, group="B")
    runs = r.wait_all()
    first, end = backlogged_interval(runs, list(keys))
    s = shares(runs, list(keys), first, end)
    return {"shares": {k: round(v, 4) for k, v in s.items()}, "ratio": round(s["omA-2"] / s["omA-1"], 3),
            "interval_s": round(end - first, 2)}


ORG_NEWCOMER_ROUNDS = 3


def organisation_newcomer(r: Runner) -> dict:
    """A's 50 members hold 200 jobs of SERVICE_MS; once the workers are
    busy with them, organisation B's first job arrives: how long it waits
    (median of ORG_NEWCOMER_ROUNDS, modes interleaved). Two levels: about
    one job's time, whatever A holds."""
    waits_ms: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(ORG_NEWCOMER_ROUNDS):
        for mode in MODES:
            r.reset()
            for _ in range(4):
                for m in range(ORG_A_MEMBERS):
                    r.submit(mode, f"onA-{m}", SERVICE_MS, group="A")
            time.sleep(1.0)
            job_id = r.submit(mode, f"onB-{mode}-{i}-{os.getpid()}", SERVICE_MS, group=f"B-{mode}-{i}")
            deadline = time.monotonic() + 120
            while not r.redis.hexists(r.runs_key, job_id):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{job_id} did not run")
                time.sleep(0.02)
            run = json.loads(r.redis.hget(r.runs_key, job_id))
            waits_ms[mode].append((run["start"] - r.submitted[job_id]) * 1000)
    return {mode: {"rounds_ms": [round(x, 1) for x in xs], "wait_ms": round(statistics.median(xs), 1)}
            for mode, xs in waits_ms.items()}


NOOP_USERS = 200


def noop_round(r: Runner, mode: str, n: int, cost: RedisCost) -> float:
    """Jobs per second for n jobs that do nothing, NOOP_USERS users
    round-robin; their Redis cost is added to `cost`."""
    r.reset()
    polls = r.polls

    def run() -> float:
        t0 = time.time()
        for i in range(n):
            r.submit(mode, f"user{i % NOOP_USERS}", 0, task="bench.cpu.noop")
        while int(r.redis.get("bench:noop_done") or 0) < n:
            r.polls += 1
            time.sleep(0.02)
        r.polls += 1
        return n / (time.time() - t0)

    rate = cost.measure(run, n)
    cost.subtract(get=r.polls - polls, incrby=n)  # redis-py sends INCR as INCRBY
    return rate


NOOP_ROUNDS = int(os.environ.get("BENCH_NOOP_ROUNDS", "5"))


def noop(r: Runner, n: int = 2000) -> dict:
    """Dispatch throughput and Redis cost per job, the modes alternating for
    NOOP_ROUNDS rounds: single runs on this shared machine vary by +-30%,
    medians of interleaved rounds do not drift with the machine's load. The
    per-user worker consumes every user's queue before the first round (the
    users are known; adding 200 queues is not dispatch)."""
    for i in range(NOOP_USERS):
        r.ensure_consumer(f"user{i}")
    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    costs = {mode: RedisCost(r.redis) for mode in MODES}
    for _ in range(NOOP_ROUNDS):
        for mode in runs:
            runs[mode].append(noop_round(r, mode, n, costs[mode]))
    return {mode: {"jobs": n, "users": NOOP_USERS, "rounds": [round(x, 1) for x in xs],
                   "throughput_per_s": round(statistics.median(xs), 1), "redis": costs[mode].report()}
            for mode, xs in runs.items()}


def scale(users_list: tuple[int, ...] = (10, 100_000), *, members: int = 0) -> dict:
    """Cost per scheduler operation with 10 versus 100,000 backlogged users
    (no workers: the Lua scripts alone, one round trip each). All but the
    last TIMED_SUBMITS users are submitted pipelined (untimed). `members`:
    the users are members of organisations of that many (0: none)."""
    from bench.tasks import client
    from dispatcher import FairScheduler

    out = {}
    for users in users_list:
        sched = FairScheduler(client(), "bench-scale")
        sched.clear()
        sched.register_worker("bench", 64)
        submit_t, release_t, finish_t = [], [], []
        bulk = max(0, users - TIMED_SUBMITS)
        for first in range(0, bulk, 1000):
            with sched.client.pipeline(transaction=False) as pipe:
                for u in range(first, min(bulk, first + 1000)):
                    for j in range(2):
                        sched.submit(f"{u}-{j}", f"user{u}", cost=1.0, client=pipe,
                                     group=f"org{u // members}" if members else None)
                pipe.execute()
        for u in range(bulk, users):
            for j in range(2):
                t = time.perf_counter()
                sched.submit(f"{u}-{j}", f"user{u}", cost=1.0, group=f"org{u // members}" if members else None)
                submit_t.append(time.perf_counter() - t)
        released = []
        for _ in range(2000):
            t = time.perf_counter()
            got = sched.release(limit=1)
            release_t.append(time.perf_counter() - t)
            released += got
            if len(released) >= min(60, users):  # keep a backlog in flight, even with few users
                job_id, _ = released.pop(0)
                t = time.perf_counter()
                released += sched.finish(job_id, actual_cost=1.0)
                finish_t.append(time.perf_counter() - t)
        sched.clear()
        out[str(users)] = {op: {"p50_us": round(pct(v, 50) * 1e6, 1), "p99_us": round(pct(v, 99) * 1e6, 1)}
                           for op, v in (("submit", submit_t), ("release", release_t), ("finish", finish_t))}
    return out


TIMED_SUBMITS = 500


# --- report ---------------------------------------------------------------------------------


def evaluate(res: dict) -> dict:
    """Issue 15's targets (and the ones the benchmark met before), each with
    its numbers and whether it passed."""
    service = SERVICE_MS / 1000
    limit_ms = (2 * service + 0.05) * 1000
    fair = {n: res[f"burst_{n}"]["fair"]["light_wait"]["p99_ms"] for n in (200, 2000)}
    per_user = {n: res[f"burst_{n}"]["per-user"]["light_wait"]["p99_ms"] for n in (200, 2000)}
    solo, nn, sc = res["alone"], res["noop"], res["scale"]
    small, big = sorted(sc, key=int)[0], sorted(sc, key=int)[-1]
    plain_cpu = nn["fifo"]["redis"]["cpu_ms_per_job"]
    return {
        "burst_light_p99_le_per_user": {
            "fair_ms": fair, "per_user_ms": per_user, "pass": all(fair[n] <= per_user[n] for n in fair)},
        "burst_light_p99_le_2x_service_plus_50ms": {
            "limit_ms": limit_ms, "fair_ms": fair, "pass": all(v <= limit_ms for v in fair.values())},
        "burst_light_p99_within_20pct_200_vs_2000": {
            "ratio": round(fair[2000] / fair[200], 3), "pass": abs(fair[2000] / fair[200] - 1) <= 0.20},
        "alone_makespan_within_1pct_of_fifo": {
            "ratio": round(solo["fair"]["makespan_s"] / solo["fifo"]["makespan_s"], 4),
            "pass": solo["fair"]["makespan_s"] <= 1.01 * solo["fifo"]["makespan_s"]},
        "noop_throughput_ge_90pct_of_plain_celery": {
            "ratio": round(nn["fair"]["throughput_per_s"] / nn["fifo"]["throughput_per_s"], 3),
            "pass": nn["fair"]["throughput_per_s"] >= 0.9 * nn["fifo"]["throughput_per_s"]},
        "redis_commands_per_job_le_20": {
            "fair": nn["fair"]["redis"]["commands_per_job"], "pass": nn["fair"]["redis"]["commands_per_job"] <= 20},
        "redis_cpu_per_job_le_1_5x_plain_celery": {
            "ratio": round(nn["fair"]["redis"]["cpu_ms_per_job"] / plain_cpu, 3) if plain_cpu else None,
            "pass": bool(plain_cpu) and nn["fair"]["redis"]["cpu_ms_per_job"] <= 1.5 * plain_cpu},
        "release_p99_flat_10_to_100000_users": {
            "users": [int(small), int(big)],
            "p99_us": [sc[small]["release"]["p99_us"], sc[big]["release"]["p99_us"]],
            # Flat: within 2x and 100 us of each other (a few us of noise on a shared machine).
            "pass": sc[big]["release"]["p99_us"] <= max(2 * sc[small]["release"]["p99_us"],
                                                       sc[small]["release"]["p99_us"] + 100)},
        "cost_skew_utilisation_ge_098": {
            "fair": res["two_heavy"]["fair"]["utilisation"], "pass": res["two_heavy"]["fair"]["utilisation"] >= 0.98},
        "weights_within_5pct_and_jain_ge_098": {
            "max_relative_error": res["weighted"]["fair"]["max_relative_error"],
            "jain": res["weighted"]["fair"]["jain_weighted"],
            "pass": res["weighted"]["fair"]["max_relative_error"] <= 0.05
            and res["weighted"]["fair"]["jain_weighted"] >= 0.98},
        "two_heavy_within_10pct_of_equal": {
            "max_deviation": res["two_heavy"]["fair"]["max_share_deviation"],
            "pass": res["two_heavy"]["fair"]["max_share_deviation"] <= 0.10},
        **organisation_targets(res),
    }


def organisation_targets(res: dict) -> dict:
    """Issue 34's: organisations share by weight, members within them."""
    org, weights = res["organisations"]["fair"]["shares"], res["organisation_weights"]["fair"]["shares"]
    members, newcomer = res["organisation_members"]["fair"], res["organisation_newcomer"]["fair"]
    return {
        "organisations_50_members_vs_1_share_050_pm_005": {
            "shares": org, "pass": abs(org["A"] - 0.5) <= 0.05 and abs(org["B"] - 0.5) <= 0.05},
        "organisation_weights_1_3_share_025_075_pm_005": {
            "shares": weights, "pass": abs(weights["A"] - 0.25) <= 0.05 and abs(weights["B"] - 0.75) <= 0.05},
        "organisation_members_1_2_within_5pct": {
            "ratio": members["ratio"], "pass": abs(members["ratio"] / 2 - 1) <= 0.05},
        "organisation_release_p99_flat_10x10_to_10000x10": {
            "p99_us": [res["organisation_scale"][n]["release"]["p99_us"] for n in ("100", "100000")],
            "pass": res["organisation_scale"]["100000"]["release"]["p99_us"]
            <= 1.2 * res["organisation_scale"]["100"]["release"]["p99_us"]},
        "organisation_newcomer_waits_within_one_job": {
            "wait_ms": newcomer["wait_ms"], "limit_ms": SERVICE_MS + 50, "pass": newcomer["wait_ms"] <= SERVICE_MS + 50},
    }


def table(res: dict, targets: dict) -> str:
    """The README's table: the three modes side by side, Fairlane's target and verdict."""
    ok = lambda name: "yes" if targets[name]["pass"] else "NO"  # noqa: E731
    rows = [("scenario", *(LABELS[m] for m in MODES), "target (Fairlane)", "met")]

    def row(label, values, target="", name=None):
        rows.append((label, *values, target, ok(name) if name else ""))

    for n in (200, 2000):
        b = res[f"burst_{n}"]
        rows.append((f"burst N={n}: light users' p50 / p99 wait",
                     *(f"{b[m]['light_wait']['p50_ms']:.0f} / {b[m]['light_wait']['p99_ms']:.0f} ms" for m in MODES),
                     "p99 <= queue per user's",
                     "yes" if b["fair"]["light_wait"]["p99_ms"] <= b["per-user"]["light_wait"]["p99_ms"] else "NO"))
    row("burst: light p99 N=2000 / N=200", ["", "", f"{targets['burst_light_p99_within_20pct_200_vs_2000']['ratio']:.2f}x"],
        "within 20%", "burst_light_p99_within_20pct_200_vs_2000")
    a = res["alone"]
    row(f"one user alone: makespan (median of {ALONE_ROUNDS})",
        [f"{a[m]['makespan_s']:.2f} s ({a[m]['makespan_s'] / a['fifo']['makespan_s']:.3f})" for m in MODES],
        "within 1% of FIFO", "alone_makespan_within_1pct_of_fifo")
    nc = res["newcomer"]
    row(f"a new user's first job, idle workers: wait (median of {NEWCOMER_ROUNDS})",
        [f"{nc[m]['wait_ms']:.0f} ms" for m in MODES])
    w = res["weighted"]
    fmt = lambda s: " : ".join(f"{s[k]:.3f}" for k in ("w1", "w2", "w4"))  # noqa: E731
    row("weights 1:2:4: shares (Jain)", [f"{fmt(w[m]['shares'])} ({w[m]['jain_weighted']:.2f})" for m in MODES],
        "0.143 : 0.286 : 0.571, >= 0.98", "weights_within_5pct_and_jain_ge_098")
    t = res["two_heavy"]
    a_ms, b_ms = TWO_HEAVY_MS["two_heavy"]
    row(f"two heavy ({a_ms} ms / {b_ms} ms): shares A : B",
        [f"{t[m]['shares']['heavyA']:.3f} : {t[m]['shares']['heavyB']:.3f}" for m in MODES],
        "0.5 : 0.5 +-10%", "two_heavy_within_10pct_of_equal")
    row("the same: worker utilisation while backlogged", [f"{t[m]['utilisation']:.3f}" for m in MODES], ">= 0.98",
        "cost_skew_utilisation_ge_098")
    row("the same: idle slot time per job started", [f"{t[m]['idle_ms_per_job']:.1f} ms" for m in MODES])
    if "two_heavy_20ms" in res:
        t20, (a_ms, b_ms) = res["two_heavy_20ms"], TWO_HEAVY_MS["two_heavy_20ms"]
        row(f"the same at {a_ms} ms / {b_ms} ms: utilisation", [f"{t20[m]['utilisation']:.3f}" for m in MODES])
    nn = res["noop"]
    row(f"{NOOP_USERS} users' no-op jobs: jobs per second (median of {NOOP_ROUNDS})",
        [f"{nn[m]['throughput_per_s']:.0f}/s ({nn[m]['throughput_per_s'] / nn['fifo']['throughput_per_s']:.2f})"
         for m in MODES], ">= 0.9x plain Celery", "noop_throughput_ge_90pct_of_plain_celery")
    row("Redis commands per job", [f"{nn[m]['redis']['commands_per_job']:.1f}" for m in MODES], "<= 20",
        "redis_commands_per_job_le_20")
    row("Redis CPU per job", [f"{nn[m]['redis']['cpu_ms_per_job']:.3f} ms" for m in MODES],
        "<= 1.5x plain Celery", "redis_cpu_per_job_le_1_5x_plain_celery")
    sc = res["scale"]
    small, big = sorted(sc, key=int)[0], sorted(sc, key=int)[-1]
    row(f"release p99, {int(small):,} vs {int(big):,} backlogged users",
        ["", "", f"{sc[small]['release']['p99_us']:.0f} vs {sc[big]['release']['p99_us']:.0f} us"], "flat",
        "release_p99_flat_10_to_100000_users")
    o = res["organisations"]
    row(f"organisation of {ORG_A_MEMBERS} members vs one of 1: shares A : B",
        [f"{o[m]['shares']['A']:.3f} : {o[m]['shares']['B']:.3f}" for m in MODES], "0.50 : 0.50 +-0.05",
        "organisations_50_members_vs_1_share_050_pm_005")
    ow = res["organisation_weights"]
    row("organisations weighted 1:3: shares A : B",
        [f"{ow[m]['shares']['A']:.3f} : {ow[m]['shares']['B']:.3f}" for m in MODES], "0.25 : 0.75 +-0.05",
        "organisation_weights_1_3_share_025_075_pm_005")
    om = res["organisation_members"]
    row("members weighted 1:2 within an organisation: ratio", [f"{om[m]['ratio']:.2f}" for m in MODES],
        "2 +-5%", "organisation_members_1_2_within_5pct")
    on = res["organisation_newcomer"]
    row(f"a newcomer organisation's first job behind {ORG_A_MEMBERS} members' backlog: wait (median of "
        f"{ORG_NEWCOMER_ROUNDS})", [f"{on[m]['wait_ms']:.0f} ms" for m in MODES], f"<= {SERVICE_MS + 50} ms",
        "organisation_newcomer_waits_within_one_job")
    osc = res["organisation_scale"]
    row("release p99, 10 x 10 vs 10,000 x 10 organisations x members",
        ["", "", f"{osc['100']['release']['p99_us']:.0f} vs {osc['100000']['release']['p99_us']:.0f} us"],
        "within 1.2x", "organisation_release_p99_flat_10x10_to_10000x10")
    return markdown_table(rows)


def markdown_table(rows: list[list[str]]) -> str:
    """`rows` (the first one the header) as a Markdown table, columns aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, n in zip(axes[:2], (200, 2000)):
        b = res[f"burst_{n}"]
        data = [[w * 1000 for w in b[m]["light_waits_s"]] for m in MODES]
        ax.boxplot(data, tick_labels=[LABELS[m] for m in MODES], whis=(0, 100))
        ax.set_yscale("log")
        ax.set_ylabel("light users' wait (ms, log)")
        ax.set_title(f"Burst: 1 user x {n} jobs of {SERVICE_MS} ms, 20 light users")
        ax.axhline(b["per-user"]["light_wait"]["p99_ms"], color="tab:red", ls="--", lw=1,
                   label="queue per user's p99 (target)")
        ax.legend(loc="upper right")
    ax = axes[2]
    a_ms, b_ms = TWO_HEAVY_MS["two_heavy"]
    labels = ["w1", "w2", "w4", f"A ({a_ms}ms)", f"B ({b_ms}ms)"]
    x = list(range(len(labels)))
    for i, mode in enumerate(MODES):
        values = [res["weighted"][mode]["shares"][k] for k in ("w1", "w2", "w4")] + [
            res["two_heavy"][mode]["shares"][k] for k in ("heavyA", "heavyB")]
        ax.bar([j + (i - 1) * 0.27 for j in x], values, 0.27, label=LABELS[mode])
    ax.scatter(x, [1 / 7, 2 / 7, 4 / 7, 0.5, 0.5], color="black", marker="_", s=400, label="target", zorder=3)
    ax.set_xticks(x, labels)
    ax.set_ylabel("share of worker time while backlogged")
    ax.set_title("Weights 1:2:4 and two heavy users of 10x cost")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def start_workers(env: Environment, modes: tuple[str, ...] = MODES, *, include: tuple[str, ...] = (),
                  worker_env: dict | None = None) -> dict[str, Worker]:
    """One worker per mode, the same pool, concurrency and settings;
    `include`: task modules every one of them imports besides its own."""
    from bench.plain_celery import FIFO_QUEUE, PER_USER_IDLE_QUEUE

    specs = {  # queue, name, app, its own task modules
        "fifo": (FIFO_QUEUE, "plain-fifo", "bench.plain_celery:fifo_app", ()),
        "per-user": (PER_USER_IDLE_QUEUE, "plain-per-user", "bench.plain_celery:per_user_app", ()),
        "fair": ("cpu-transcode", "cpu", "project", ("bench.tasks",)),
    }
    return {mode: Worker(queue, name=name, app=app, include=(*own, *include), pool="prefork", concurrency=CORES,
                         log_dir=env.var, env=worker_env)
            for mode, (queue, name, app, own) in specs.items() if mode in modes}


SCENARIOS = ("burst_200", "burst_2000", "two_heavy", "two_heavy_20ms", "weighted", "alone", "newcomer", "noop", "scale",
             "organisations", "organisation_weights", "organisation_members", "organisation_newcomer",
             "organisation_scale")


def main() -> int:
    """`python -m bench.fairness [scenario ...]`: all scenarios by default;
    naming some runs only those (for iterating; no report is written then)."""
    chosen = sys.argv[1:] or list(SCENARIOS)
    env = Environment()
    workers = start_workers(env)
    try:
        for worker in workers.values():
            worker.wait_ready()
        r = Runner(workers["per-user"].name)
        res: dict = {}
        per_mode = {"burst_200": lambda m: burst(r, m, 200), "burst_2000": lambda m: burst(r, m, 2000),
                    **{name: (lambda m, ms=ms: two_heavy(r, m, *ms)) for name, ms in TWO_HEAVY_MS.items()},
                    "weighted": lambda m: weighted(r, m), "organisations": lambda m: organisations(r, m),
                    "organisation_weights": lambda m: organisation_weights(r, m),
                    "organisation_members": lambda m: organisation_members(r, m)}
        for name in chosen:
            t = time.monotonic()
            if name in per_mode:
                res[name] = {mode: per_mode[name](mode) for mode in MODES}
            elif name == "scale":
                res[name] = scale()
            elif name == "organisation_scale":  # 10 organisations x 10 members vs 10,000 x 10
                res[name] = scale((100, 100_000), members=10)
            else:
                res[name] = {"alone": alone, "newcomer": newcomer, "noop": noop,
                             "organisation_newcomer": organisation_newcomer}[name](r)
            print(f"  {name:<11} done in {time.monotonic() - t:5.1f} s: {json.dumps(res[name])}",
                  file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.stop()
        env.close()
    if set(chosen) != set(SCENARIOS):
        return 0
    targets = evaluate(res)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cores": CORES, "python": platform.python_version(), "platform": platform.platform()},
        "setup": {"worker": f"prefork x {CORES}, prefetch 1, acks_late, task events on; one worker per mode",
                  "service_ms": SERVICE_MS, "modes": LABELS},
        "results": res,
        "targets": targets,
        "all_targets_met": all(t["pass"] for t in targets.values()),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fairness.json").write_text(json.dumps(report, indent=2))
    plot(res, RESULTS / "fairness.png")
    print(table(res, targets))
    print(f"\nall targets met: {report['all_targets_met']}; wrote {RESULTS / 'fairness.json'} and fairness.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
