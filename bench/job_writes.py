"""Job writes benchmark: `python -m bench.job_writes` (`make bench-job-writes`).
Writes bench/results/job_writes.json and .png and prints a table.

What a job's steps cost the database that every user's requests share,
with the job table's indexes before 5943707 (the baseline: migrated to
uploads 0019, 17 indexes) and now (14). A job's steps write its row the
way uploads/ does: created, started (status, attempt, lease), its progress,
finished (status, times, notify_pending), notified. A change of status is
never a heap-only update, so each such write touches every index.

A private PostgreSQL (as the isolation benchmark's, fsync off) holds two
databases, one at each version, each with BACKLOG other jobs in the table
first (indexes of a realistic depth). ROUNDS rounds of JOBS jobs run in
each in turn (the machine's drift falls on both); per round, the WAL the
cluster wrote (pg_current_wal_lsn, nothing else writes meanwhile) and the
CPU time of the backend that served it (/proc), per job. Medians of the
rounds, and the ratio now / before.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg

from bench.private_services import PrivatePostgres

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ROUNDS = int(os.environ.get("BENCH_JOB_WRITES_ROUNDS", "7"))
JOBS = int(os.environ.get("BENCH_JOB_WRITES_JOBS", "1000"))
BACKLOG = int(os.environ.get("BENCH_JOB_WRITES_BACKLOG", "20000"))
VERSIONS = {"before (17 indexes, uploads 0019)": "0019", "now": None}


def _steps(jobs: int) -> dict:
    """In a process of its own (DATABASE_URL set): `jobs` jobs through their
    steps; the WAL bytes and the backend's CPU seconds they took."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from uploads.models import Job, Upload

    owner, _ = get_user_model().objects.get_or_create(username="bench-job-writes")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]

    def backend_cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def lsn() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
            return int(cursor.fetchone()[0])

    batch = uuid.uuid4()
    uploads = Upload.objects.bulk_create(Upload(owner=owner, batch=batch, filename=f"f{i}.png", file="x", size=1)
                                         for i in range(jobs))
    wal0, cpu0 = lsn(), backend_cpu_s()
    for upload in uploads:
        job = Job.objects.create(upload=upload, owner=owner, batch=upload.batch, lane="cpu-transcode",
                                 kind=Job.Kind.IMAGE)
        mine = Job.objects.filter(id=job.id)
        now = timezone.now()
        mine.update(status=Job.Status.RUNNING, started_at=now, attempts=1, progress=0,
                    lease_expires_at=now + timedelta(minutes=5))
        mine.update(progress=50)
        mine.update(status=Job.Status.SUCCEEDED, finished_at=timezone.now(), process_ms=100,
                    lease_expires_at=None, notify_pending=True)
        mine.update(notify_pending=False)
    return {"wal_bytes": lsn() - wal0, "cpu_s": backend_cpu_s() - cpu0}


def _in(url: str, *argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "project.settings"})
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return done.stdout


def _prepare(url: str, target: str | None) -> None:
    _in(url, "manage.py", "migrate", "-v0")
    if target:  # every other app as now; the job table's migrations back to `target`
        _in(url, "manage.py", "migrate", "-v0", "uploads", target)
    _in(url, "-c", "import django; django.setup()\n"
                   "import uuid\n"
                   "from django.contrib.auth import get_user_model\n"
                   "from tests.backlogs import files_with_jobs\n"
                   "others = get_user_model().objects.create_user('others')\n"
                   f"files_with_jobs(others, {BACKLOG}, batch=uuid.uuid4(),"
                   " statuses=('queued', 'succeeded', 'failed', 'running'))")


def measure() -> dict:
    pg = PrivatePostgres()
    try:
        base = pg.url.rsplit("/", 1)[0]
        urls = {}
        for n, (name, target) in enumerate(VERSIONS.items()):
            urls[name] = f"{base}/jobwrites{n}"
            with psycopg.connect(pg.url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE jobwrites{n}")
            _prepare(urls[name], target)
        rounds: dict[str, list[dict]] = {name: [] for name in VERSIONS}
        for _ in range(ROUNDS):
            for name, url in urls.items():
                out = _in(url, "-c", f"import json; from bench.job_writes import _steps; "
                                     f"print(json.dumps(_steps({JOBS})))")
                rounds[name].append(json.loads(out.strip().splitlines()[-1]))
        with_indexes = {}
        for name, url in urls.items():
            with psycopg.connect(url) as conn:
                with_indexes[name] = conn.execute(
                    "SELECT count(*) FROM pg_indexes WHERE tablename = 'uploads_job'").fetchone()[0]
    finally:
        pg.stop()
    versions = {}
    for name, rows in rounds.items():
        versions[name] = {
            "indexes": with_indexes[name],
            "wal_bytes_per_job": round(statistics.median(r["wal_bytes"] for r in rows) / JOBS),
            "backend_cpu_ms_per_job": round(statistics.median(r["cpu_s"] for r in rows) * 1000 / JOBS, 3),
            "rounds": rows}
    before, now = (versions[name] for name in VERSIONS)
    return {"jobs_per_round": JOBS, "rounds": ROUNDS, "backlog": BACKLOG, "versions": versions,
            "ratio_now_to_before": {
                "wal_bytes": round(now["wal_bytes_per_job"] / before["wal_bytes_per_job"], 3),
                "backend_cpu": round(now["backend_cpu_ms_per_job"] / before["backend_cpu_ms_per_job"], 3)}}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["versions"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label, scale in ((axes[0], "wal_bytes_per_job", "WAL per job (KiB)", 1024),
                                     (axes[1], "backend_cpu_ms_per_job", "database CPU per job (ms)", 1)):
        values = [result["versions"][n][metric] / scale for n in names]
        ax.bar([f"{n.split(' (')[0]}\n{result['versions'][n]['indexes']} indexes" for n in names], values,
               color=["#999999", "#4c78a8"])
        for x, v in enumerate(values):
            ax.annotate(f"{v:.2f}", (x, v), ha="center", va="bottom")
        ax.set_title(label)
    fig.suptitle(f"a job's steps on the job table, {result['backlog']:,} other jobs in it "
                 f"(medians of {result['rounds']} rounds of {result['jobs_per_round']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **measure()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "job_writes.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / "job_writes.png")
    for name, v in result["versions"].items():
        print(f"{name:<34} {v['indexes']:>3} indexes  {v['wal_bytes_per_job']:>7,} WAL bytes/job  "
              f"{v['backend_cpu_ms_per_job']:>7.3f} ms database CPU/job")
    print("now / before:", result["ratio_now_to_before"])


if __name__ == "__main__":
    main()
