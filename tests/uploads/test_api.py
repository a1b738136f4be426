"""The API's contract without workers: validation, ownership, shapes."""
from __future__ import annotations

import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db


def make_job(owner, status=Job.Status.QUEUED) -> Job:
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status=status)


def test_requests_without_credentials_are_refused(client):
    assert client.get("/api/jobs/").status_code in (401, 403)


def test_posting_no_file_is_a_400_with_a_code(make_user, api_client_for):
    resp = api_client_for(make_user("u")).post("/api/uploads/", {}, format="multipart")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "no_files"


def test_a_file_over_the_size_limit_is_refused_and_nothing_is_stored(make_user, api_client_for, settings):
    settings.FAIRLANE_MAX_UPLOAD_BYTES = 10
    files = [SimpleUploadedFile("small.mp4", b"12345"), SimpleUploadedFile("big.mp4", b"x" * 11)]
    resp = api_client_for(make_user("u")).post("/api/uploads/", {"file": files}, format="multipart")
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "file_too_large"
    assert resp.json()["error"]["files"] == ["big.mp4"]
    assert not Upload.objects.exists()


def test_another_users_job_is_not_found_not_forbidden(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    job = make_job(alice)
    assert api_client_for(alice).get(f"/api/jobs/{job.id}/").status_code == 200
    resp = api_client_for(bob).get(f"/api/jobs/{job.id}/")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "not_found"


def test_job_list_shows_only_own_jobs_newest_first_and_filters_by_status(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    first, second = make_job(alice), make_job(alice, Job.Status.FAILED)
    make_job(bob)
    client = api_client_for(alice)
    body = client.get("/api/jobs/").json()
    assert [j["id"] for j in body["results"]] == [str(second.id), str(first.id)]
    failed = client.get("/api/jobs/?status=failed").json()
    assert [j["id"] for j in failed["results"]] == [str(second.id)]
    bad = client.get("/api/jobs/?status=bogus")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_status"


def test_job_detail_has_the_documented_fields(make_user, api_client_for):
    alice = make_user("alice")
    job = make_job(alice)
    body = api_client_for(alice).get(f"/api/jobs/{job.id}/").json()
    assert set(body) >= {
        "id", "upload", "kind", "lane", "status", "progress", "attempts", "error", "created_at",
        "started_at", "finished_at", "wait_ms", "process_ms", "outputs",
    }
    assert body["status"] == "queued" and body["error"] is None


def test_a_forged_output_link_is_not_found(client):
    assert client.get("/o/not-a-signed-token/video.mp4").status_code == 404


def test_a_malformed_scheduled_for_is_a_400_naming_the_field(make_user, api_client_for):
    resp = api_client_for(make_user("u")).post(
        "/api/uploads/", {"file": SimpleUploadedFile("a.mp4", b"x"), "scheduled_for": "next tuesday"},
        format="multipart",
    )
    assert resp.status_code == 400
    body = resp.json()["error"]
    assert body["code"] == "invalid" and "scheduled_for" in body["fields"]
    assert not Upload.objects.exists()


def test_a_job_page_is_only_for_its_owner(make_user, client):
    owner, other = make_user("gil"), make_user("hal")
    job = make_job(owner)
    client.force_login(other)
    assert client.get(f"/jobs/{job.id}/").status_code == 404
    client.force_login(owner)
    resp = client.get(f"/jobs/{job.id}/")
    assert resp.status_code == 200 and b"a.mp4" in resp.content
