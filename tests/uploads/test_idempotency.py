"""Idempotency-Key on POST /api/uploads/ and /api/exports/: a repeated
request gets the first answer and creates nothing; a reused key with a
different request is a 422; concurrent twins create once."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, connections
from django.utils import timezone

from tests.promise import wait_for_lock_wait
from uploads import services
from uploads.models import IdempotencyKey, Job, Upload


def files(*names: str, content: bytes = b"0123456789") -> dict:
    return {"file": [SimpleUploadedFile(name, content) for name in names]}


def post(client, key: str | None, data: dict, url: str = "/api/uploads/", fmt: str = "multipart"):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(url, data, format=fmt, **headers)


@pytest.mark.django_db
def test_the_same_request_again_gets_the_first_answer_and_creates_nothing(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    first = post(client, "k-1", files("a.mp4", "b.mp4"))
    again = post(client, "k-1", files("a.mp4", "b.mp4"))
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Upload.objects.count() == 2 and Job.objects.count() == 2


@pytest.mark.django_db
def test_without_a_key_every_request_creates(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    post(client, None, files("a.mp4"))
    post(client, None, files("a.mp4"))
    assert Upload.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("second", [files("other.mp4"), files("a.mp4", content=b"longer content"),
                                    {**files("a.mp4"), "scheduled_for": "2030-01-01T00:00:00Z"}])
def test_a_key_reused_for_a_different_request_is_a_422_and_creates_nothing(second, make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    post(client, "k-1", files("a.mp4"))
    resp = post(client, "k-1", second)
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "idempotency_key_reused"
    assert Upload.objects.count() == 1


@pytest.mark.django_db
def test_an_error_answer_is_not_kept_so_the_corrected_retry_runs(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    assert post(client, "k-1", {}).status_code == 400  # no files
    assert not IdempotencyKey.objects.exists()
    assert post(client, "k-1", files("a.mp4")).status_code == 202
    assert Upload.objects.count() == 1


@pytest.mark.django_db
def test_keys_belong_to_their_user(make_user, api_client_for):
    post(api_client_for(make_user("alice")), "k-1", files("a.mp4"))
    resp = post(api_client_for(make_user("bob")), "k-1", files("a.mp4"))
    assert resp.status_code == 202 and "Idempotent-Replayed" not in resp
    assert Upload.objects.count() == 2


@pytest.mark.django_db
def test_an_expired_key_starts_afresh(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    post(client, "k-1", files("a.mp4"))
    IdempotencyKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    resp = post(client, "k-1", files("other.mp4"))
    assert resp.status_code == 202 and "Idempotent-Replayed" not in resp
    assert Upload.objects.count() == 2 and IdempotencyKey.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "x" * 256, "clé", "tab\there"])
def test_a_malformed_key_is_a_400(key, make_user, api_client_for):
    resp = post(api_client_for(make_user("alice")), key, files("a.mp4"))
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_idempotency_key"
    assert not Upload.objects.exists()


@pytest.mark.django_db
def test_exports_take_a_key_too(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    batch = post(client, None, files("a.mp4")).json()["batch"]
    first = post(client, "e-1", {"batch": batch}, url="/api/exports/", fmt="json")
    again = post(client, "e-1", {"batch": batch}, url="/api/exports/", fmt="json")
    assert first.status_code == again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert Job.objects.filter(kind=Job.Kind.EXPORT).count() == 1
    other = post(client, "e-1", {"batch": "00000000-0000-0000-0000-000000000001"}, url="/api/exports/", fmt="json")
    assert other.status_code == 422


@pytest.mark.django_db(transaction=True)
def test_concurrent_twins_create_once_and_both_get_the_first_answer(make_user, api_client_for, monkeypatch):
    """The first request holds its transaction open (its files stored, its
    rows written, the key's row inserted) until the second is seen waiting
    on the key's unique index; then both answer. PostgreSQL only: it is
    where concurrent transactions really interleave (SQLite serializes
    writers at BEGIN IMMEDIATE, so the twin waits before it even asks)."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's row locks to see the twin wait")
    client = api_client_for(make_user("alice"))
    inside, go = threading.Event(), threading.Event()
    real_create = services.uploads_create

    def held_open(**kwargs):
        uploads = real_create(**kwargs)
        inside.set()
        assert go.wait(60), "the twin never waited"
        return uploads

    monkeypatch.setattr(services, "uploads_create", held_open)
    answers: dict[str, object] = {}

    def send(name: str) -> None:
        try:
            answers[name] = post(client, "twin", files("a.mp4"))
        finally:
            connections.close_all()

    first = threading.Thread(target=send, args=("first",))
    first.start()
    assert inside.wait(60)
    second = threading.Thread(target=send, args=("second",))
    second.start()

    wait_for_lock_wait("%uploads_idempotencykey%", "the second request to wait on the key", 60)
    go.set()
    first.join(60)
    second.join(60)
    assert answers["first"].status_code == answers["second"].status_code == 202
    assert answers["second"].json() == answers["first"].json()
    assert answers["second"]["Idempotent-Replayed"] == "true"
    assert Upload.objects.count() == 1
