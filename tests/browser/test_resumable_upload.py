"""The upload page sends files straight into storage (uploads/static/uploads/
uploader.js): several at once as one batch with one claim, and a large file
picks up after the page is reloaded half-way, sending only the parts the
store does not have. With object storage the parts go to the store itself
(the bucket's CORS rule lets the page's origin PUT), never to the web."""
from __future__ import annotations

import os
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Request, Route, expect

import media
from media import direct as store
from tests.promise import wait_for
from uploads.models import DirectUpload, Job, Upload

# e2e too: the zero-setup slice runs the page against files on disk as the full run does against S3.
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PART = 5 * 1024 * 1024  # the smallest part size the API signs
PARTS = 8  # twice the page's parallel PUTs (uploader.js), so the second half is held
SIZE = PARTS * PART - 4321  # the last part short


@pytest.fixture
def store_allows_the_page(live_server, settings):
    """The bucket lets the live server's pages PUT (what `manage.py
    storage_setup` does for the site's own origin)."""
    settings.FAIRLANE_UPLOAD_PART_BYTES = PART
    store.configure_cors([live_server.url])


def _part_number(url: str) -> int:
    """The part a PUT sends: the presigned URL's partNumber on object
    storage, the signed token's on disk."""
    query = parse_qs(urlsplit(url).query)
    if "partNumber" in query:
        return int(query["partNumber"][0])
    allowed = store.incoming(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    assert allowed is not None, url
    return allowed.number


def part_puts(page) -> list[Request]:
    """Every part the page sends: PUTs to the store or to /store/incoming/."""
    sent: list[Request] = []
    page.on("request", lambda r: sent.append(r) if r.method == "PUT" else None)
    return sent


def test_several_files_go_up_at_once_and_become_one_batch_in_one_claim(
        make_person, page, site_login, screenshot, store_allows_the_page, cpu_lane_paused, tmp_path, live_server):
    files = []
    for i in range(3):
        path = tmp_path / f"scan-{i}.png"
        path.write_bytes(os.urandom(100_000 + i))
        files.append(path)
    api_calls: list[str] = []
    page.on("request", lambda r: api_calls.append(f"{r.method} {r.url}") if "/api/uploads/" in r.url else None)
    sent = part_puts(page)
    erin = make_person("erin")
    site_login(page, erin)
    page.set_input_files("#picker", [str(p) for p in files])
    expect(page.locator("#sending .batch-status")).to_have_text("3 file(s) accepted.", timeout=30_000)
    screenshot(page, "upload-direct-batch")

    assert len(sent) == 3
    # straight to the store with object storage, to this site's /store/incoming/ on disk
    web = [r for r in sent if r.url.startswith(live_server.url)]
    assert len(web) == (0 if media.uses_object_storage() else 3)
    creates = [c for c in api_calls if re.match(r"POST .*/api/uploads/direct/$", c)]
    claims = [c for c in api_calls if re.match(r"POST .*/api/uploads/$", c)]
    assert (len(creates), len(claims)) == (1, 1), api_calls
    uploads = Upload.objects.filter(owner=erin)
    assert len({u.batch for u in uploads}) == 1 and uploads.count() == 3
    for path in files:
        stored = uploads.get(filename=path.name)
        assert media.read_bytes(stored.file.name) == path.read_bytes()
    assert Job.objects.filter(upload__owner=erin).count() == 3
    assert not DirectUpload.objects.exists()


def test_a_large_file_resumes_after_the_page_is_reloaded_half_way(
        make_person, page, site_login, screenshot, store_allows_the_page, cpu_lane_paused, tmp_path):
    data = os.urandom(SIZE)
    path = tmp_path / "holiday.mov"
    path.write_bytes(data)
    held: list[Route] = []
    stalled = [True]
    answers: list[str] = []  # every PUT's outcome, for the message if half is never stored
    page.on("response", lambda r: answers.append(f"part {_part_number(r.url)}: {r.status}")
            if r.request.method == "PUT" else None)
    page.on("requestfailed", lambda r: answers.append(f"part {_part_number(r.url)}: {r.failure}")
            if r.method == "PUT" else None)

    def half_then_hold(route: Route) -> None:
        # The connection stalls from half way (the person reloads): the second
        # half's parts are held, the first half's go through, a retried one too.
        if stalled[0] and _part_number(route.request.url) > PARTS // 2:
            held.append(route)
            return
        route.continue_()

    page.route(re.compile(r".*"), lambda route: half_then_hold(route) if route.request.method == "PUT"
               else route.continue_())
    dana = make_person("dana")
    site_login(page, dana)
    page.set_input_files("#picker", str(path))
    upload_row = []

    def half_stored() -> bool:
        # Kept once the store's multipart upload is recorded: the row is
        # committed first, its multipart id a store call later (a row read in
        # between has none, and its parts would never be listed).
        if not upload_row:
            upload_row.extend(DirectUpload.objects.filter(owner=dana).exclude(multipart_id=""))
        return bool(held) and bool(upload_row) and len(
            store.stored_parts(upload_row[0].key, upload_row[0].multipart_id)) >= PARTS // 2

    # Playwright's sync API hands routes over only inside its own calls: wait in them.
    for _ in range(1800):
        if half_stored():
            break
        page.wait_for_timeout(100)
    assert half_stored(), f"the page did not send half of the file within 180 s; its PUTs: {answers}"
    upload = upload_row[0]

    for route in held:  # the stalled connections drop
        route.abort("connectionreset")
    page.reload()
    stalled[0] = False
    # What the store has now is what survived the reload (a part on its way then is lost with it).
    before = len(store.stored_parts(upload.key, upload.multipart_id))
    assert PARTS // 2 <= before < PARTS, before  # about half way
    sent_after = part_puts(page)
    page.set_input_files("#picker", str(path))  # the same file again: the page finds its upload
    expect(page.locator("#sending .batch-status")).to_have_text("1 file(s) accepted.", timeout=60_000)
    expect(page.locator("#sending progress")).to_have_js_property("value", SIZE)
    screenshot(page, "upload-resumed")

    assert len(sent_after) == PARTS - before, [r.url for r in sent_after]  # only what the store lacked
    stored = Upload.objects.get(owner=dana)
    assert stored.filename == "holiday.mov" and stored.size == SIZE and stored.file.name == upload.key
    assert media.read_bytes(stored.file.name) == data
    assert Job.objects.get(upload=stored).status == Job.Status.QUEUED
