"""A large file sent from the upload page survives a dropped connection: the
connection is cut at half way (the chunk reached the server, its answer did
not), tus-js-client asks the server where the upload stands and sends the
rest from there; nothing is sent twice and the stored file is the file."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import Route, expect

import media
from uploads.models import Job, ResumableUpload, Upload

# e2e too: the zero-setup slice checks the file lands on disk as the full run checks S3.
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHUNK = 256 * 1024
SIZE = 16 * CHUNK + 1234  # 17 chunks, the last one short


def test_a_connection_cut_at_half_way_resumes_where_it_stopped(
    make_person, page, site_login, screenshot, settings, cpu_lane_paused, tmp_path
):
    settings.FAIRLANE_RESUMABLE_CHUNK_BYTES = CHUNK
    data = os.urandom(SIZE)
    (tmp_path / "holiday.mov").write_bytes(data)
    requests: list[tuple[str, int]] = []  # (method, Upload-Offset sent)
    cut: list[int] = []

    def tus(route: Route) -> None:
        request = route.request
        offset = int(request.headers.get("upload-offset", "-1"))
        requests.append((request.method, offset))
        if request.method == "PATCH" and not cut and offset >= SIZE // 2:
            cut.append(offset)
            route.fetch()  # the server takes the chunk...
            route.abort("connectionreset")  # ...and the connection drops before its answer arrives
            return
        route.continue_()

    page.route("**/api/uploads/resumable/**", tus)
    dana = make_person("dana")
    site_login(page, dana)
    page.set_input_files("#picker", str(tmp_path / "holiday.mov"))
    expect(page.locator("#sending .batch-status")).to_have_text("1 file(s) accepted.", timeout=30_000)
    expect(page.locator("#sending progress")).to_have_js_property("value", SIZE)
    screenshot(page, "upload-resumed")

    patches = [offset for method, offset in requests if method == "PATCH"]
    # Chunk after chunk up to the cut, then a HEAD (where does the upload
    # stand?), then on from the end of the chunk the server had taken.
    assert patches == [i * CHUNK for i in range(17)], patches
    after_cut = requests[requests.index(("PATCH", cut[0])) + 1]
    assert after_cut[0] == "HEAD", requests
    assert cut[0] >= SIZE // 2 and cut[0] < SIZE // 2 + CHUNK

    upload = Upload.objects.get(owner=dana)
    assert upload.filename == "holiday.mov" and upload.size == SIZE
    assert media.read_bytes(upload.file.name) == data
    assert Job.objects.get(upload=upload).status == Job.Status.QUEUED
    assert not ResumableUpload.objects.exists()
