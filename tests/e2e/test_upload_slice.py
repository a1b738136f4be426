"""The vertical slice with everything real: API -> Redis -> Celery workers of
both lanes -> ffmpeg -> database -> email."""
from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from notify.models import Delivery
from tests.media import decodes_cleanly, make_video, probe_output
from tests.promise import wait_for
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def wait_terminal(client, job_url: str, timeout: float = 90.0) -> dict:
    def ended() -> dict | None:
        body = client.get(job_url).json()
        return body if body["status"] in ("succeeded", "failed", "canceled") else None

    return wait_for(ended, timeout, lambda: f"the job to finish: {client.get(job_url).json()}", every=0.2)


def download(client, url: str) -> tuple[bytes, str]:
    """An output's bytes and content type as a browser gets them: from the
    web (filesystem storage) or from the store, through the presigned URL
    the web redirects to (object storage)."""
    resp = client.get(url)
    if resp.status_code == 302:
        with urllib.request.urlopen(resp["Location"], timeout=30) as stored:
            return stored.read(), stored.headers["Content-Type"]
    assert resp.status_code == 200
    body = b"".join(resp.streaming_content) if resp.streaming else resp.content  # playlists: rewritten
    return body, resp["Content-Type"]


def post_files(client, paths: list[Path]):
    handles = [open(p, "rb") for p in paths]
    try:
        return client.post("/api/uploads/", {"file": handles}, format="multipart")
    finally:
        for h in handles:
            h.close()


def test_posted_video_succeeds_with_playable_mp4_and_an_email(workers, make_user, api_client_for, tmp_path):
    alice = make_user("alice")
    client = api_client_for(alice)
    resp = post_files(client, [make_video(tmp_path / "clip.mov", seconds=1.5)])
    assert resp.status_code == 202
    [upload] = resp.json()["uploads"]
    assert upload["filename"] == "clip.mov" and upload["job"]["status"] == "queued"

    job = wait_terminal(client, upload["job"]["url"])
    assert job["status"] == "succeeded", job["error"]
    assert job["kind"] == "video" and job["lane"] == "cpu-transcode" and job["progress"] == 100
    assert job["attempts"] == 1 and job["error"] is None
    assert job["wait_ms"] is not None and job["process_ms"] is not None and job["process_ms"] > 0
    mp4 = next(o for o in job["outputs"] if o["name"] == "mp4")
    assert mp4["content_type"] == "video/mp4"

    out = tmp_path / "out.mp4"
    out.write_bytes(download(client, mp4["url"])[0])
    described = probe_output(out)
    assert "Video: h264" in described and "yuv420p" in described and "Audio: aac" in described
    assert decodes_cleanly(out)

    wait_for(Delivery.objects.filter(event__batch=upload["batch"], channel="email", status="succeeded").exists, 30,
             "the notification to be sent", every=0.2)
    mails = [p.read_text() for p in Path(settings.EMAIL_FILE_PATH).glob("*.log")]
    # The batch's summary: counts and one link to the batch's page (it lists
    # failed files only, so that it reads well at 2,000 files).
    assert any("alice@example.com" in m and "1 succeeded" in m and f"/batches/{upload['batch']}/" in m
               for m in mails), mails


def test_corrupt_file_fails_clearly_and_affects_nothing_else(workers, make_user, api_client_for, tmp_path):
    alice, bob = make_user("alice"), make_user("bob")
    good = make_video(tmp_path / "good.mp4", seconds=1)
    corrupt = tmp_path / "broken.mp4"
    corrupt.write_bytes(good.read_bytes()[: 600] + b"\x00garbage" * 200)  # header cut, body junk

    alice_client, bob_client = api_client_for(alice), api_client_for(bob)
    alice_uploads = post_files(alice_client, [corrupt, good]).json()["uploads"]
    bob_uploads = post_files(bob_client, [good]).json()["uploads"]

    broken_job = wait_terminal(alice_client, alice_uploads[0]["job"]["url"])
    assert broken_job["status"] == "failed"
    assert broken_job["error"]["code"] in {"not_media", "decode_failed"}
    assert broken_job["error"]["message"]
    assert broken_job["outputs"] == []
    assert wait_terminal(alice_client, alice_uploads[1]["job"]["url"])["status"] == "succeeded"
    assert wait_terminal(bob_client, bob_uploads[0]["job"]["url"])["status"] == "succeeded"
    assert Job.objects.get(id=broken_job["id"]).attempts == 1


def test_healthz_sees_database_redis_and_both_lanes(workers, client, admin_client):
    # The workers register with the dispatcher when they are ready.
    wait_for(lambda: client.get("/healthz").status_code == 200, 15,
             lambda: f"/healthz to answer 200: {client.get('/healthz').json()}", every=0.5)
    body = client.get("/healthz").json()
    assert body["database"]["ok"] and body["redis"]["ok"] and body["workers"]["lanes"] == {
        "cpu-transcode": True, "io-notify": True}
    lanes = admin_client.get("/healthz").json()["workers"]["lanes"]  # staff see who
    assert workers.procs["cpu"].name in lanes["cpu-transcode"]["workers"]
    assert workers.procs["io"].name in lanes["io-notify"]["workers"]
