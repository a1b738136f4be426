"""Direct uploads (uploads/direct.py) through the API, on both storage
backends: the parts go to the URLs the API signs (the store's presigned
ones with object storage, the web's /store/incoming/ on disk), the store
bounds every part to the size its URL allows, and a claim turns the upload's
key into its Upload's file. Bounds, expiry and refusals in the API's error
shape, only ever on one's own uploads."""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import media
from tests.api_answers import assert_no_5xx_and_error_shape
from uploads import direct
from uploads.models import DirectUpload, Job, Upload

pytestmark = pytest.mark.django_db
MIB = 1024 * 1024
PART = 5 * MIB  # S3's smallest part, and the smallest part size we sign


@pytest.fixture
def small_parts(settings):
    settings.FAIRLANE_UPLOAD_PART_BYTES = PART


def put(client, url: str | dict, body: bytes) -> int:
    """PUT a part as a browser does: to the store (absolute URL) or to this
    site (relative), no credentials, with the headers the URL asks for."""
    headers = {} if isinstance(url, str) else url["headers"]
    url = url if isinstance(url, str) else url["url"]
    if url.startswith("/"):
        return client.generic("PUT", url, body, content_type="application/octet-stream").status_code
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="PUT", headers=headers),
                                    timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def gone(row: DirectUpload) -> bool:
    """Nothing of the upload is in the store: no multipart upload, or no
    object of its single PUT."""
    try:
        return direct.store.stored_parts(row.key, row.multipart_id) == [] and not row.multipart_id
    except media.UploadGone:
        return True


def create(client, *files: tuple[str, int | None]) -> list[dict]:
    resp = client.post("/api/uploads/direct/", {"files": [{"filename": n, "size": s} for n, s in files]},
                       format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()["uploads"]


def sign(client, upload_id: str, parts: list) -> list[dict]:
    resp = client.post(f"/api/uploads/direct/{upload_id}/parts/", {"parts": parts}, format="json")
    assert resp.status_code == 200, resp.content
    return resp.json()["urls"]


def send_all(client, upload: dict, data: bytes) -> None:
    urls = {u["number"]: u for u in upload["urls"]}
    for number in range(1, upload["parts"] + 1):
        url = urls.get(number) or sign(client, upload["id"], [number])[0]
        start = (number - 1) * upload["part_size"]
        assert put(client, url, data[start:start + url["size"]]) == 200


def test_a_file_sent_in_parts_and_claimed_is_the_uploads_file_byte_for_byte(
        storage_backend, small_parts, make_user, api_client_for, django_capture_on_commit_callbacks):
    client = api_client_for(make_user("alice"))
    data = os.urandom(2 * PART + 12345)
    [upload] = create(client, ("clip.mp4", len(data)))
    assert (upload["parts"], upload["part_size"], upload["state"]) == (3, PART, "open")
    assert [(u["number"], u["size"]) for u in upload["urls"]] == [(1, PART), (2, PART), (3, 12345)]
    assert put(client, upload["urls"][0], data[:PART]) == 200
    # After a reload, the client asks what the store has and sends the rest.
    status = client.get(f"/api/uploads/direct/{upload['id']}/").json()
    assert (status["received"], status["parts_received"]) == (PART, [{"number": 1, "size": PART}])
    for part in upload["urls"][1:]:
        start = (part["number"] - 1) * PART
        assert put(client, part, data[start:start + part["size"]]) == 200

    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/api/uploads/", {"direct": [upload["id"]]}, format="json")  # completes, then claims
    assert resp.status_code == 202, resp.content
    [accepted] = resp.json()["uploads"]
    stored = Upload.objects.get(id=accepted["id"])
    key = stored.file.name
    assert key.startswith(f"uploads/{stored.owner_id}/") and stored.size == len(data)
    assert media.read_bytes(key) == data
    assert Job.objects.get(upload=stored).status == Job.Status.QUEUED
    assert not DirectUpload.objects.exists()  # taken over in the batch's transaction
    again = client.post("/api/uploads/", {"direct": [upload["id"]]}, format="json")
    assert again.status_code == 400 and again.json()["error"]["code"] == "unknown_uploads"


def test_a_claim_reads_none_of_the_upload_rows_it_has_just_marked_complete(
        storage_backend, make_user, api_client_for):
    """Every round trip of a claim waits for the database host's core when
    another user keeps it busy (bench-isolation). Marking single PUTs (the
    object store's way) complete is one UPDATE; the rows are read again
    only when it did not take them all (one given up or completed by
    another request meanwhile). Files on disk arrive in parts, each
    marked by an UPDATE of its own."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = api_client_for(make_user("alice"))
    uploads = create(client, ("a.png", 3), ("b.png", 4))
    for upload, body in zip(uploads, (b"abc", b"abcd")):
        assert put(client, upload["urls"][0], body) == 200
    with CaptureQueriesContext(connection) as queries:
        resp = client.post("/api/uploads/", {"direct": [u["id"] for u in uploads]}, format="json")
    assert resp.status_code == 202, resp.content
    sql = [q["sql"] for q in queries.captured_queries if '"uploads_directupload"' in q["sql"]]
    marked = next(i for i, q in enumerate(sql) if q.startswith('UPDATE "uploads_directupload"'))
    assert not [q for q in sql[marked:] if q.startswith("SELECT")], sql[marked:]
    assert Upload.objects.filter(owner__username="alice").count() == 2


def test_a_single_put_given_up_while_its_claim_checks_the_store_is_refused_and_its_bytes_dropped(
        s3_storage, make_user, api_client_for, monkeypatch):
    """The sweep (or an abort) gives an upload up between the claim's look
    at the store and its update: the update takes only the other one, the
    rows are read again, and the given-up one's object must not stay."""
    client = api_client_for(make_user("alice"))
    kept, dropped = create(client, ("a.png", 3), ("b.png", 4))
    for upload, body in ((kept, b"abc"), (dropped, b"abcd")):
        assert put(client, upload["urls"][0], body) == 200
    listing = direct.store.stored_sizes

    def listed_then_given_up(prefix: str) -> dict[str, int]:
        sizes = listing(prefix)  # the real store's answer, then the sweep's update
        DirectUpload.objects.filter(id=dropped["id"]).update(state=DirectUpload.State.EXPIRED)
        return sizes

    monkeypatch.setattr(direct.store, "stored_sizes", listed_then_given_up)
    resp = client.post("/api/uploads/", {"direct": [kept["id"], dropped["id"]]}, format="json")
    assert resp.status_code == 410 and resp.json()["error"]["code"] == "upload_expired", resp.content
    assert gone(DirectUpload.objects.get(id=dropped["id"]))
    assert DirectUpload.objects.get(id=kept["id"]).state == DirectUpload.State.COMPLETE  # claimable again
    assert not Upload.objects.exists()


def test_nothing_past_what_a_url_allows_is_stored(storage_backend, small_parts, make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    [upload] = create(client, ("a.bin", 100))
    url = upload["urls"][0]
    assert put(client, url, b"x" * 101) in (400, 403)  # the store (or our stand-in) checks the signed size
    assert put(client, url, b"x" * 99) in (400, 403)
    for parts in ([2], [0], [{"number": 1, "size": 200}]):
        resp = client.post(f"/api/uploads/direct/{upload['id']}/parts/", {"parts": parts}, format="json")
        assert resp.status_code == 400, (parts, resp.content)
    incomplete = client.post("/api/uploads/direct/complete/", {"uploads": [upload["id"]]}, format="json")
    assert incomplete.status_code == 409 and incomplete.json()["error"]["missing"] == [1]
    assert put(client, url, b"x" * 100) == 200
    done = client.post("/api/uploads/direct/complete/", {"uploads": [upload["id"]]}, format="json")
    assert done.status_code == 200 and done.json()["uploads"][0]["state"] == "complete"
    # Finished: an earlier URL writes nothing (a multipart upload is gone; a
    # single PUT's object exists, and its URL is signed with If-None-Match: *),
    # and no new one is signed.
    assert put(client, url, b"y" * 100) in (403, 404, 410, 412)
    assert media.read_bytes(DirectUpload.objects.get().key) == b"x" * 100
    more = client.post(f"/api/uploads/direct/{upload['id']}/parts/", {"parts": [1]}, format="json")
    assert more.status_code == 409 and more.json()["error"]["code"] == "upload_complete"


def test_a_deferred_length_is_bounded_and_counts_what_its_urls_were_signed_for(
        storage_backend, small_parts, make_user, api_client_for, settings, django_capture_on_commit_callbacks):
    settings.FAIRLANE_MAX_UPLOAD_BYTES = 3 * PART
    client = api_client_for(make_user("alice"))
    [upload] = create(client, ("live.mp4", None))
    assert (upload["size"], upload["parts"], upload["urls"]) == (None, None, [])
    bare = client.post(f"/api/uploads/direct/{upload['id']}/parts/", {"parts": [1]}, format="json")
    assert bare.status_code == 400  # a deferred length's part comes with its size
    first, second = sign(client, upload["id"], [{"number": 1, "size": PART}, {"number": 2, "size": 1000}])
    assert DirectUpload.objects.get().signed_bytes == PART + 1000
    after_last = client.post(f"/api/uploads/direct/{upload['id']}/parts/",
                             {"parts": [{"number": 3, "size": 10}]}, format="json")
    assert after_last.status_code == 400  # part 2 was shorter: it is the last
    resized = client.post(f"/api/uploads/direct/{upload['id']}/parts/",
                          {"parts": [{"number": 2, "size": PART}]}, format="json")
    assert resized.status_code == 400  # its earlier URL could write 1000 bytes: the size stays
    [again] = sign(client, upload["id"], [{"number": 2, "size": 1000}])  # the same size again: a retry
    assert again["size"] == 1000 and DirectUpload.objects.get().signed_bytes == PART + 1000
    [other] = create(client, ("live2.mp4", None))
    too_much = client.post(f"/api/uploads/direct/{other['id']}/parts/",
                           {"parts": [{"number": n, "size": PART} for n in (1, 2, 3, 4)]}, format="json")
    assert too_much.status_code == 413 and too_much.json()["error"]["code"] == "file_too_large"
    data = os.urandom(PART + 1000)
    assert put(client, first, data[:PART]) == 200
    assert put(client, second, data[PART:]) == 200
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/api/uploads/", {"direct": [upload["id"]]}, format="json")
    assert resp.status_code == 202, resp.content
    assert media.read_bytes(Upload.objects.get().file.name) == data


def test_a_users_uploads_in_progress_are_bounded_in_number_and_bytes(make_user, api_client_for, settings):
    settings.FAIRLANE_MAX_PENDING_UPLOADS = 3
    settings.FAIRLANE_MAX_USER_PENDING_BYTES = 10 * MIB
    client = api_client_for(make_user("alice"))
    create(client, ("a", 4 * MIB), ("b", 4 * MIB))
    over_bytes = client.post("/api/uploads/direct/", {"files": [{"filename": "c", "size": 3 * MIB}]}, format="json")
    assert over_bytes.status_code == 413 and over_bytes.json()["error"]["code"] == "too_many_pending_bytes"
    create(client, ("c", MIB))
    over_count = client.post("/api/uploads/direct/", {"files": [{"filename": "d", "size": 1}]}, format="json")
    assert over_count.status_code == 429 and over_count.json()["error"]["code"] == "too_many_pending_uploads"
    # Another user is not affected by alice's.
    create(api_client_for(make_user("bob")), ("e", 9 * MIB))
    # A deferred length counts what its URLs were signed for.
    DirectUpload.objects.filter(filename="c").delete()
    [deferred] = create(client, ("live", None))
    refused = client.post(f"/api/uploads/direct/{deferred['id']}/parts/",
                          {"parts": [{"number": 1, "size": 3 * MIB}]}, format="json")
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "too_many_pending_bytes"
    assert DirectUpload.objects.get(id=deferred["id"]).signed_bytes == 0


def test_an_expired_upload_answers_410_to_every_request(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    [upload] = create(client, ("a.bin", 10))
    DirectUpload.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    base = f"/api/uploads/direct/{upload['id']}/"
    for resp in (client.get(base), client.post(base + "parts/", {"parts": [1]}, format="json"),
                 client.post("/api/uploads/direct/complete/", {"uploads": [upload["id"]]}, format="json"),
                 client.post("/api/uploads/", {"direct": [upload["id"]]}, format="json"), client.delete(base)):
        assert resp.status_code == 410, resp.content
        assert resp.json()["error"]["code"] == "upload_expired"
    # Expired uploads hold nothing against their owner's bounds.
    assert direct._pending(DirectUpload.objects.get().owner) == (0, 0)


def test_another_users_upload_is_not_found(make_user, api_client_for):
    alice, bob = api_client_for(make_user("alice")), api_client_for(make_user("bob"))
    [upload] = create(alice, ("a.bin", 10))
    base = f"/api/uploads/direct/{upload['id']}/"
    for resp in (bob.get(base), bob.post(base + "parts/", {"parts": [1]}, format="json"), bob.delete(base),
                 bob.post("/api/uploads/direct/complete/", {"uploads": [upload["id"]]}, format="json")):
        assert resp.status_code == 404
    claim = bob.post("/api/uploads/", {"direct": [upload["id"]]}, format="json")
    assert claim.status_code == 400 and claim.json()["error"]["code"] == "unknown_uploads"
    assert DirectUpload.objects.get().state == "open"


def test_giving_an_upload_up_drops_what_it_stored(storage_backend, make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    [upload] = create(client, ("a.bin", 10))
    assert put(client, upload["urls"][0], b"0123456789") == 200
    row = DirectUpload.objects.get()
    assert client.delete(f"/api/uploads/direct/{upload['id']}/").status_code == 204
    assert DirectUpload.objects.get().state == "expired"  # a tombstone: 410 from now on
    assert client.get(f"/api/uploads/direct/{upload['id']}/").status_code == 410
    assert direct._pending(row.owner) == (0, 0)
    assert gone(row)
    if row.multipart_id:  # no part can arrive any more
        assert put(client, upload["urls"][0], b"0123456789") in (403, 404, 410)


def test_the_sweep_gives_up_expired_uploads_forgets_tombstones_and_aborts_orphans(
        storage_backend, make_user, api_client_for, settings):
    client = api_client_for(make_user("alice"))
    kept, expired = create(client, ("kept.bin", 10), ("expired.bin", 10))
    assert put(client, expired["urls"][0], b"0123456789") == 200
    DirectUpload.objects.filter(id=expired["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    row = DirectUpload.objects.get(id=expired["id"])
    orphan_key = media.upload_key(owner_id=0)
    orphan = media.multipart_begin(orphan_key, tag=direct.STAGING_TAG)  # its row was never written
    export = media.multipart_begin("exports/x/y/z.zip")  # another user of multipart uploads: not ours to sweep
    settings.FAIRLANE_UPLOAD_EXPIRE_S = -7200  # every multipart upload is old enough to be an orphan now

    swept = direct.direct_uploads_sweep()
    assert (swept.expired, swept.orphans) == (1, 1)
    assert DirectUpload.objects.get(id=expired["id"]).state == "expired"
    assert gone(row)
    with pytest.raises(media.UploadGone):
        direct.store.stored_parts(orphan_key, orphan)
    kept_row = DirectUpload.objects.get(id=kept["id"])
    assert direct.store.stored_parts(kept_row.key, kept_row.multipart_id) == []  # live: untouched
    assert direct.store.stored_parts("exports/x/y/z.zip", export) == []
    media.multipart_abort("exports/x/y/z.zip", export)

    settings.FAIRLANE_UPLOAD_TOMBSTONE_S = 0
    assert direct.direct_uploads_sweep().forgotten == 1
    assert list(DirectUpload.objects.values_list("id", flat=True)) == [kept_row.id]


def test_an_incoming_url_must_be_ours_unaltered_and_unexpired(filesystem_storage, make_user, api_client_for, client):
    api = api_client_for(make_user("alice"))
    [upload] = create(api, ("a.bin", 10))
    url = upload["urls"][0]["url"]
    token = url.rstrip("/").rsplit("/", 1)[1]
    forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    assert put(client, f"/store/incoming/{forged}", b"0123456789") == 403
    assert client.get(url).status_code == 405
    no_length = client.generic("PUT", url, b"", content_type="application/octet-stream")
    assert no_length.status_code in (400, 411)


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(
    st.none(), st.text(max_size=20), st.integers(), st.lists(st.integers(-3, 3), max_size=3),
    st.fixed_dictionaries({"files": st.lists(st.fixed_dictionaries(
        {"filename": st.text(max_size=30), "size": st.one_of(st.none(), st.integers(-5, 2**63 + 5), st.text(max_size=5))}),
        max_size=3)}),
    st.fixed_dictionaries({"parts": st.lists(st.one_of(
        st.integers(-2, 20_000), st.booleans(), st.text(max_size=3),
        st.fixed_dictionaries({"number": st.integers(-2, 20_000), "size": st.integers(-2, 2**40)})), max_size=4)}),
    st.fixed_dictionaries({"uploads": st.lists(st.one_of(st.uuids().map(str), st.text(max_size=8)), max_size=3)}),
    st.fixed_dictionaries({"direct": st.lists(st.one_of(st.uuids().map(str), st.integers()), max_size=3)}),
))
def test_no_request_body_makes_a_direct_upload_endpoint_fail(api_client_for, body):
    """Generated bodies for every direct-upload endpoint (and the claim):
    never a 5xx, errors in the API's shape."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.get_or_create(username="fuzz")[0]  # the examples share one
    Token.objects.get_or_create(user=user)
    client = api_client_for(user)
    open_upload = DirectUpload.objects.filter(owner=user, state="open").first()
    upload_id = str(open_upload.id) if open_upload else create(client, ("a.bin", 10))[0]["id"]
    for url in ("/api/uploads/direct/", f"/api/uploads/direct/{upload_id}/parts/", "/api/uploads/direct/complete/",
                "/api/uploads/"):
        assert_no_5xx_and_error_shape(client.post(url, body, format="json"), f"POST {url} {body!r}")


def test_storage_setup_lets_the_sites_pages_upload_into_the_bucket_and_play_from_it(s3_storage, settings):
    """The CORS rule a browser asks for before a cross-origin PUT (and the
    player's GETs): for the site's origins, and nobody else's."""
    from django.core.management import call_command

    settings.FAIRLANE_UPLOAD_CORS_ORIGINS = ["http://fairlane.example:8000"]
    call_command("storage_setup")
    assert direct.store.cors_origins() == ["http://fairlane.example:8000"]
    url = f"{s3_storage['FAIRLANE_S3_ENDPOINT']}/{s3_storage['FAIRLANE_S3_BUCKET']}/uploads/x"

    def preflight(origin: str, method: str) -> int:
        request = urllib.request.Request(url, method="OPTIONS", headers={
            "Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "if-none-match"})
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                assert resp.headers["Access-Control-Allow-Origin"] == origin
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert preflight("http://fairlane.example:8000", "PUT") == 200
    assert preflight("http://fairlane.example:8000", "GET") == 200
    assert preflight("http://elsewhere.example", "PUT") == 403
