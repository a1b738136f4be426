"""A user's whole life with a batch, through the API only, with real
workers, Redis, ffmpeg and storage: upload (retried with an
Idempotency-Key), watch the batch, cancel it, retry the job, get a real HLS
ladder, delete the upload and find nothing left in storage."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import media
from tests.media import make_video
from tests.promise import wait_for
from uploads.models import Batch, Job, Output, Upload

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def wait_for_status(client, url: str, wanted: str, timeout_s: float = 120.0) -> dict:
    def reached() -> dict | None:
        body = client.get(url).json()
        return body if body["status"] == wanted else None

    return wait_for(reached, timeout_s, lambda: f"{wanted}: {client.get(url).json()}", every=0.2)


def test_upload_watch_cancel_retry_and_delete_through_the_api(workers, make_user, api_client_for, tmp_path):
    alice = make_user("alice")
    client = api_client_for(alice)
    clip = make_video(tmp_path / "clip.mp4", seconds=1)

    def send(**fields):
        with open(clip, "rb") as f:
            resp = client.post("/api/uploads/", {"file": [f], **fields}, format="multipart",
                               HTTP_IDEMPOTENCY_KEY=str(fields))
        assert resp.status_code == 202, resp.content
        return resp.json()

    # Due tomorrow: the dispatcher holds it, so the test decides what happens to it.
    later = {"scheduled_for": (timezone.now() + timedelta(days=1)).isoformat()}
    waiting = send(**later)
    assert send(**later) == waiting and Upload.objects.count() == 1  # the retried request created nothing
    batch = client.get(waiting["batch_url"]).json()
    assert batch["counts"]["queued"] == 1 and batch["finished"] is False
    assert batch["estimate"]["kind"] == "estimate" and batch["estimated_finish_at"]
    canceled = client.post(waiting["batch_url"] + "cancel/").json()
    assert canceled["counts"]["canceled"] == 1 and canceled["finished"] is True

    # A job that ran, then failed (as the test says): the user retries it and
    # it runs again, as a new attempt, through the dispatcher.
    now = send()
    [upload] = now["uploads"]
    job_url = upload["job"]["url"]
    wait_for_status(client, job_url, "succeeded")
    Job.objects.filter(id=upload["job"]["id"]).update(status=Job.Status.FAILED, error_code="x", error_message="y")
    assert client.post(job_url + "retry/").status_code == 202
    job = wait_for_status(client, job_url, "succeeded")
    assert job["attempts"] == 2 and {"hls", "mp4"} <= {o["name"] for o in job["outputs"]}
    assert client.get(now["batch_url"]).json()["progress"] == 100

    job_prefix = media.job_prefix(job_id=job["id"])
    stored = media.list_prefix(job_prefix)
    assert {key.split("/")[2] for key in stored} == {"2"}  # the retry's objects; the first run's went with it
    hls_folder = Output.objects.get(job_id=job["id"], name="hls").file.name.rsplit("/", 1)[0] + "/"
    assert len([key for key in stored if key.startswith(hls_folder)]) > 2  # playlists and segments
    upload_keys = list(Upload.objects.values_list("file", flat=True))
    assert len(upload_keys) == 2 and all(media.exists(key) for key in upload_keys)

    assert client.delete(f"/api/uploads/{upload['id']}/").status_code == 204
    assert client.delete(f"/api/batches/{waiting['batch']}/").status_code == 204
    assert media.list_prefix(job_prefix) == {} and not any(media.exists(key) for key in upload_keys)
    assert not Upload.objects.exists() and not Job.objects.exists() and not Batch.objects.exists()
    assert client.get(job_url).status_code == 404 and client.get(now["batch_url"]).status_code == 404
