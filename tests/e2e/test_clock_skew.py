"""One clock: workers whose clocks are two minutes ahead of and behind the
rest process a batch together, and nothing is reaped, dropped or run twice.

Every comparison of instants that several hosts make is Redis's (the
dispatcher's leases, registrations, due times, buckets: TIME inside its
scripts) or the database's (attempt leases, start and end times). Before,
each caller passed its own clock: the worker ahead reaped the others'
running jobs, swept their attempt leases as expired and dropped their slots
from the window, and the one behind fell out of the window at once.
"""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db.models import Q

import dispatcher
from bench.harness import Worker
from project.dbclock import db_now
from project.lanes import Lane
from tests.media import make_video
from tests.promise import wait_for
from tests.workers import lane_paused
from tests.workers import test_database_url as workers_database_url
from uploads.models import Job, JobAttempt

pytestmark = [
    pytest.mark.e2e, pytest.mark.django_db(transaction=True),
    # SQLite runs inside each process, so its clock is that process's: hosts
    # with clocks of their own share a database server (PostgreSQL), which
    # is where this runs (`make test`'s full run); SQLite is the one-machine
    # default, where every process has the same clock.
    pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
                       reason="clock skew between hosts needs a database server's clock"),
]

SKEW_S = 120
# Short leases and sweeps, as in the fault-injection suite: two minutes of
# skew is many leases, so a caller's clock anywhere in a comparison shows.
SHORT_LEASES = {"FAIRLANE_JOB_LEASE_S": "4", "FAIR_RUN_LEASE_S": "8", "FAIR_RECONCILE_S": "1",
                "FAIR_RECONCILE_MIN_AGE_S": "1"}


def skewed_worker(name: str, offset_s: int, log_dir) -> Worker:
    env = {"DATABASE_URL": workers_database_url(), "PYTHONUNBUFFERED": "1", "LOG_FORMAT": "json", **SHORT_LEASES}
    # Only the worker's wall clock is off (bench/skewed_clock.py), as on a
    # host whose clock drifted.
    return Worker(Lane.CPU_TRANSCODE.value, pool="prefork", concurrency=1, name=name, log_dir=log_dir,
                  suffix="skew", loglevel="INFO", env=env, extra_args=(), clock_offset_s=offset_s)


def test_workers_two_minutes_apart_neither_reap_nor_drop_nor_repeat_each_other(
        workers, make_user, api_client_for, tmp_path):
    ahead = skewed_worker("cpu-ahead", +SKEW_S, tmp_path)
    behind = skewed_worker("cpu-behind", -SKEW_S, tmp_path)
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    try:
        # Only the skewed workers take cpu jobs (the session's keep out).
        with lane_paused(Lane.CPU_TRANSCODE.value):
            ahead.wait_ready()
            behind.wait_ready()
            live = wait_for(lambda: {ahead.name, behind.name} <= set(sched.live_workers()) and sched.live_workers(),
                            30, "both skewed workers registered")
            assert {name for name in live if name.startswith("cpu@")}, "a skewed worker dropped the others' slots"
            t0 = db_now()
            video = make_video(tmp_path / "clip.mp4", seconds=3, size="320x240")
            handles = [open(video, "rb") for _ in range(6)]
            try:
                resp = api_client_for(make_user("alice")).post("/api/uploads/", {"file": handles},
                                                                format="multipart")
            finally:
                for h in handles:
                    h.close()
            assert resp.status_code == 202
            ids = [u["job"]["id"] for u in resp.json()["uploads"]]
            # While they run, every registration stays live by Redis's clock.
            wait_for(lambda: Job.objects.filter(id__in=ids, status="running").count() == 2, 60,
                     "both skewed workers running a job")
            assert {ahead.name, behind.name} <= set(sched.live_workers())
            wait_for(lambda: Job.objects.filter(id__in=ids, status__in=Job.TERMINAL).count() == len(ids), 180,
                     "every job to finish")
            t1 = db_now()
    finally:
        ahead.stop()
        behind.stop()

    jobs = list(Job.objects.filter(id__in=ids))
    assert {j.status for j in jobs} == {"succeeded"}, (
        [(j.status, j.error) for j in jobs], _log_lines([j.id for j in jobs if j.status != "succeeded"], ahead, behind))
    # Nothing reaped and run again, nothing swept as lost: one attempt each.
    assert [j.attempts for j in jobs] == [1] * len(jobs)
    assert not JobAttempt.objects.filter(job_id__in=ids).filter(~Q(outcome="succeeded")).exists()
    # Both skewed hosts did work, and the times they recorded are the
    # database's: inside the window the test saw, whatever their own clocks said.
    pids = {str(pid) for worker in (ahead, behind) for pid in [worker.proc.pid, *worker.children()]}
    attempts = list(JobAttempt.objects.filter(job_id__in=ids))
    assert len({a.worker for a in attempts}) >= 2
    slack = timedelta(seconds=1)
    for job in jobs:
        assert t0 - slack <= job.started_at <= job.finished_at <= t1 + slack
        assert job.wait_ms < SKEW_S * 1000
    assert pids  # the workers were ours
    # And their clocks really were off: what they logged about the jobs
    # carries their own times, two minutes either side of the database's.
    for worker, offset_s in ((ahead, SKEW_S), (behind, -SKEW_S)):
        logged = _logged_times([str(job_id) for job_id in ids], worker)
        assert logged, worker.log_tail()
        assert all(t0 + timedelta(seconds=offset_s) - slack * 5 <= t <= t1 + timedelta(seconds=offset_s) + slack * 5
                   for t in logged), (offset_s, t0, t1, logged)


def _logged_times(job_ids: list[str], worker: Worker) -> list[datetime]:
    """When (by the worker's clock) it logged each JSON line about these jobs."""
    times = []
    for line in worker.log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("job_id") in job_ids:
            times.append(datetime.strptime(record["time"], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC))
    return times


def _log_lines(job_ids, *workers: Worker) -> str:
    """What the workers logged about the jobs named, for a failure's message."""
    wanted = [str(job_id) for job_id in job_ids]
    return "\n".join(f"{worker.name}: {line}" for worker in workers
                     for line in worker.log.read_text(errors="replace").splitlines()
                     if any(job_id in line for job_id in wanted))[-20000:]
