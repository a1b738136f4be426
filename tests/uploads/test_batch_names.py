"""Named batches: given at upload (multipart or a direct-upload claim) or by
renaming; else the first file's name and how many more, or the date;
shown in the batch lists."""
from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.uploads.test_direct import create, send_all
from uploads import services
from uploads.models import Batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(make_user):
    return make_user("alice")


def upload(client, *names: str, **fields) -> dict:
    files = [SimpleUploadedFile(name, b"0123456789") for name in names]
    resp = client.post("/api/uploads/", {"file": files, **fields}, format="multipart")
    assert resp.status_code == 202, resp.content
    return client.get(resp.json()["batch_url"]).json()


@pytest.mark.parametrize(("filenames", "expected"), [
    (["clip.mp4"], "clip.mp4"),
    (["clip.mp4", "b.jpg", "c.pdf"], "clip.mp4 and 2 more"),
    (["x" * 255, "b.jpg"], "x" * 189 + " and 1 more"),  # within the 200 characters of a name
    ([f"f{i}.mp4" for i in range(2000)], "f0.mp4 and 1,999 more"),
    ([], "Batch of 26 Nov 2026, 14:05"),
    (["   "], "Batch of 26 Nov 2026, 14:05"),
])
def test_a_batch_without_a_name_is_named_after_its_first_file_or_its_date(filenames, expected):
    at = datetime(2026, 11, 26, 14, 5, tzinfo=dt_timezone.utc)
    assert services.batch_default_name(filenames=filenames, at=at) == expected


def test_an_upload_names_its_batch_or_the_first_file_does(alice, api_client_for):
    client = api_client_for(alice)
    assert upload(client, "beach.mp4", "party.mov")["name"] == "beach.mp4 and 1 more"
    assert upload(client, "one.mp4", batch_name="  Holiday\n clips ")["name"] == "Holiday clips"
    listed = client.get("/api/batches/").json()["results"]
    assert [b["name"] for b in listed] == ["Holiday clips", "beach.mp4 and 1 more"]
    resp = client.post("/api/uploads/", {"file": [SimpleUploadedFile("a.mp4", b"1")], "batch_name": "n" * 201},
                       format="multipart")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid"


def test_a_claim_of_direct_uploads_names_its_batch(storage_backend, alice, api_client_for):
    client = api_client_for(alice)
    [sent] = create(client, ("direct.mp4", 10))
    send_all(client, sent, b"0123456789")
    resp = client.post("/api/uploads/", {"direct": [sent["id"]], "batch_name": "From the phone"}, format="json")
    assert resp.status_code == 202, resp.content
    assert Batch.objects.get(id=resp.json()["batch"]).name == "From the phone"


def test_a_batch_is_renamed_by_its_owner_only(alice, make_user, api_client_for):
    client = api_client_for(alice)
    batch = upload(client, "a.mp4")
    url = f"/api/batches/{batch['id']}/"
    resp = client.patch(url, {"name": "  Wedding, day two "}, format="json")
    assert resp.status_code == 200 and resp.json()["name"] == "Wedding, day two"
    assert Batch.objects.get(id=batch["id"]).name == "Wedding, day two"
    for bad in ({"name": ""}, {"name": "   "}, {"name": "n" * 201}, {}, {"name": ["a"]}):
        answer = client.patch(url, bad, format="json")
        assert answer.status_code == 400 and answer.json()["error"]["code"] in ("invalid", "invalid_name"), bad
    assert api_client_for(make_user("bob")).patch(url, {"name": "mine"}, format="json").status_code == 404
    assert Batch.objects.get(id=batch["id"]).name == "Wedding, day two"

