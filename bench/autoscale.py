"""Autoscaling benchmark: `python -m bench.autoscale` (make bench-autoscale).
Writes bench/results/autoscale.json and autoscale.png and prints a table.

A discrete-event simulation of one day of a Filestage-shaped workload on an
autoscaled cluster of worker hosts, in which every dispatch decision is the
dispatcher's own: its Lua (the FairScheduler) on a private Redis, driven on
a simulated clock through the scheduler's `now=` arguments. Submits,
releases, finishes and hand-backs are the calls the workers make; the order
jobs leave the backlogs is whatever the Lua releases, and the autoscaler
reads the lane's summary as /metrics does (dispatcher/autoscale.py).

The day (WORKLOAD, seeded): 800,000 uploads a month, 26,667 a day; light
customers upload small batches through business hours; six bursts of
thousands of files from one customer each (photo shoots, batches of social
clips). Videos longer than FAIRLANE_CHUNK_THRESHOLD_S (60 s) become 30 s
chunks, as the product cuts them. Durations are drawn from the media
benchmark (bench/results/media.json, "overhead": the real job's run time
for 1, 3 and 10 s of 1080p): a line through the medians, times a factor
drawn from the runs' own spread around their median; images and PDFs,
which that benchmark does not time, take the product's estimate (0.3 s)
times the same factor. Estimates are the product's (transcoding/services.py:
1.6 s per 1080p media second, 0.3 s a still): the scheduler's measured /
estimated ratio corrects them, as in production.

The cluster: hosts of 4 slots, 3 minutes from launch to taking work, billed
in 10-minute periods from launch. The autoscaler looks every 15 s (KEDA's
pollingInterval in deploy/), scales out at once, scales in on the largest
count asked for over the last 5 minutes, at most 4 hosts a minute (the
HPA's behaviour in deploy/), between 1 and 50 hosts. A host picked for
removal gets SIGTERM: it leaves the window, its running jobs have the grace
period (FAIRLANE_SHUTDOWN_GRACE_S, 30 s), and what still runs then is handed
back to the front of its owner's backlog, the attempt's worker-seconds lost.

Eight runs of the same day: scale on jobs or on worker-seconds, FIFO or fair
dispatch, with or without scale-in protection.

- On jobs: (waiting + in flight jobs) / (slots x jobs per slot), jobs per
  slot tuned for the day's own mean job (target / mean worker-seconds a
  job): the best a job count can do, knowing the day in advance.
- On worker-seconds: `fairlane_suggested_hosts` (FAIRLANE_SCALE_TARGET_S).
- FIFO: every job under one fairness key (the Lua releases them in
  submission order); fair: one key per customer.
- Protection: a host is protected while it runs a job and for
  FAIRLANE_IDLE_UNPROTECT_S (60 s) after its last (and from its start); a
  scale-in removes unprotected hosts only and waits for the rest, as ECS
  does. Without: the hosts removed are drawn at random, busy or not.

Targets (issue 36): with fair dispatch, scaling on worker-seconds gives
light customers' p99 wait at most half of scaling on jobs' at no more than
1.1x its host-hours; protection brings the jobs handed back by scale-in to 0.

A few minutes on 2 cores (each run is about 100,000 scheduler calls).
Smaller: `python -m bench.autoscale --hours 6`; another day: `--seed 37`
(neither writes a report).
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.ports import free_port
from dispatcher import FairScheduler, lane_work, suggested_hosts

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

DAY_S = 24 * 3600
UPLOADS_PER_DAY = 800_000 / 30
# Bursts of thousands of files from one customer: (hour, customer, files, kind).
BURSTS = ((8.7, "burst-a", 3000, "image"), (10.25, "burst-b", 1500, "video"), (11.5, "burst-c", 5000, "image"),
          (13.8, "burst-a", 2500, "video"), (15.3, "burst-b", 2000, "mixed"), (17.1, "burst-c", 4000, "image"))
BURST_UPLOAD_S = 300  # a drop of thousands of files arrives over five minutes of uploading
LIGHT_CUSTOMERS = 300
LIGHT_BATCH_MEAN = 5  # files a light customer drops at once (geometric, at most LIGHT_BATCH_MAX)
LIGHT_BATCH_MAX = 40
# What a file is: shares of image / pdf / video.
MIX = {"light": (0.55, 0.20, 0.25), "image": (0.95, 0.05, 0.0), "video": (0.0, 0.0, 1.0),
       "mixed": (0.5, 0.2, 0.3)}
# Video lengths (s): lognormal medians and spreads; light customers' are
# review cuts, bursts' are social clips.
VIDEO_MEDIAN_S = {"light": 40.0, "burst": 20.0}
VIDEO_SIGMA = {"light": 1.0, "burst": 0.8}
VIDEO_MAX_S = 1800.0
CHUNK_THRESHOLD_S, CHUNK_S = 60.0, 30.0  # FAIRLANE_CHUNK_THRESHOLD_S, FAIRLANE_CHUNK_S
# The product's estimates (transcoding/services.py: COST_PER_MEDIA_SECOND, COST_FLAT).
ESTIMATE_PER_VIDEO_S, ESTIMATE_STILL_S = 1.6, 0.3

SLOTS_PER_HOST = 4
START_UP_S = 180.0
BILLING_S = 600.0
MIN_HOSTS, MAX_HOSTS = 1, 50
TICK_S = 15.0  # the autoscaler's look (KEDA pollingInterval)
SCALE_IN_WINDOW_S = 300.0  # HPA scale-down stabilisation
SCALE_IN_PER_MIN = 4
GRACE_S = 30.0  # FAIRLANE_SHUTDOWN_GRACE_S
IDLE_UNPROTECT_S = 60.0  # FAIRLANE_IDLE_UNPROTECT_S
TARGET_S = 300.0  # FAIRLANE_SCALE_TARGET_S
AFTER_DAY_S = 3 * 3600  # the simulation goes on until the day's work is done; billed until DAY_S + this

DEFAULT_SEED = 36
SCENARIOS = [(signal, mode, protect) for signal in ("jobs", "work") for mode in ("fifo", "fair")
             for protect in (False, True)]


@dataclass
class Job:
    id: str
    file: int  # the upload it comes from: a video longer than CHUNK_THRESHOLD_S is several jobs
    customer: str
    light: bool
    arrival: float
    estimate: float
    actual: float  # the worker-seconds it takes, drawn from the media benchmark


def durations_model(media: dict) -> tuple[float, float, list[float]]:
    """(fixed s, s per media second, relative spread factors) from the media
    benchmark's real jobs: a least-squares line through each clip length's
    median run, and every run divided by its clip's median."""
    rows = media["overhead"]
    xs = [r["clip_s"] for r in rows]
    ys = [statistics.median(r["job_runs_s"]) for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    spread = [run / statistics.median(r["job_runs_s"]) for r in rows for run in r["job_runs_s"]]
    return max(0.0, my - slope * mx), slope, spread


def workload(seed: int, media: dict, hours: float = 24.0) -> list[Job]:
    """The day's jobs, in arrival order (seeded: every scenario gets the same day)."""
    rng = random.Random(seed)
    fixed, per_s, spread = durations_model(media)
    jobs: list[Job] = []
    count = uploads = 0

    def add_file(customer: str, light: bool, at: float, kind: str) -> None:
        nonlocal count, uploads
        uploads += 1
        image, pdf, _ = MIX[kind]
        draw = rng.random()
        if draw < image + pdf:
            lengths = [None]
        else:
            group = "light" if light else "burst"
            d = min(VIDEO_MAX_S, rng.lognormvariate(math.log(VIDEO_MEDIAN_S[group]), VIDEO_SIGMA[group]))
            n = math.ceil(d / CHUNK_S) if d > CHUNK_THRESHOLD_S else 1
            lengths = [d / n] * n
        for length in lengths:
            count += 1
            factor = rng.choice(spread)
            if length is None:
                estimate, actual = ESTIMATE_STILL_S, ESTIMATE_STILL_S * factor
            else:
                estimate, actual = ESTIMATE_PER_VIDEO_S * length, (fixed + per_s * length) * factor
            jobs.append(Job(f"j{count}", uploads, customer, light, at, estimate, actual))

    bursts_files = sum(files for hour, _, files, _ in BURSTS if hour < hours)
    light_files = max(0.0, UPLOADS_PER_DAY * hours / 24 - bursts_files)

    def busy(hour: float) -> float:  # business hours, a lull at lunch; a little at night
        return 0.08 + math.exp(-((hour - 10.5) / 2.2) ** 2) + 0.9 * math.exp(-((hour - 15.0) / 2.0) ** 2)

    peak = max(busy(h / 10) for h in range(240))
    rate = light_files / LIGHT_BATCH_MEAN / sum(busy(h / 60) / 60 for h in range(int(hours * 60))) / 3600
    t = 0.0
    while True:  # batches by thinning a Poisson process of the peak rate
        t += rng.expovariate(rate * peak)
        if t >= hours * 3600:
            break
        if rng.random() < busy(t / 3600) / peak:
            customer = f"light-{rng.randrange(LIGHT_CUSTOMERS)}"
            # Geometric on 1, 2, ... with mean LIGHT_BATCH_MEAN: the floor of an exponential
            # of rate -ln(1 - 1/mean) is geometric on 0, 1, ... with mean `mean - 1`.
            size = min(LIGHT_BATCH_MAX, 1 + int(rng.expovariate(-math.log(1 - 1 / LIGHT_BATCH_MEAN))))
            for _ in range(size):
                add_file(customer, True, t, "light")
    for hour, customer, files, kind in BURSTS:
        if hour >= hours:
            continue
        for _ in range(files):
            add_file(customer, False, hour * 3600 + rng.uniform(0, BURST_UPLOAD_S), kind)
    jobs.sort(key=lambda j: j.arrival)
    return jobs


@dataclass
class Host:
    name: str
    launched: float
    ready: bool = False
    draining: bool = False
    stopped: float | None = None
    running: dict[str, float] = field(default_factory=dict)  # job id -> started at
    last_busy: float = 0.0

    def protected(self, now: float) -> bool:
        """The rule of dispatcher/protection.py: from its start, while it
        runs a job, and IDLE_UNPROTECT_S after its last."""
        return self.ready and (bool(self.running) or now - self.last_busy < IDLE_UNPROTECT_S)


class Simulation:
    """One run of the day: one scenario, one lane of the dispatcher."""

    def __init__(self, client: redis.Redis, jobs: list[Job], *, signal: str, mode: str, protect: bool,
                 jobs_per_slot: float, seed: int, lane: str, hours: float) -> None:
        self.jobs = {j.id: j for j in jobs}
        self.arrivals = jobs
        self.signal, self.mode, self.protect, self.jobs_per_slot = signal, mode, protect, jobs_per_slot
        self.rng = random.Random(seed)
        self.end = hours * 3600
        # No headroom and no default window: the cpu lane's settings; leases
        # never run out on their own (no reap: nothing here dies).
        self.sched = FairScheduler(client, lane, headroom=0, default_window=0, release_lease_s=1e9,
                                   run_lease_s=1e9)
        self.sched.clear()
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.hosts: dict[str, Host] = {}
        self.free: deque[str] = deque()  # idle slots, longest idle first (Redis serves blocked pops in order)
        self.attempt: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.handed_back = 0
        self.lost_work_s = 0.0
        self.asked: deque[tuple[float, int]] = deque()
        self.removed_at: deque[float] = deque()
        self.timeline: list[tuple[float, int, int, float]] = []  # (t, hosts up, hosts asked, work waiting)
        self.calls = 0

    def push(self, t: float, kind: str, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def key(self, job: Job) -> str:
        return "all" if self.mode == "fifo" else job.customer

    # --- hosts -------------------------------------------------------------------------------
    def launch(self, t: float, *, ready: bool = False) -> None:
        host = Host(f"h{len(self.hosts)}", launched=t)
        self.hosts[host.name] = host
        if ready:
            self.host_ready(t, host)
        else:
            self.push(t + START_UP_S, "ready", host.name)

    def host_ready(self, t: float, host: Host) -> None:
        if host.draining:
            return
        host.ready, host.last_busy = True, t
        self.sched.register_worker(host.name, SLOTS_PER_HOST, ttl_s=1e9, now=t)
        self.free.extend([host.name] * SLOTS_PER_HOST)
        self.calls += 1
        self.assign(t, self.sched.release(now=t))

    def remove(self, t: float, host: Host) -> None:
        """SIGTERM: out of the window at once; running jobs get the grace period."""
        host.draining = True
        if host.ready:
            self.sched.unregister_worker(host.name)
            self.calls += 1
        if host.running:
            self.push(t + GRACE_S, "grace", host.name)
        else:
            host.stopped = t

    def grace_over(self, t: float, host: Host) -> None:
        if host.stopped is not None:  # its jobs all ended within the grace period
            return
        for job_id, started in list(host.running.items()):
            self.attempt[job_id] += 1  # its finish event is stale now
            self.sched.requeue(job_id, actual_cost=t - started, now=t)
            self.calls += 1
            self.handed_back += 1
            self.lost_work_s += t - started
            self.started.pop(job_id, None)
        host.running.clear()
        host.stopped = t
        self.calls += 1
        self.assign(t, self.sched.release(now=t))

    # --- jobs --------------------------------------------------------------------------------
    def assign(self, t: float, released) -> None:
        for job_id, _ in released:
            while True:
                name = self.free.popleft()  # an IndexError here: the Lua released beyond the live slots
                host = self.hosts[name]
                if not host.draining:
                    break
            job = self.jobs[job_id]
            host.running[job_id] = t
            host.last_busy = t
            self.started[job_id] = t
            attempt = self.attempt.get(job_id, 0)
            self.attempt[job_id] = attempt
            self.push(t + job.actual, "finish", (job_id, name, attempt))

    def finish(self, t: float, job_id: str, name: str) -> None:
        host = self.hosts[name]
        host.running.pop(job_id)
        host.last_busy = t
        self.done[job_id] = t
        job = self.jobs[job_id]
        if not host.draining:
            self.free.append(name)
        elif not host.running:
            host.stopped = t
        self.calls += 1
        self.assign(t, self.sched.finish(job_id, actual_cost=job.actual, key=self.key(job), now=t))

    # --- the autoscaler ----------------------------------------------------------------------
    def wanted(self, t: float) -> tuple[int, float]:
        summary = self.sched.summary(now=t)
        self.calls += 1
        work = lane_work(summary)
        if self.signal == "work":
            hosts = suggested_hosts(work_s=work.work_s, jobs=work.jobs, target_s=TARGET_S,
                                    slots_per_host=SLOTS_PER_HOST)
        else:
            hosts = math.ceil(work.jobs / (SLOTS_PER_HOST * self.jobs_per_slot))
        return min(MAX_HOSTS, max(MIN_HOSTS, hosts)), work.waiting_work_s

    def tick(self, t: float) -> None:
        wanted, waiting_s = self.wanted(t)
        self.asked.append((t, wanted))
        while self.asked[0][0] < t - SCALE_IN_WINDOW_S:
            self.asked.popleft()
        while self.removed_at and self.removed_at[0] <= t - 60:
            self.removed_at.popleft()
        up = [h for h in self.hosts.values() if not h.draining and h.stopped is None]
        change = scale_step(wanted=wanted, up=len(up), asked_recently=[w for _, w in self.asked],
                            removed_last_minute=len(self.removed_at))
        for _ in range(change):
            self.launch(t)
        if change < 0:
            # ECS and the ReplicaSet controller pass over protected hosts (a
            # deletion cost is a preference; see docs/scale-out.md); without
            # protection they pick with no regard to the work a host runs.
            candidates = [h for h in up if not (self.protect and h.protected(t))]
            for host in self.rng.sample(candidates, min(-change, len(candidates))):
                self.remove(t, host)
                self.removed_at.append(t)
        self.timeline.append((t, len([h for h in self.hosts.values() if h.ready and not h.draining]), wanted,
                              waiting_s))

    # --- the run -----------------------------------------------------------------------------
    def run(self) -> dict:
        self.launch(0.0, ready=True)
        i, n = 0, len(self.arrivals)
        t = 0.0
        self.push(0.0, "tick")
        while True:
            next_arrival = self.arrivals[i].arrival if i < n else math.inf
            if self.events and self.events[0][0] <= next_arrival:
                t, _, kind, payload = heapq.heappop(self.events)
            elif i < n:
                # One submit round per second of arrivals (a web host's
                # batch): each job submitted at its own arrival, one release
                # after the last, never past the next event (the clock only
                # moves forward).
                next_event = self.events[0][0] if self.events else math.inf
                batch_end = min(math.floor(next_arrival) + 1.0, next_event)
                with self.sched.client.pipeline(transaction=False) as pipe:
                    while i < n and self.arrivals[i].arrival < batch_end:
                        job = self.arrivals[i]
                        t = job.arrival
                        self.sched.submit(job.id, self.key(job), cost=job.estimate, now=t, client=pipe)
                        i += 1
                    pipe.execute()
                self.calls += 1
                self.assign(t, self.sched.release(now=t))
                continue
            else:
                break
            if kind == "finish":
                job_id, name, attempt = payload
                if self.attempt.get(job_id) == attempt and job_id in self.hosts[name].running:
                    self.finish(t, job_id, name)
            elif kind == "ready":
                self.host_ready(t, self.hosts[payload])
            elif kind == "grace":
                self.grace_over(t, self.hosts[payload])
            elif kind == "tick":
                if t < self.end + AFTER_DAY_S:
                    self.tick(t)
                    self.push(t + TICK_S, "tick")
        return self.report()

    def report(self) -> dict:
        billed_until = self.end + AFTER_DAY_S
        host_s = 0.0
        for host in self.hosts.values():
            host_s += billed_s(host.launched, host.stopped if host.stopped is not None else billed_until)
        waits = {True: [], False: []}
        for job_id, job in self.jobs.items():
            if job_id in self.started:
                waits[job.light].append(self.started[job_id] - job.arrival)
        light, heavy = sorted(waits[True]), sorted(waits[False])
        return {
            "jobs": len(self.jobs), "finished": len(self.done), "unfinished": len(self.jobs) - len(self.done),
            "light_jobs": len(light),
            "light_wait_s": {"p50": pct(light, 50), "p90": pct(light, 90), "p99": pct(light, 99),
                             "max": round(light[-1], 2) if light else 0.0},
            "burst_wait_s": {"p50": pct(heavy, 50), "p99": pct(heavy, 99)},
            "host_hours": round(host_s / 3600, 2),
            "hosts_launched": len(self.hosts),
            "peak_hosts": max(h for _, h, _, _ in self.timeline),
            "handed_back": self.handed_back,
            "lost_work_s": round(self.lost_work_s, 1),
            "last_finish_h": round(max(self.done.values(), default=0.0) / 3600, 2),
            "scheduler_calls": self.calls,
        }


def scale_step(*, wanted: int, up: int, asked_recently: list[int], removed_last_minute: int) -> int:
    """Hosts to launch (> 0) or to remove (< 0) this tick: out at once to
    what is asked; in only to the most asked for over the stabilisation
    window (`asked_recently`, this tick's ask included), at most
    SCALE_IN_PER_MIN hosts a minute (the HPA behaviour in deploy/)."""
    if wanted > up:
        return wanted - up
    keep = max(asked_recently, default=wanted)
    return -max(0, min(up - keep, SCALE_IN_PER_MIN - removed_last_minute))


def billed_s(launched: float, stopped: float) -> float:
    """What a host from `launched` to `stopped` costs: whole billing periods
    from its launch, at least one."""
    return max(1, math.ceil((stopped - launched) / BILLING_S - 1e-9)) * BILLING_S


def pct(values: list[float], q: float) -> float:
    """The q-th percentile of sorted `values` (nearest rank), 0 when empty."""
    if not values:
        return 0.0
    return round(values[min(len(values) - 1, math.ceil(q / 100 * len(values)) - 1)], 2)


def evaluate(res: dict) -> dict:
    def r(signal: str, mode: str, protect: bool) -> dict:
        return res[name(signal, mode, protect)]

    targets = {}
    for protect in (False, True):
        work, jobs = r("work", "fair", protect), r("jobs", "fair", protect)
        ratio_wait = work["light_wait_s"]["p99"] / max(jobs["light_wait_s"]["p99"], 1e-9)
        ratio_hours = work["host_hours"] / jobs["host_hours"]
        suffix = "protected" if protect else "unprotected"
        targets[f"light_p99_half_of_jobs_{suffix}"] = {
            "work_fair_p99_s": work["light_wait_s"]["p99"], "jobs_fair_p99_s": jobs["light_wait_s"]["p99"],
            "ratio": round(ratio_wait, 3), "target": "<= 0.5", "pass": ratio_wait <= 0.5}
        targets[f"host_hours_within_1.1x_{suffix}"] = {
            "work_fair_h": work["host_hours"], "jobs_fair_h": jobs["host_hours"], "ratio": round(ratio_hours, 3),
            "target": "<= 1.1", "pass": ratio_hours <= 1.1}
    handed = {name(*s): res[name(*s)]["handed_back"] for s in SCENARIOS if s[2]}
    targets["protection_hands_back_nothing"] = {"handed_back": handed, "target": "0 in every protected run",
                                                "pass": all(v == 0 for v in handed.values())}
    return targets


def name(signal: str, mode: str, protect: bool) -> str:
    return f"{signal}-{mode}-{'protected' if protect else 'unprotected'}"


LABELS = {"jobs": "scale on jobs", "work": "scale on worker-s"}


def table(res: dict, targets: dict) -> str:
    rows = [["run", "light p50 / p99 wait", "burst p99 wait", "host-hours", "peak hosts", "handed back",
             "lost worker-s"]]
    for s in SCENARIOS:
        x = res[name(*s)]
        rows.append([f"{LABELS[s[0]]}, {s[1]}, {'protection' if s[2] else 'no protection'}",
                     f"{x['light_wait_s']['p50']:.1f} / {x['light_wait_s']['p99']:.1f} s",
                     f"{x['burst_wait_s']['p99']:.0f} s", f"{x['host_hours']:.1f}", str(x["peak_hosts"]),
                     str(x["handed_back"]), f"{x['lost_work_s']:.0f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines.append("")
    for key, target in targets.items():
        lines.append(f"{key}: {'met' if target['pass'] else 'MISSED'} "
                     f"({json.dumps({k: v for k, v in target.items() if k != 'pass'})})")
    return "\n".join(lines)


def plot(timelines: dict, res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    ax = axes[0]
    for key, colour in (("jobs-fair-protected", "tab:orange"), ("work-fair-protected", "tab:blue")):
        line = timelines[key]
        ax.plot([p[0] / 3600 for p in line], [p[1] for p in line], color=colour, lw=1,
                label=f"{key}: hosts taking work")
    for hour, _, files, kind in BURSTS:
        ax.axvline(hour, color="grey", lw=0.5, ls=":")
        ax.text(hour, MAX_HOSTS * 0.97, f"{files} {kind}", rotation=90, fontsize=7, va="top")
    ax.set_xlabel("hour of the day")
    ax.set_ylabel("hosts")
    ax.set_title("Hosts through the day (fair, protected)")
    ax.legend(fontsize=7, loc="center right")
    names = [name(*s) for s in SCENARIOS]
    short = [n.replace("-protected", "\n+prot").replace("-unprotected", "") for n in names]
    ax = axes[1]
    ax.bar(range(len(names)), [res[n]["light_wait_s"]["p99"] for n in names],
           color=["tab:orange" if n.startswith("jobs") else "tab:blue" for n in names])
    ax.set_xticks(range(len(names)), short, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("light customers' p99 wait (s, log)")
    ax.set_title("Light customers' p99 wait")
    ax = axes[2]
    ax.bar(range(len(names)), [res[n]["host_hours"] for n in names],
           color=["tab:orange" if n.startswith("jobs") else "tab:blue" for n in names])
    for i, n in enumerate(names):
        ax.text(i, res[n]["host_hours"], f"{res[n]['handed_back']} back", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), short, fontsize=7)
    ax.set_ylabel("host-hours (10-minute billing)")
    ax.set_title("Host-hours; jobs handed back by scale-in")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="a shorter day (no report is written)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="another day (no report is written)")
    args = parser.parse_args()
    media = json.loads((RESULTS / "media.json").read_text())
    jobs = workload(args.seed, media, args.hours)
    mean_job_s = statistics.fmean(j.actual for j in jobs)
    jobs_per_slot = TARGET_S / mean_job_s
    print(f"{len(jobs)} jobs ({sum(j.light for j in jobs)} light), {sum(j.actual for j in jobs) / 3600:.0f} "
          f"worker-hours; mean job {mean_job_s:.1f} s, so {jobs_per_slot:.1f} jobs per slot when scaling on jobs",
          file=sys.stderr, flush=True)

    from project import embedded_redis

    folder = Path(tempfile.mkdtemp(prefix="fairlane-bench-autoscale-"))
    port = free_port()
    server = embedded_redis.spawn(folder / "redis", port, persist=False)
    results, timelines = {}, {}
    try:
        client = redis.Redis(port=port)
        for index, (signal, mode, protect) in enumerate(SCENARIOS):
            started = time.monotonic()
            sim = Simulation(client, jobs, signal=signal, mode=mode, protect=protect, jobs_per_slot=jobs_per_slot,
                             seed=args.seed + index, lane=f"autoscale-{index}", hours=args.hours)
            key = name(signal, mode, protect)
            results[key] = sim.run()
            timelines[key] = sim.timeline
            print(f"  {key:<24} {time.monotonic() - started:6.1f} s: {json.dumps(results[key])}", file=sys.stderr,
                  flush=True)
    finally:
        server.kill()
        server.wait()
    targets = evaluate(results)
    print(table(results, targets))
    if args.hours != 24.0 or args.seed != DEFAULT_SEED:
        return 0  # the report is the canonical day's
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "setup": {
            "uploads_per_day": round(UPLOADS_PER_DAY), "bursts": [dict(zip(("hour", "customer", "files", "kind"), b))
                                                                  for b in BURSTS],
            "light_customers": LIGHT_CUSTOMERS, "jobs": len(jobs), "light_jobs": sum(j.light for j in jobs),
            "worker_hours": round(sum(j.actual for j in jobs) / 3600, 1), "mean_job_s": round(mean_job_s, 2),
            "durations": dict(zip(("fixed_s", "per_media_s", "spread"), durations_model(media)[:2])),
            "slots_per_host": SLOTS_PER_HOST, "start_up_s": START_UP_S, "billing_s": BILLING_S,
            "hosts": [MIN_HOSTS, MAX_HOSTS], "tick_s": TICK_S, "scale_in_window_s": SCALE_IN_WINDOW_S,
            "scale_in_per_min": SCALE_IN_PER_MIN, "grace_s": GRACE_S, "idle_unprotect_s": IDLE_UNPROTECT_S,
            "target_s": TARGET_S, "jobs_per_slot": round(jobs_per_slot, 2), "seed": args.seed,
        },
        "results": results,
        "targets": targets,
        "all_targets_met": all(t["pass"] for t in targets.values()),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "autoscale.json").write_text(json.dumps(report, indent=2))
    plot(timelines, results, RESULTS / "autoscale.png")
    print(f"\nall targets met: {report['all_targets_met']}; wrote {RESULTS / 'autoscale.json'} and autoscale.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
