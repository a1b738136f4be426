"""Upload limits are enforced while a real request body streams in: by
Content-Length before a byte is read, per file and per request while
reading, and per user across web processes; refusals are the API's JSON 413
and leave nothing on disk or in the store."""
from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

import media
from uploads import upload_limits
from uploads.models import Upload

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def temp_dir(settings, tmp_path, filesystem_storage):
    """Where the request's temporary files go: empty after any refusal. (The
    store is a private MEDIA_ROOT: the limits do not depend on the backend.)"""
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "upload-tmp")
    (tmp_path / "upload-tmp").mkdir()
    return tmp_path / "upload-tmp"


def _error(resp) -> dict:
    assert resp.status_code == 413, resp.content
    return resp.json()["error"]


def _bytes_read(resp) -> int:
    """How much of the request body the server read before it answered."""
    return resp.wsgi_request._stream._pos


def test_a_request_announcing_too_many_bytes_is_refused_before_its_body_is_read(
        make_user, api_client_for, settings, temp_dir):
    settings.FAIRLANE_MAX_REQUEST_BYTES = 1000
    resp = api_client_for(make_user("u")).post(
        "/api/uploads/", {"file": SimpleUploadedFile("a.mp4", b"x" * 5000)}, format="multipart")
    error = _error(resp)
    assert error["code"] == "request_too_large" and error["limit"] == 1000 and error["message"]
    assert _bytes_read(resp) == 0
    assert not any(temp_dir.iterdir()) and not Upload.objects.exists()


def test_a_file_over_the_limit_is_refused_mid_stream_and_its_temporary_files_are_gone(
        make_user, api_client_for, settings, temp_dir):
    settings.FAIRLANE_MAX_UPLOAD_BYTES = 256 * 1024
    size = 8 * 1024 * 1024
    files = [SimpleUploadedFile("small.png", b"s" * 1000), SimpleUploadedFile("big.mp4", b"x" * size)]
    resp = api_client_for(make_user("u")).post("/api/uploads/", {"file": files}, format="multipart")
    error = _error(resp)
    assert error["code"] == "file_too_large" and error["files"] == ["big.mp4"]
    # Refused while reading: most of the body was never read, let alone written.
    assert _bytes_read(resp) < size / 4
    assert not any(temp_dir.iterdir()) and not Upload.objects.exists()
    assert media.list_prefix("uploads/") == {}  # the private store holds nothing


def test_too_many_files_in_one_request_is_refused(make_user, api_client_for, settings, temp_dir):
    settings.FAIRLANE_MAX_FILES_PER_REQUEST = 3
    files = [SimpleUploadedFile(f"{i}.png", b"p" * 10) for i in range(5)]
    resp = api_client_for(make_user("u")).post("/api/uploads/", {"file": files}, format="multipart")
    assert _error(resp)["code"] == "too_many_files"
    assert not any(temp_dir.iterdir()) and not Upload.objects.exists()


def test_bytes_in_flight_are_limited_per_user_across_web_processes(make_user, api_client_for, settings,
                                                                   redis_client):
    settings.FAIRLANE_MAX_USER_INFLIGHT_BYTES = 100_000
    alice, bob = make_user("alice"), make_user("bob")
    # Another web process is receiving 90 kB from alice right now.
    elsewhere = SimpleNamespace(user=alice)
    upload_limits._reserve(elsewhere, 90_000)

    def post(user):
        return api_client_for(user).post(
            "/api/uploads/", {"file": SimpleUploadedFile("a.png", b"p" * 20_000)}, format="multipart")

    error = _error(post(alice))
    assert error["code"] == "too_many_bytes_in_flight" and "90000" in error["message"]
    assert post(bob).status_code == 202  # others are not held back by alice
    upload_limits.release(elsewhere)
    assert post(alice).status_code == 202
    # every request gave its reservation back when it ended
    assert redis_client.zcard(f"fairlane:uploads:inflight:{alice.pk}") == 0


def test_a_real_server_answers_413_from_the_headers_alone(live_server, make_user, settings):
    """A client announces 10 GiB and sends no body: the JSON 413 comes back
    at once (a server that read first would wait for the body)."""
    settings.FAIRLANE_MAX_REQUEST_BYTES = 1024**3
    user = make_user("u")
    host, port = live_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall((f"POST /api/uploads/ HTTP/1.1\r\nHost: {host}\r\n"
                      f"Authorization: Token {user.auth_token.key}\r\n"
                      "Content-Type: multipart/form-data; boundary=xyz\r\n"
                      f"Content-Length: {10 * 1024**3}\r\nConnection: close\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"]["code"] == "request_too_large"
