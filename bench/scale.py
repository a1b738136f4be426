"""Scale-out benchmark: `make bench-scale` (as root: network namespaces).

Worker hosts are network namespaces on a bridge (bench/hosts.py), each
running one cpu-transcode worker (prefork, concurrency 1) pinned to its own
core with taskset; PostgreSQL, Redis and SeaweedFS are private instances on
the bridge (bench/private_services.py); this process is the web (it uploads
through the upload service, as a request does). Real video jobs: a 1280x720
H.264 + AAC clip through the whole path (store, dispatch, copy to scratch,
probe, ladder, upload outputs, publish).

Measured, in rounds that alternate one host and two hosts:
- throughput: a batch of JOBS videos at once, jobs per minute from the first
  upload to the last finish (the database's times); target: two hosts at
  least 1.8x one host (median of the rounds);
- fairness across hosts: a heavy user floods the lane, then light users
  arrive one at a time, each with one image; their waits (queued -> started,
  the database's clock), p99; target: about one job time, as on one host
  (p99 at most 1.25x the median heavy job's processing time).
Then the object-storage overhead of one job against local disk
(bench/storage.py, run as part of this benchmark; target < 5 % of a 10 s
clip's job).

Writes bench/results/scale.json and scale.png and prints a table.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import BIN, ROOT, upload_batch
from bench.hosts import HostWorker
from bench.private_services import Cluster

RESULTS = ROOT / "bench" / "results"
SOURCE_SIZE, SECONDS = "1280x720", 6
JOBS = int(os.environ.get("BENCH_SCALE_JOBS", "8"))
ROUNDS = int(os.environ.get("BENCH_SCALE_ROUNDS", "2"))
FLOOD, LIGHT_USERS, LIGHT_GAP_S = 12, 8, 2.0
TARGET_RATIO = 1.8
TARGET_WAIT_FACTOR = 1.25
TARGET_STORAGE_PCT = 5.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.cluster = Cluster()
        os.environ.update({**self.cluster.env(), "FAIRLANE_VAR_DIR": str(work / "var"),
                           "DJANGO_SETTINGS_MODULE": "project.settings", "LOG_FORMAT": "plain"})
        subprocess.run([str(BIN / "python"), "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
        import django

        django.setup()
        self.hosts: dict[str, HostWorker] = {}
        self.users = 0

    def host(self, name: str, cpu: str, env: dict[str, str] | None = None) -> HostWorker:
        """Start host `name` pinned to core `cpu` (its worker with `env` on top), unless it is up."""
        if name not in self.hosts:
            host = self.cluster.network.add_host(name)
            worker = HostWorker(host, "cpu", concurrency=1, log_dir=self.work, cpus=cpu,
                                database_url=os.environ["DATABASE_URL"], scratch_dir=self.work / "scratch" / name,
                                env=env)
            worker.wait_ready()
            self.hosts[name] = worker
        return self.hosts[name]

    def drop_host(self, name: str) -> None:
        worker = self.hosts.pop(name, None)
        if worker is not None:
            worker.stop()
            self.cluster.network.remove_host(name)

    def user(self, kind: str):
        from django.contrib.auth import get_user_model

        self.users += 1
        return get_user_model().objects.create_user(f"{kind}-{self.users}")

    def upload(self, owner, paths: list[Path]) -> list[str]:
        return [str(u.accepted_job.id) for u in upload_batch(owner, paths)]

    def wait(self, job_ids: list[str], timeout: float = 1800) -> list:
        from uploads.models import Job

        deadline = time.monotonic() + timeout
        while Job.objects.filter(id__in=job_ids).exclude(status__in=Job.TERMINAL).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("benchmark jobs did not finish")
            time.sleep(0.5)  # rarely: this process must not take CPU from the encodes it measures
        jobs = list(Job.objects.filter(id__in=job_ids))
        failed = [(str(j.id), j.error) for j in jobs if j.status != Job.Status.SUCCEEDED]
        if failed:
            raise RuntimeError(f"benchmark jobs failed: {failed[:3]}")
        return jobs

    def close(self) -> None:
        self.cluster.close()


def throughput(b: Bench, video: Path) -> dict:
    jobs = b.wait(b.upload(b.user("batch"), [video] * JOBS))
    makespan = (max(j.finished_at for j in jobs) - min(j.created_at for j in jobs)).total_seconds()
    return {"jobs": JOBS, "makespan_s": round(makespan, 2), "jobs_per_min": round(60 * JOBS / makespan, 2),
            "median_process_s": round(statistics.median(j.process_ms for j in jobs) / 1000, 2)}


def fairness(b: Bench, video: Path, image: Path) -> dict:
    heavy = b.upload(b.user("heavy"), [video] * FLOOD)
    time.sleep(LIGHT_GAP_S * 2)  # the flood is under way
    light = []
    for _ in range(LIGHT_USERS):
        light += b.upload(b.user("light"), [image])
        time.sleep(LIGHT_GAP_S)
    heavy_jobs, light_jobs = b.wait(heavy), b.wait(light)
    waits = [j.wait_ms / 1000 for j in light_jobs]
    job_s = statistics.median(j.process_ms for j in heavy_jobs) / 1000
    return {"light_waits_s": [round(w, 3) for w in waits], "light_p50_s": round(pct(waits, 50), 3),
            "light_p99_s": round(pct(waits, 99), 3), "heavy_job_s": round(job_s, 2),
            "p99_in_job_times": round(pct(waits, 99) / job_s, 2)}


def storage_overhead() -> dict:
    """bench/storage.py in its own process (it sets up its own services)."""
    subprocess.run([str(BIN / "python"), "-m", "bench.storage"], cwd=ROOT, check=True,
                   env={k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")
                        and not k.startswith("FAIRLANE_")})
    result = json.loads((RESULTS / "storage.json").read_text())
    return {"clip": result["clip"], "overhead_s": result["storage_overhead_s"],
            "overhead_pct_of_job": result["storage_overhead_pct_of_job"], "median_s": result["median_s"]}


def print_targets(targets: dict) -> None:
    for name, t in targets.items():
        print(f"  {name}: {t['value']} (target {t['target']}): {'met' if t['met'] else 'MISSED'}")


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for x, hosts in enumerate(("1", "2")):
        rates = [r["jobs_per_min"] for r in result["throughput"][hosts]]
        a.bar(x, statistics.median(rates), color="#3b82f6" if hosts == "1" else "#10b981")
        a.plot([x] * len(rates), rates, "k.")
    a.set_xticks([0, 1], ["1", "2"])
    a.set_title(f"throughput, {JOBS} {SOURCE_SIZE} {SECONDS} s videos: x{result['throughput_ratio']:.2f}")
    a.set_xlabel("worker hosts (one core each)")
    a.set_ylabel("jobs per minute")
    for hosts, colour in (("1", "#3b82f6"), ("2", "#10b981")):
        f = result["fairness"][hosts]
        b.plot(sorted(f["light_waits_s"]), marker="o", color=colour, label=f"{hosts} host(s), p99 {f['light_p99_s']} s")
        b.axhline(f["heavy_job_s"], color=colour, linestyle=":", label=f"one heavy job ({f['heavy_job_s']} s)")
    b.set_title("light users' waits behind a flood")
    b.set_ylabel("seconds")
    b.set_xlabel("light jobs, sorted")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cannot_simulate_hosts(name: str) -> str | None:
    """Why this machine cannot run a simulated-hosts benchmark, if it cannot."""
    if os.geteuid() != 0:
        return f"{name} simulates hosts with network namespaces: run it as root"
    if (os.cpu_count() or 1) < 2:
        return f"{name} pins one host per core: it needs two cores"
    return None


def main() -> int:
    if (why := cannot_simulate_hosts("bench-scale")) is not None:
        print(why, file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    b = Bench(work)
    result: dict = {"cores": os.cpu_count(), "clip": f"{SOURCE_SIZE} {SECONDS} s h264 + aac",
                    "throughput": {"1": [], "2": []}, "fairness": {}}
    try:
        from PIL import Image

        from tests.media import make_video

        video = make_video(work / "clip.mp4", seconds=SECONDS, size=SOURCE_SIZE)
        image = work / "photo.png"
        Image.new("RGB", (640, 480), (30, 140, 90)).save(image)
        b.host("cpu-1", "0")
        b.wait(b.upload(b.user("warmup"), [video]))  # imports, connections, the decode sandbox
        for _ in range(ROUNDS):
            b.drop_host("cpu-2")
            result["throughput"]["1"].append(throughput(b, video))
            b.host("cpu-2", "1")
            result["throughput"]["2"].append(throughput(b, video))
        result["fairness"]["2"] = fairness(b, video, image)
        b.drop_host("cpu-2")
        result["fairness"]["1"] = fairness(b, video, image)
    finally:
        b.close()
    result["load_after"] = os.getloadavg()[0]
    one = statistics.median(r["jobs_per_min"] for r in result["throughput"]["1"])
    two = statistics.median(r["jobs_per_min"] for r in result["throughput"]["2"])
    result["throughput_ratio"] = round(two / one, 3)
    result["storage"] = storage_overhead()
    f2 = result["fairness"]["2"]
    result["targets"] = {
        "throughput_ratio": {"target": f">= {TARGET_RATIO}", "value": result["throughput_ratio"],
                             "met": result["throughput_ratio"] >= TARGET_RATIO},
        "light_p99_two_hosts": {"target": f"<= {TARGET_WAIT_FACTOR} job times", "value": f2["p99_in_job_times"],
                                "met": f2["p99_in_job_times"] <= TARGET_WAIT_FACTOR},
        "storage_overhead_pct": {"target": f"< {TARGET_STORAGE_PCT}", "value": result["storage"]["overhead_pct_of_job"],
                                 "met": result["storage"]["overhead_pct_of_job"] < TARGET_STORAGE_PCT},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / "scale.png")
    print(f"{result['clip']}; {JOBS} jobs a round, {ROUNDS} rounds each, interleaved")
    print(f"throughput: 1 host {one:.2f} jobs/min, 2 hosts {two:.2f} jobs/min: x{result['throughput_ratio']:.2f}")
    for hosts in ("1", "2"):
        f = result["fairness"][hosts]
        print(f"light users behind a flood, {hosts} host(s): p50 {f['light_p50_s']} s, p99 {f['light_p99_s']} s; "
              f"one heavy job {f['heavy_job_s']} s (p99 = {f['p99_in_job_times']} job times)")
    print(f"object storage per job: {result['storage']['overhead_s']:+.2f} s "
          f"({result['storage']['overhead_pct_of_job']:+.1f} % of the job)")
    print_targets(result["targets"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
