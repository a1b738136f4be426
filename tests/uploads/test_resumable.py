"""Resumable uploads (tus, uploads/resumable.py) through the API: chunks,
resuming from the server's offset, the finished file becoming a job, and
every refusal in the API's error shape, only ever on one's own uploads."""
from __future__ import annotations

import base64
import hashlib
import os

import pytest
from django.test.client import FakePayload
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import media
from tests.api_answers import assert_no_5xx_and_error_shape
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


# --- malformed and missing tus headers --------------------------------------------------

def tus(client, method: str, url: str, headers: dict[str, str | None], body: bytes = b""):
    """A request with exactly these headers, None meaning absent. The test
    client's generic() always sends a Content-Type with a body; a real
    client need not."""
    environ = {"REQUEST_METHOD": method, "PATH_INFO": url, "QUERY_STRING": "", "wsgi.input": FakePayload(body)}
    for name, value in {"Content-Length": str(len(body)) if body else None, **headers}.items():
        if value is not None:
            key = name.upper().replace("-", "_")
            environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    return client.request(**environ)


APPEND = {"Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream", "Upload-Offset": "0"}


@pytest.mark.parametrize(("missing", "status", "code"), [
    ("Upload-Offset", 400, "invalid_tus_header"),
    ("Content-Type", 415, "unsupported_media_type"),
    ("Tus-Resumable", 400, "tus_refused"),
])
def test_a_chunk_without_a_required_tus_header_is_refused_and_nothing_is_written(
        missing, status, code, make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    url = create(client, 4)
    resp = tus(client, "PATCH", url, {**APPEND, missing: None}, b"abcd")
    assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.content
    assert missing in resp.json()["error"]["message"]
    assert offset_of(client, url) == 0


def test_a_chunk_of_another_content_type_is_a_415(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    url = create(client, 4)
    resp = tus(client, "PATCH", url, {**APPEND, "Content-Type": "text/plain"}, b"abcd")
    assert resp.status_code == 415 and resp.json()["error"]["code"] == "unsupported_media_type"
    assert offset_of(client, url) == 0


def test_a_chunk_past_the_declared_length_is_refused_and_the_upload_stays_resumable(make_user, api_client_for):
    """drf-tus wrote past Upload-Length, chunk after chunk: an upload of 8
    bytes (counted as 8 against the limits) could hold gigabytes and never
    finish."""
    client = api_client_for(make_user("alice"))
    url = create(client, 8)
    assert patch(client, url, 0, b"abc").status_code == 204
    over = patch(client, url, 3, b"123456")
    assert over.status_code == 413 and over.json()["error"] == {
        "code": "chunk_past_length", "remaining": 5,
        "message": "The upload declared 8 bytes and has 3: a chunk may carry at most the 5 left."}
    assert offset_of(client, url) == 3
    assert patch(client, url, 3, b"12345").status_code == 204
    assert ResumableUpload.objects.get().state == "done"


def test_a_deferred_length_is_refused_and_not_advertised(make_user, api_client_for):
    """drf-tus accepts Upload-Defer-Length but never takes the length later:
    such an upload could not finish, and its bytes escaped the limits."""
    client = api_client_for(make_user("alice"))
    resp = client.post("/api/uploads/resumable/", **TUS, HTTP_UPLOAD_DEFER_LENGTH="1")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "upload_length_required"
    assert not ResumableUpload.objects.exists()
    extensions = client.options("/api/uploads/resumable/", **TUS).json()["Tus-Extension"].split(",")
    assert "creation" in extensions and "creation-defer-length" not in extensions


# Header values as a server hands them to Django: latin-1 text without
# control characters (which the HTTP servers refuse before us).
_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=24)
_NUMBERS = st.one_of(st.integers(-3, 70), st.integers(-(2**70), 2**70), st.sampled_from([2**63, -(2**63) - 1]))
_NUMBER_TEXT = st.one_of(_NUMBERS.map(str), st.sampled_from([" 5", "+5", "5_0", "0x10", "1e3", "５", "", "-0"]))


def _metadata_pair(key: str, value: bytes | None, encode) -> str:
    return key if value is None else f"{key} {encode(value)}"


# tus metadata: "key base64,key base64,key", keys possibly bare; values
# base64 of text or of arbitrary bytes (not UTF-8), or not base64 at all.
_METADATA = st.lists(
    st.builds(_metadata_pair,
              st.one_of(st.sampled_from(["filename", "filetype", "name"]), _HEADER_TEXT),
              st.one_of(st.none(), st.text(max_size=12).map(str.encode), st.binary(max_size=12)),
              st.sampled_from([lambda v: base64.b64encode(v).decode(), lambda v: base64.urlsafe_b64encode(v).decode(),
                               lambda v: v.decode("latin-1")])),
    max_size=3).map(",".join)
_CHECKSUM_ALGORITHMS = st.sampled_from(["md5", "sha1", "sha256", "crc32", "", "SHA1"])


def _maybe(strategy) -> st.SearchStrategy:
    return st.one_of(st.none(), strategy)


def _checksums(body: bytes) -> st.SearchStrategy[str]:
    digest = hashlib.sha1(body).digest()
    return st.builds("{} {}".format, _CHECKSUM_ALGORITHMS,
                     st.one_of(st.sampled_from([base64.b64encode(digest).decode(), digest.hex()]), _HEADER_TEXT))


def _fuzzed(body: bytes) -> dict[str, st.SearchStrategy[str | None]]:
    """Each tus header's values: absent, near misses and anything."""
    return {
        "Tus-Resumable": _maybe(st.one_of(st.sampled_from(["1.0.0", "0.2.2", "1.0"]), _HEADER_TEXT)),
        "Upload-Length": _maybe(st.one_of(st.integers(-1, 64).map(str), _NUMBER_TEXT)),
        "Upload-Defer-Length": _maybe(st.one_of(st.sampled_from(["1", "0", "2"]), _HEADER_TEXT)),
        "Upload-Metadata": _maybe(st.one_of(_METADATA, _HEADER_TEXT)),
        "Upload-Offset": _maybe(st.one_of(st.sampled_from(["3", "0", "8", "-3"]), _NUMBER_TEXT)),
        "Upload-Checksum": _maybe(st.one_of(_checksums(body), _HEADER_TEXT)),
        "Content-Type": _maybe(st.one_of(
            st.sampled_from(["application/offset+octet-stream", "application/offset+octet-stream; charset=x",
                             "Application/Offset+Octet-Stream", "", "text/plain", "multipart/form-data"]),
            _HEADER_TEXT)),
        "Content-Length": _maybe(_HEADER_TEXT.filter(lambda t: not t.strip().isdigit())),
    }


@st.composite
def tus_requests(draw) -> tuple[str, dict[str, str | None], bytes]:
    """(method, headers, body) against an upload of 8 bytes with 3 received:
    the headers a well-behaved client sends for the method, with up to three
    of any tus headers changed, dropped or added, so that most requests get
    past the first check and reach the code behind it."""
    method = draw(st.sampled_from(["POST", "PATCH", "PATCH", "HEAD", "DELETE"]))
    body = draw(st.binary(max_size=12))
    headers: dict[str, str | None] = {"Tus-Resumable": "1.0.0"}
    if method == "POST":
        headers |= {"Upload-Length": "5", "Upload-Metadata": f"filename {b64('a.mp4')},filetype {b64('video/mp4')}"}
    elif method == "PATCH":
        headers |= {"Content-Type": "application/offset+octet-stream", "Upload-Offset": "3"}
    fuzzed = _fuzzed(body)
    for name in draw(st.lists(st.sampled_from(sorted(fuzzed)), max_size=3, unique=True)):
        headers[name] = draw(fuzzed[name])
    return method, headers, body


@pytest.fixture
def fuzzer(make_user):
    """One user for every example of a test (the fixture is not set up again per example)."""
    return make_user("fuzzer")


@hypothesis_settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=tus_requests())
def test_no_tus_header_value_makes_the_api_answer_5xx(request, fuzzer, api_client_for):
    """Whatever the tus headers say, a 4xx in the API's error shape or a
    success; and an upload never holds more than it declared."""
    client = api_client_for(fuzzer)
    url = create(client, 8)
    assert patch(client, url, 0, b"abc").status_code == 204
    method, headers, body = request
    target = "/api/uploads/resumable/" if method == "POST" else url
    try:
        resp = tus(client, method, target, headers, body)
        assert_no_5xx_and_error_shape(resp, f"{method} {headers} {body!r}")
        event(f"{method} {resp.status_code}")  # --hypothesis-show-statistics: how deep the examples reach
        for upload in ResumableUpload.objects.filter(user=fuzzer):
            size = os.path.getsize(upload.temporary_file_path) if upload.temporary_file_path else 0
            assert size == upload.upload_offset <= max(upload.upload_length, 0), (upload.upload_length, size)
    finally:
        for upload in ResumableUpload.objects.filter(user=fuzzer):
            upload.delete()  # with its chunks
