"""Flower, started as the Procfile starts it (bin/flower), behind basic auth,
shows both lanes' workers, the released tasks with readable arguments, and
the jobs the dispatcher holds."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from django_celery_results.models import TaskResult

from tests.flower import AUTH, get
from tests.media import make_video
from tests.promise import wait_for
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_flower_needs_its_password_and_shows_both_lanes_and_readable_tasks(flower, make_user, api_client_for,
                                                                          tmp_path):
    assert get(f"{flower}/api/workers")[0] == 401
    assert get(f"{flower}/api/workers", auth=("ops", "wrong"))[0] == 401

    def worker_names() -> set[str]:
        status, workers = get(f"{flower}/api/workers?refresh=1", auth=AUTH)
        assert status == 200
        return set(workers)

    def both_lanes_listed() -> bool:
        names = worker_names()
        return any(n.startswith("cpu@") for n in names) and any(n.startswith("io@") for n in names)

    wait_for(both_lanes_listed, 30, lambda: f"both lanes' workers (Flower sees only {worker_names()})", every=1)

    user = make_user("watched")
    job_id = upload(api_client_for(user), make_video(tmp_path / "v.mp4", seconds=1))
    ours = flower_tasks_of(flower, job_id)
    run = next(t for t in ours if t["name"] == "transcoding.job_run")
    # The message's own id names the job (each run of a job gets a new one), args are readable.
    assert run["uuid"].startswith(f"{job_id}@") and run["args"] == f"['{job_id}']"
    assert run["state"] == "SUCCESS"
    # Announced when the dispatcher took it (task-sent), under the id it then
    # ran as: one entry from held to done, no PENDING left behind.
    assert run["sent"] is not None and [t["name"] for t in ours].count("transcoding.job_run") == 1
    job = Job.objects.get(id=job_id)
    assert job.status == "succeeded" and job.task_id == run["uuid"]  # the admin links the same message


def test_flower_shows_a_failed_job_as_failed_and_the_job_is_not_run_again(flower, make_user, api_client_for,
                                                                         tmp_path):
    good = make_video(tmp_path / "good.mp4", seconds=1)
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(good.read_bytes()[:600] + b"\x00garbage" * 200)  # header cut, body junk
    job_id = upload(api_client_for(make_user("failing")), corrupt)
    run = next(t for t in flower_tasks_of(flower, job_id) if t["name"] == "transcoding.job_run")
    job = Job.objects.get(id=job_id)
    assert job.status == "failed" and job.error_code in {"not_media", "decode_failed"}
    # The task's state says what happened to the job, with the job's error code.
    assert run["state"] == "FAILURE" and job.error_code in run["exception"], run
    # The raised exception is the task's report, not a crash: the job ran once
    # and was not retried or handed back.
    assert job.attempts == 1 and list(job.attempt_log.values_list("outcome", flat=True)) == ["failed"]
    result = TaskResult.objects.get(task_id=run["uuid"])
    assert result.status == "FAILURE" and result.task_name == "transcoding.job_run"


def test_flower_lists_a_held_job_as_pending_with_its_owner_until_it_is_canceled(flower, make_user, api_client_for,
                                                                                 tmp_path):
    client = api_client_for(make_user("patient"))
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    with open(make_video(tmp_path / "later.mp4", seconds=1), "rb") as fh:
        resp = client.post("/api/uploads/", {"file": fh, "scheduled_for": later}, format="multipart")
    assert resp.status_code == 202, resp.content
    job_id = resp.json()["uploads"][0]["job"]["id"]

    def entry(**expected):
        tasks = get(f"{flower}/api/tasks", auth=AUTH)[1] or {}
        return next((t for t in tasks.values() if t["uuid"].startswith(f"{job_id}@")
                     and all(v in str(t.get(k)) for k, v in expected.items())), None)

    # With the organisation it was submitted in: alone, the organisation of one named after them.
    held = wait_for(lambda: entry(kwargs="'owner': 'patient', 'organisation': 'patient'"), 30, "the held job in Flower")
    assert held["state"] == "PENDING" and held["name"] == "transcoding.job_run" and held["args"] == f"['{job_id}']"
    assert Job.objects.get(id=job_id).status == "queued"  # held by the dispatcher until its time

    assert client.post(f"/api/jobs/{job_id}/cancel/").status_code == 200
    canceled = wait_for(lambda: entry(kwargs="'canceled': True"), 30, "the canceled job in Flower")
    assert canceled["uuid"] == held["uuid"]


def upload(client, path: Path) -> str:
    with open(path, "rb") as fh:
        return client.post("/api/uploads/", {"file": fh}, format="multipart").json()["uploads"][0]["job"]["id"]


def flower_tasks_of(flower: str, job_id: str) -> list[dict]:
    """Flower's tasks for the job once its run and its notification are both
    done (in a final state)."""
    def ours() -> list[dict]:
        status, tasks = get(f"{flower}/api/tasks", auth=AUTH)
        assert status == 200
        return [t for t in tasks.values() if job_id in str(t.get("args"))]

    def both_done() -> list[dict] | None:
        tasks = ours()
        done = {t["name"] for t in tasks if t.get("state") in ("SUCCESS", "FAILURE")}
        return tasks if {"transcoding.job_run", "notify.job_finished"} <= done else None

    return wait_for(both_done, 60, every=1, what=lambda: "the job's run and notification to end; Flower shows "
                    f"{[(t['name'], t.get('state')) for t in ours()]}")
