"""Fault injection against real processes: the promise that every job
accepted with a 202 ends in exactly one terminal state, with its outputs
published once, whatever is killed, stalled or restarted meanwhile.

Each scenario submits a batch through the API (a heavy user's videos and a
light user's images), injects its fault while jobs run, and checks the
promise for every job (`promise_kept`), then adds a row to the summary table
printed at the end of the run.
"""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

import media as media_store  # `media` is the fixture of test files
from tests.chaos.conftest import CHAOS_ENV, Cluster
from tests.chaos.make_run import upload_request
from tests.media import make_video
from tests.promise import (
    TERMINAL,
    assert_swept_within_one_turn,
    attempt_pid,
    db_retrying,
    lease_held,
    post,
    promise_kept,
    running_job,
    submit_batch,
    wait_all_terminal,
    wait_for,
)
from tests.workers import running_job_held
from transcoding.services import FAULT_POISON_MARKER
from uploads.models import Job, JobAttempt

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

# --- media and batches ------------------------------------------------------------


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """A video long enough to be caught mid-transcode, a small image and a detailed one."""
    folder = tmp_path_factory.mktemp("chaos-media")
    from PIL import Image

    image = folder / "photo.png"
    Image.new("RGB", (320, 240), (200, 80, 40)).save(image)
    # A photograph's worth of detail: each size and the largest's JPEG are
    # worth their bytes, so one upload stores several files (an export's chunks).
    photo = folder / "detailed.jpg"
    Image.merge("RGB", [Image.effect_noise((1000, 750), 40).point(lambda v, c=c: v // 2 + c)
                        for c in (60, 90, 120)]).save(photo, quality=92)
    poison = folder / "poison.mp4"
    poison.write_bytes(FAULT_POISON_MARKER + b"\0" * 1024)
    return {"video": make_video(folder / "clip.mp4", seconds=6, size="640x360"), "image": image, "photo": photo,
            "poison": poison}


def post_late_batch(cluster: Cluster, make_user, media) -> list[str]:
    """After a fault: the web process (bin/web) accepts a new upload on its
    own reconnected clients, and its job completes like the others."""
    user = make_user(f"late-{uuid.uuid4().hex[:6]}")
    with urllib.request.urlopen(upload_request(cluster.web_url, user.auth_token.key, [media["image"]]),
                                timeout=30) as resp:
        assert resp.status == 202
        return [u["job"]["id"] for u in json.loads(resp.read())["uploads"]]


# --- waiting and checking ------------------------------------------------------------


def running_on(worker, job_ids: list[str]) -> Job | None:
    """A job in progress in one of `worker`'s children."""
    children = set(worker.children())
    for job in Job.objects.filter(id__in=job_ids, status="running", progress__gte=1):
        if attempt_pid(job) in children:
            return job
    return None


LEASE_S, SWEEP_S = float(CHAOS_ENV["FAIRLANE_JOB_LEASE_S"]), float(CHAOS_ENV["FAIR_RECONCILE_S"])


def handed_back_after(job_id: str, t_wall: float) -> float:
    """Seconds from `t_wall` until the job's first attempt was given up as lost."""
    lost = JobAttempt.objects.get(job_id=job_id, number=1)
    assert lost.outcome == "lost", lost.outcome
    return lost.finished_at.timestamp() - t_wall


def stalled_attempt_leftovers(job_id: str) -> list[str]:
    """What the job's first attempt still has: its scratch folder (this
    host) and its stored outputs (the attempt that wins publishes under its
    own prefix)."""
    scratch = Path(settings.FAIRLANE_SCRATCH_DIR)
    stored = media_store.list_prefix(media_store.outputs_prefix(job_id=job_id, attempt=1))
    return [*(str(p) for p in scratch.glob(f"{job_id}-a1-*")), *stored]


def started_after(job_id: str, t_wall: float) -> float | None:
    """Seconds from `t_wall` (epoch) to the first attempt of the job started after it."""
    attempt = JobAttempt.objects.filter(job_id=job_id, number__gt=1).order_by("number").first()
    return None if attempt is None else attempt.started_at.timestamp() - t_wall


# --- scenarios ------------------------------------------------------------------------


def test_sigkill_of_a_cpu_worker_child_mid_transcode(cluster: Cluster, make_user, api_client_for, media, record):
    cluster.start_cpu("cpu")
    cluster.start_io()
    heavy, light = submit_batch(make_user, api_client_for, media)
    # Held (SIGSTOP) until it is killed: still running then, however fast the machine.
    with running_job_held(lambda: running_job(heavy), 60, "a transcode in progress") as victim:
        t_fault = time.time()
        os.kill(attempt_pid(victim), signal.SIGKILL)

    wait_all_terminal(heavy + light)
    row = promise_kept(heavy + light)
    victim.refresh_from_db()
    assert victim.attempts == 2
    outcomes = list(victim.attempt_log.values_list("outcome", flat=True))
    assert outcomes == ["lost", "succeeded"]
    record(scenario="SIGKILL cpu worker child", **row, recovery_s=round(started_after(str(victim.id), t_fault), 2),
           measured="kill -> job re-started")


def test_a_poison_pill_fails_after_bounded_attempts_and_others_keep_flowing(cluster, make_user, api_client_for,
                                                                          media, record):
    cluster.start_cpu("cpu")
    cluster.start_io()
    t0 = time.time()
    heavy, light = submit_batch(make_user, api_client_for, media, videos=2, extra=(media["poison"],))
    poison = heavy[-1]
    wait_all_terminal(heavy + light)
    row = promise_kept(heavy + light, expect_failed={poison: "resource_limit"})
    job = Job.objects.get(id=poison)
    assert job.attempts == int(CHAOS_ENV["FAIRLANE_MAX_ATTEMPTS"])
    assert list(job.attempt_log.values_list("outcome", flat=True)) == ["lost", "lost", "failed"]
    record(scenario="poison pill (kills its worker)", **row,
           recovery_s=round(job.finished_at.timestamp() - t0, 2), measured="upload -> poison job failed")


def _production_leases() -> dict[str, str]:
    """The lease and sweep settings of project/settings/' defaults."""
    return {"FAIRLANE_JOB_LEASE_S": str(settings.FAIRLANE_JOB_LEASE_S), "FAIR_RECONCILE_S": str(settings.FAIR_RECONCILE_S),
            "FAIR_RUN_LEASE_S": str(settings.FAIR_LANES["cpu-transcode"]["run_lease_s"])}


@pytest.mark.parametrize("leases", ["test", "production"])
def test_sigkill_of_a_whole_worker_reruns_its_jobs_on_another(cluster, make_user, api_client_for, media, record,
                                                              leases):
    """With the suite's short leases, and once with the defaults (lease 15 s,
    sweep every 5 s): the bound a deployment gets."""
    extra = _production_leases() if leases == "production" else {}
    lease_s = float(extra.get("FAIRLANE_JOB_LEASE_S", LEASE_S))
    sweep_s = float(extra.get("FAIR_RECONCILE_S", SWEEP_S))
    doomed = cluster.start_cpu("cpu-a", **extra)
    cluster.start_cpu("cpu-b", **extra)
    cluster.start_io(**extra)
    heavy, light = submit_batch(make_user, api_client_for, media, videos=6)
    with running_job_held(lambda: running_on(doomed, heavy), 60, "a transcode in progress on cpu-a") as victim:
        t_fault = time.time()
        os.killpg(doomed.proc.pid, signal.SIGKILL)  # parent and children: nobody left to tell anyone
    expiry = lease_held(str(victim.id), t_fault, lease_s)

    wait_all_terminal(heavy + light)
    row = promise_kept(heavy + light)
    detected = handed_back_after(str(victim.id), t_fault)
    # then it waits for a free slot on cpu-b like any job at the front
    assert_swept_within_one_turn(str(victim.id), expiry, sweep_s)
    record(scenario=f"SIGKILL whole worker ({lease_s:g} s lease, {sweep_s:g} s sweep)", **row,
           recovery_s=round(detected, 2), measured="kill -> job re-queued (lease expired)")


def test_sigterm_drains_gracefully_and_hands_back_what_it_cannot_finish(cluster, make_user, api_client_for, media,
                                                                       record):
    leaving = cluster.start_cpu("cpu-a")
    cluster.start_io()
    heavy, light = submit_batch(make_user, api_client_for, media, videos=6)
    wait_for(lambda: running_job(heavy), 60, "a transcode in progress")
    pids = {str(pid) for pid in [leaving.proc.pid, *leaving.children()]}
    t_fault = time.time()
    leaving.proc.send_signal(signal.SIGTERM)  # the main process only, as a process manager does
    leaving.proc.wait(3 + 15)  # grace + stop margin (docs/operations.md, "Deploying")
    shutdown_s = time.time() - t_fault
    # nothing was started by the leaving worker after the signal (a small margin for a claim in flight)
    late = [a for a in JobAttempt.objects.filter(job_id__in=heavy + light, started_at__gt=_at(t_fault + 0.5))
            if a.worker.rsplit(":", 1)[1] in pids]
    assert late == []
    assert not JobAttempt.objects.filter(job_id__in=heavy + light, outcome__in=["failed", "lost"]).exists()

    cluster.start_cpu("cpu-b")  # the deploy's new worker
    wait_all_terminal(heavy + light)
    row = promise_kept(heavy + light)
    record(scenario="SIGTERM during a batch (graceful)", **row, recovery_s=round(shutdown_s, 2),
           measured="SIGTERM -> worker exited (grace 3 s)")


def _through_a_service_fault(cluster: Cluster, make_user, api_client_for, media, fault) -> tuple[dict, float]:
    """A batch in progress, `fault()` (Redis or PostgreSQL down and back, or
    emptied), then a late upload to the real web process: every job ends,
    the promise holds. Returns the summary row and the seconds from the
    fault until the next job finished."""
    cluster.start_cpu("cpu")
    cluster.start_io()
    cluster.start_web()
    heavy, light = submit_batch(make_user, api_client_for, media, videos=5)
    wait_for(lambda: running_job(heavy), 60, "a transcode in progress")
    assert Job.objects.filter(id__in=heavy + light, status__in=TERMINAL).count() < len(heavy + light)
    t_fault = time.time()
    fault()
    late = db_retrying(lambda: post_late_batch(cluster, make_user, media))
    next_done = wait_for(lambda: _finished_after(heavy + light, t_fault), 90, "a job to finish after the fault")
    wait_all_terminal(heavy + light + late)
    return promise_kept(heavy + light + late), round(next_done - t_fault, 2)


def test_redis_restart_loses_no_job(cluster, make_user, api_client_for, media, record):
    from tests.services_plugin import EMBEDDED_REDIS, embedded_redis_restart

    if not EMBEDDED_REDIS.get("persist"):
        pytest.fail("run the fault-injection suite with FAIRLANE_TEST_REDIS_PERSIST=1 (bin/test does)")
    row, recovery_s = _through_a_service_fault(cluster, make_user, api_client_for, media,
                                               lambda: embedded_redis_restart(down_for_s=1.0))
    record(scenario="Redis restart (AOF, SIGKILL, 1 s down)", **row, recovery_s=recovery_s,
           measured="restart -> next job finished")


def test_redis_flushall_is_repaired_from_the_database(cluster, make_user, api_client_for, media, redis_client, record):
    # queues, held backlogs, leases, worker registrations: all gone
    row, recovery_s = _through_a_service_fault(cluster, make_user, api_client_for, media, redis_client.flushall)
    record(scenario="Redis FLUSHALL", **row, recovery_s=recovery_s, measured="flush -> next job finished")


def test_postgresql_restart(cluster, make_user, api_client_for, media, record):
    from tests.services_plugin import PRIVATE_POSTGRES

    if "server" not in PRIVATE_POSTGRES:
        pytest.skip("this run's database is not a private PostgreSQL (bin/test starts one for this suite as root)")

    def restart() -> None:
        PRIVATE_POSTGRES["server"].restart()
        connection.close()

    row, recovery_s = _through_a_service_fault(cluster, make_user, api_client_for, media, restart)
    record(scenario="PostgreSQL restart", **row, recovery_s=recovery_s, measured="restart -> next job finished")


def test_web_process_killed_between_commit_and_enqueue(cluster, make_user, media, record):
    cluster.start_cpu("cpu")
    cluster.start_io()
    url = cluster.start_web(FAIRLANE_FAULT_KILL_WEB_AFTER_COMMIT="1")
    user = make_user("alice")
    request = upload_request(url, user.auth_token.key, [media["image"]] * 3)
    t_fault = time.time()
    with pytest.raises((urllib.error.URLError, ConnectionError, http_client_errors())):
        urllib.request.urlopen(request, timeout=30)  # the process dies before it can answer
    jobs = [str(i) for i in wait_for(
        lambda: list(Job.objects.filter(owner=user).values_list("id", flat=True)), 10, "the committed rows")]
    assert len(jobs) == 3
    first_start = wait_for(lambda: JobAttempt.objects.filter(job_id__in=jobs).order_by("started_at").first(),
                           30, "the reconciler to publish the jobs")
    wait_all_terminal(jobs)
    row = promise_kept(jobs)
    record(scenario="web killed between commit and enqueue", **row,
           recovery_s=round(first_start.started_at.timestamp() - t_fault, 2), measured="kill -> first job started")


def test_a_stalled_worker_is_replaced_and_cannot_publish_when_it_wakes(cluster, make_user, api_client_for, media,
                                                                       record):
    stalled = cluster.start_cpu("cpu-a")
    cluster.start_cpu("cpu-b")
    cluster.start_io()
    heavy, light = submit_batch(make_user, api_client_for, media, videos=6)
    victim = wait_for(lambda: running_on(stalled, heavy), 60, "a transcode in progress on cpu-a")
    t_fault = time.time()
    os.killpg(stalled.proc.pid, signal.SIGSTOP)  # parent and children: no lease renewals, no progress
    expiry = lease_held(str(victim.id), t_fault, LEASE_S)
    wait_for(lambda: JobAttempt.objects.filter(job=victim, number=2).exists(), 30, "the job to be taken over")
    detected = handed_back_after(str(victim.id), t_fault)
    assert_swept_within_one_turn(str(victim.id), expiry, SWEEP_S)
    os.killpg(stalled.proc.pid, signal.SIGCONT)  # it wakes up mid-ffmpeg with a job that is no longer its own

    wait_all_terminal(heavy + light)
    # the woken attempt runs into its fence, stops its ffmpeg and cleans up
    wait_for(lambda: not stalled_attempt_leftovers(str(victim.id)), 30,
             "the woken attempt to stop and clean up")
    row = promise_kept(heavy + light)
    record(scenario="worker stalled (SIGSTOP, SIGCONT)", **row, recovery_s=round(detected, 2),
           measured="stop -> job re-queued (lease expired)")


def test_an_export_killed_mid_way_resumes_from_its_last_checkpoint(cluster, make_user, api_client_for, media,
                                                                  record):
    cluster.start_cpu("cpu")
    cluster.start_io()
    user = make_user("exporter")
    client = api_client_for(user)
    jobs = post(client, [media["photo"]] * 3)
    wait_all_terminal(jobs)
    batch = client.get(f"/api/jobs/{jobs[0]}/").json()["batch"]
    files = sum(len(media_store.list_prefix(media_store.job_prefix(job_id=j))) for j in jobs)
    assert files > 8  # more than the two chunks of 4 the first attempt writes before it dies (3 x 4)

    resp = client.post("/api/exports/", {"batch": batch}, format="json")
    assert resp.status_code == 202, resp.content
    export_id = resp.json()["id"]
    t0 = time.time()
    wait_all_terminal([export_id])
    export = Job.objects.get(id=export_id)
    assert export.status == "succeeded", export.error
    assert list(export.attempt_log.values_list("outcome", flat=True)) == ["lost", "succeeded"]
    zip_output = export.outputs.get(name="zip")
    assert zip_output.metadata == {"entries": files, "resumed_from_entry": 8}
    local = cluster.log_dir / "export.zip"
    media_store.fetch(zip_output.file.name, local)
    with zipfile.ZipFile(local) as zf:
        assert zf.testzip() is None and len(zf.namelist()) == files == len(set(zf.namelist()))
    other = make_user("stranger")
    assert api_client_for(other).post("/api/exports/", {"batch": batch}, format="json").status_code == 404
    record(scenario="export killed after 2 of its chunks", jobs=1, completed=1, failed=0, duplicates=0, lost=0,
           recovery_s=round(export.finished_at.timestamp() - t0, 2), measured="export: start -> done (resumed)")


# --- small helpers ----------------------------------------------------------------------


def _finished_after(job_ids: list[str], t_wall: float) -> float | None:
    """When (epoch seconds) the first job that finished after `t_wall` did."""
    job = Job.objects.filter(id__in=job_ids, finished_at__gt=_at(t_wall)).order_by("finished_at").first()
    return None if job is None else job.finished_at.timestamp()


def _at(t_wall: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t_wall, tz=timezone.utc)


def http_client_errors():
    import http.client

    return http.client.HTTPException
