"""Resumable uploads (tus, uploads/resumable.py) through the API: chunks,
resuming from the server's offset, the finished file becoming a job, and
every refusal in the API's error shape, only ever on one's own uploads."""
from __future__ import annotations

import base64
import os

import pytest

import media
from uploads.models import Job, ResumableUpload, Upload

pytestmark = pytest.mark.django_db
TUS = {"HTTP_TUS_RESUMABLE": "1.0.0"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def create(client, size: int, name: str = "clip.mp4", filetype: str = "video/mp4") -> str:
    resp = client.post("/api/uploads/resumable/", **TUS, HTTP_UPLOAD_LENGTH=str(size),
                       HTTP_UPLOAD_METADATA=f"filename {b64(name)},filetype {b64(filetype)}")
    assert resp.status_code == 201, resp.content
    return resp["Location"]


def patch(client, url: str, offset: int, chunk: bytes):
    return client.generic("PATCH", url, chunk, content_type="application/offset+octet-stream", **TUS,
                          HTTP_UPLOAD_OFFSET=str(offset))


def offset_of(client, url: str) -> int:
    resp = client.head(url, **TUS)
    assert resp.status_code == 200
    return int(resp["Upload-Offset"])


def test_a_file_sent_in_chunks_resumes_at_the_servers_offset_and_becomes_a_job(
    make_user, api_client_for, redis_client, django_capture_on_commit_callbacks
):
    client = api_client_for(make_user("alice"))
    data = os.urandom(3000)
    url = create(client, len(data))
    assert url.startswith("/api/uploads/resumable/")
    assert patch(client, url, 0, data[:1000])["Upload-Offset"] == "1000"
    # The connection dropped during the second chunk: the client asks where
    # the upload stands and sends from there; a chunk at a stale offset is refused.
    assert offset_of(client, url) == 1000
    stale = patch(client, url, 0, data[:1000])
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "conflict"
    assert patch(client, url, 1000, data[1000:]).status_code == 204
    assert offset_of(client, url) == 3000
    guid = url.rstrip("/").rsplit("/", 1)[1]
    part = ResumableUpload.objects.get(guid=guid).temporary_file_path

    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/api/uploads/", {"resumable": [guid]}, format="json")
    assert resp.status_code == 202, resp.json()
    [accepted] = resp.json()["uploads"]
    upload = Upload.objects.get(id=accepted["id"])
    assert (upload.filename, upload.size, upload.client_content_type) == ("clip.mp4", 3000, "video/mp4")
    assert media.read_bytes(upload.file.name) == data  # through the storage seam, either backend
    assert Job.objects.get(upload=upload).status == Job.Status.QUEUED
    # Taken over: the resumable upload and its chunks are gone.
    assert not ResumableUpload.objects.filter(guid=guid).exists() and not os.path.exists(part)
    again = client.post("/api/uploads/", {"resumable": [guid]}, format="json")
    assert again.status_code == 400 and again.json()["error"]["code"] == "resumable_not_finished"


def test_another_users_resumable_upload_is_not_found_and_cannot_be_claimed(make_user, api_client_for):
    alice, bob = api_client_for(make_user("alice")), api_client_for(make_user("bob"))
    url = create(alice, 4)
    assert patch(alice, url, 0, b"abcd").status_code == 204
    assert bob.head(url, **TUS).status_code == 404
    assert patch(bob, url, 4, b"e").status_code == 404
    assert bob.delete(url, **TUS).status_code == 404
    guid = url.rstrip("/").rsplit("/", 1)[1]
    resp = bob.post("/api/uploads/", {"resumable": [guid]}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["resumable"] == [guid]
    assert not Upload.objects.exists()


def test_an_unfinished_upload_cannot_become_a_job(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    url = create(client, 10)
    patch(client, url, 0, b"12345")
    guid = url.rstrip("/").rsplit("/", 1)[1]
    resp = client.post("/api/uploads/", {"resumable": [guid]}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "resumable_not_finished"
    assert not Upload.objects.exists() and offset_of(client, url) == 5


@pytest.mark.parametrize(("body", "code"), [({"resumable": []}, "invalid"), ({"resumable": ["nope"]}, "invalid"),
                                             ({"resumable": "x"}, "invalid"), ({}, "invalid")])
def test_a_malformed_resumable_list_is_a_400(body, code, make_user, api_client_for):
    resp = api_client_for(make_user("alice")).post("/api/uploads/", body, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == code


def test_limits_and_malformed_tus_headers_answer_in_the_error_shape(make_user, api_client_for, settings):
    client = api_client_for(make_user("alice"))
    settings.FAIRLANE_RESUMABLE_CHUNK_BYTES = 4
    url = create(client, 10)
    big = patch(client, url, 0, b"12345")
    assert big.status_code == 413 and big.json()["error"]["code"] == "chunk_too_large"
    assert offset_of(client, url) == 0
    bad = client.post("/api/uploads/resumable/", **TUS, HTTP_UPLOAD_LENGTH="ten")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_tus_header"
    no_tus = client.post("/api/uploads/resumable/", HTTP_UPLOAD_LENGTH="10")
    assert no_tus.status_code == 400 and no_tus.json()["error"]["code"] == "tus_refused"
    too_big = client.post("/api/uploads/resumable/", **TUS,
                          HTTP_UPLOAD_LENGTH=str(settings.FAIRLANE_MAX_UPLOAD_BYTES + 1))
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "tus_refused"
    assert ResumableUpload.objects.count() == 1


def test_a_user_holds_a_bounded_number_and_size_of_resumable_uploads(make_user, api_client_for, settings):
    settings.FAIRLANE_MAX_RESUMABLE_UPLOADS = 2
    settings.FAIRLANE_MAX_USER_INFLIGHT_BYTES = 12
    client = api_client_for(make_user("alice"))
    url = create(client, 5)
    patch(client, url, 0, b"12345")  # finished, not yet a batch: still held
    too_big = client.post("/api/uploads/resumable/", **TUS, HTTP_UPLOAD_LENGTH="8")
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "too_many_bytes_in_flight"
    create(client, 7)
    resp = client.post("/api/uploads/resumable/", **TUS, HTTP_UPLOAD_LENGTH="1")
    assert resp.status_code == 429 and resp.json()["error"]["code"] == "too_many_resumable_uploads"
    assert api_client_for(make_user("bob")).post("/api/uploads/resumable/", **TUS,
                                                 HTTP_UPLOAD_LENGTH="5").status_code == 201  # per user


def test_a_repeated_claim_with_the_same_idempotency_key_gets_the_first_answer(
    make_user, api_client_for, redis_client, django_capture_on_commit_callbacks
):
    client = api_client_for(make_user("alice"))
    url = create(client, 3)
    patch(client, url, 0, b"abc")
    guid = url.rstrip("/").rsplit("/", 1)[1]
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post("/api/uploads/", {"resumable": [guid]}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    # The answer was lost; the page sends the same request again. The
    # resumable upload is gone by now: the key, not the list, answers.
    again = client.post("/api/uploads/", {"resumable": [guid]}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 202 and again.json() == first.json()
    assert Upload.objects.count() == 1


def test_a_claim_that_names_an_unknown_upload_creates_nothing_and_keeps_the_others(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    url = create(client, 3)
    patch(client, url, 0, b"abc")
    guid = url.rstrip("/").rsplit("/", 1)[1]
    unknown = "00000000-0000-4000-8000-000000000000"
    resp = client.post("/api/uploads/", {"resumable": [guid, unknown]}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["resumable"] == [unknown]
    assert not Upload.objects.exists() and offset_of(client, url) == 3  # still there, claimable
    part = ResumableUpload.objects.get(guid=guid).temporary_file_path
    assert os.path.exists(part)
    twice = client.post("/api/uploads/", {"resumable": [guid, guid]}, format="json")
    assert twice.status_code == 202 and len(twice.json()["uploads"]) == 1
