"""What operators read: /metrics with real values after real jobs."""
from __future__ import annotations

import re
import time

import pytest

from notify.models import Delivery
from tests.media import make_video
from tests.promise import wait_for
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def sample(text: str, name: str, **labels) -> float:
    """The value of one series in Prometheus text format."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in metrics")


def test_metrics_expose_waits_outcomes_backlog_and_worker_heartbeats(workers, make_user, api_client_for,
                                                                    client, settings, tmp_path):
    settings.METRICS_TOKEN = "s3cret"
    user = make_user("metered")
    with open(make_video(tmp_path / "v.mp4", seconds=1), "rb") as fh:
        job_id = api_client_for(user).post("/api/uploads/", {"file": fh}, format="multipart").json()[
            "uploads"][0]["job"]["id"]
    batch = Job.objects.get(id=job_id).upload.batch
    wait_for(Delivery.objects.filter(event__batch=batch, channel="email", status="succeeded").exists, 60,
             "the batch's email", every=0.2)
    assert Job.objects.get(id=job_id).status == "succeeded"

    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    resp = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert resp.status_code == 200
    text = resp.content.decode()
    video = {"lane": "cpu-transcode", "kind": "video"}
    assert sample(text, "fairlane_job_wait_seconds_count", **video) >= 1
    assert sample(text, "fairlane_job_processing_seconds_sum", **video) > 0
    assert sample(text, "fairlane_job_processing_seconds_bucket", le="+Inf", **video) >= 1
    assert sample(text, "fairlane_jobs_total", outcome="succeeded", **video) >= 1
    assert sample(text, "fairlane_job_processing_seconds_count", lane="io-notify", kind="email") >= 1
    for lane in ("cpu-transcode", "io-notify"):
        assert sample(text, "fairlane_backlog_jobs", lane=lane) >= 0
        assert sample(text, "fairlane_in_flight_jobs", lane=lane) >= 0
        assert sample(text, "fairlane_active_users", lane=lane) >= 0
        assert sample(text, "fairlane_window_jobs", lane=lane) >= 2
    # Workers renew their registration every few seconds; another test may just have
    # emptied Redis, so give them one round.
    pattern = r'fairlane_worker_heartbeat_age_seconds\{lane="cpu-transcode",worker="([^"]+)"\} (\S+)'
    ages = re.findall(pattern, text) or wait_for(
        lambda: re.findall(pattern, client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").content.decode()),
        15, "a worker heartbeat series", every=1)
    assert all(0 <= float(age) < 30 for _, age in ages)


def test_metrics_endpoint_does_not_exist_without_a_token(client, settings, db):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404


def test_worker_log_lines_about_a_job_carry_its_ids(workers, make_user, api_client_for, tmp_path):
    import json

    user = make_user("logged")
    with open(make_video(tmp_path / "v.mp4", seconds=1), "rb") as fh:
        job_id = api_client_for(user).post("/api/uploads/", {"file": fh}, format="multipart").json()[
            "uploads"][0]["job"]["id"]
    wait_for(lambda: Job.objects.get(id=job_id).status in Job.TERMINAL, 60, "the job to end", every=0.2)
    time.sleep(0.5)  # let the worker flush its log
    lines = [json.loads(line) for line in workers.log_tail("cpu", 400).splitlines() if line.startswith("{")]
    about_job = [line for line in lines if line.get("job_id") == job_id]
    assert len(about_job) >= 2, "expected the start and the end of the job in the log"
    for line in about_job:
        assert line["user_id"] == user.id and line["task_id"] == Job.objects.get(id=job_id).task_id
        assert line["task_id"].startswith(f"{job_id}@")
        assert line["lane"] == "cpu-transcode" and line["attempt"] == 1


def test_canceling_a_running_job_stops_ffmpeg_and_leaves_nothing_behind(workers, make_user, api_client_for,
                                                                        tmp_path, settings):
    import subprocess
    from pathlib import Path

    import media
    from uploads import services

    user = make_user("impatient")
    video = make_video(tmp_path / "long.mp4", seconds=20, size="640x360")
    with open(video, "rb") as fh:
        job_id = api_client_for(user).post("/api/uploads/", {"file": fh}, format="multipart").json()[
            "uploads"][0]["job"]["id"]
    wait_for(Job.objects.filter(id=job_id, status="running", progress__gt=0).exists, 60,
             "the job to make progress")
    assert services.jobs_cancel(job_ids=[job_id], actor=user)
    scratch = Path(settings.FAIRLANE_SCRATCH_DIR)

    def ffmpeg_running() -> bool:
        return subprocess.run(["pgrep", "-f", f"{scratch}/{job_id}-a"], capture_output=True).returncode == 0

    # Progress is reported about once a second, and that is where the worker
    # notices; the bound is generous for a loaded machine, and what shows the
    # encode was cut short is that it never finished (below).
    # The segments streamed while it ran (transcoding/live.py) are deleted
    # after the work directory, when the attempt ends (uploads/attempts.py,
    # _outputs_tidy): all three must go.
    wait_for(lambda: not ffmpeg_running() and not any(scratch.glob(f"{job_id}-a*"))
             and media.list_prefix(media.job_prefix(job_id=job_id)) == {}, 20,
             "ffmpeg, its scratch folder and its stored segments to go after the cancel", every=0.2)
    job = Job.objects.get(id=job_id)
    assert job.status == "canceled" and job.error_code == "canceled" and job.progress < 100
    assert not job.outputs.exists()
