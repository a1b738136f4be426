"""The upload page and a batch's page with a 2,000-file batch (rows created
in the database: what is tested is the page, not 2,000 transcodes): the
batch as one row with its progress, counts and an estimate said to be one;
files in pages of 50 (older, newer), filtered by status and searched by
name; cancel, retry and delete from the page; and what live updates cost
at that size (printed, for docs/benchmarks.md)."""
from __future__ import annotations

import time
import uuid

import pytest
from playwright.sync_api import expect

from uploads.models import Batch, Job, Upload

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
FILES = 2000
FAILED, QUEUED = 20, 480  # the rest succeeded


def seed_batch(owner) -> Batch:
    batch = Batch.objects.create(owner=owner)
    uploads = Upload.objects.bulk_create(
        Upload(owner=owner, batch=batch.id, filename=f"file-{i:05d}.mp4", file=f"uploads/seed/{i}", size=1_000_000)
        for i in range(FILES))
    statuses = [Job.Status.FAILED] * FAILED + [Job.Status.QUEUED] * QUEUED
    statuses += [Job.Status.SUCCEEDED] * (FILES - len(statuses))
    Job.objects.bulk_create(
        Job(upload=u, owner=owner, lane="cpu-transcode", kind=Job.Kind.VIDEO, status=s, cost_estimate=2.0,
            progress=100 if s == Job.Status.SUCCEEDED else 0,
            error_code="decode_failed" if s == Job.Status.FAILED else "",
            error_message="The file could not be decoded." if s == Job.Status.FAILED else "")
        for u, s in zip(uploads, statuses))
    return batch


def test_a_2000_file_batch_pages_filters_searches_and_acts(
    make_person, page, site_login, screenshot, cpu_lane_paused, api_client_for
):
    erin = make_person("erin")
    batch = seed_batch(erin)
    site_login(page, erin)

    row = page.locator(f"#batch-{batch.id}")
    expect(row).to_contain_text(f"{FILES}")
    expect(row).to_contain_text(f"{FILES - FAILED - QUEUED} succeeded · {FAILED} failed · {QUEUED} queued")
    expect(row.locator("td.finish")).to_contain_text("estimate")
    expect(row.locator("td.finish")).to_contain_text("about ")
    files = page.locator("#jobs tbody tr")
    expect(files).to_have_count(50)
    screenshot(page, "upload-page-2000")

    # Pages of 50, older and back.
    first = files.first.locator("td").first.inner_text()
    page.click("#next")
    expect(files.first.locator("td").first).not_to_have_text(first)
    expect(files).to_have_count(50)
    page.click("#prev")
    expect(files.first.locator("td").first).to_have_text(first)

    # Filter and search.
    page.select_option("#status-filter", "failed")
    expect(files).to_have_count(FAILED)
    expect(page.locator("#next")).to_be_disabled()
    page.select_option("#status-filter", "")
    page.fill("#search", "FILE-01999")
    expect(files).to_have_count(1)
    expect(files.first).to_contain_text("file-01999.mp4")
    page.fill("#search", "")
    expect(files).to_have_count(50)

    # Actions on one file: retry a failed one, cancel a queued one, delete one.
    failed = Job.objects.filter(upload__batch=batch.id, status=Job.Status.FAILED).first()
    queued = Job.objects.filter(upload__batch=batch.id, status=Job.Status.QUEUED).first()
    page.fill("#search", failed.upload.filename)
    expect(files).to_have_count(1)
    expect(files.first).to_contain_text(failed.upload.filename)
    files.first.locator("button.act-retry").click()
    expect(files.first.locator("td").nth(2)).to_have_text("queued")
    page.fill("#search", queued.upload.filename)
    expect(files).to_have_count(1)
    expect(files.first).to_contain_text(queued.upload.filename)
    files.first.locator("button.act-cancel").click()
    expect(files.first.locator("td").nth(2)).to_contain_text("canceled")
    page.once("dialog", lambda dialog: dialog.accept())
    files.first.locator("button.act-delete").click()
    expect(files).to_have_count(0)
    assert not Upload.objects.filter(id=queued.upload_id).exists()
    expect(row).to_contain_text(f"{FILES - 1}")

    # The batch's own page: the same batch, its files only; cancel the rest.
    page.fill("#search", "")
    row.locator("a").first.click()
    expect(page).to_have_url(f"/batches/{batch.id}/")
    expect(page.locator(f"#batch-{batch.id}")).to_contain_text(f"{QUEUED} queued")
    expect(page.locator("#jobs tbody tr")).to_have_count(50)
    page.locator(f"#batch-{batch.id} button.batch-cancel").click()
    expect(page.locator(f"#batch-{batch.id}")).to_contain_text("done")
    assert not Job.objects.filter(upload__batch=batch.id, status=Job.Status.QUEUED).exists()
    screenshot(page, "batch-page")

    # What the live updates cost at 2,000 files (one request each, in-process).
    client = api_client_for(erin)
    url = f"/api/jobs/?batch={batch.id}&page_size=50"
    etag = client.get(url)["ETag"]
    costs = {}
    for name, call in [("jobs page, 200", lambda: client.get(url)),
                       ("jobs page, 304", lambda: client.get(url, HTTP_IF_NONE_MATCH=etag)),
                       ("batches list, 200", lambda: client.get("/api/batches/?page_size=10"))]:
        call()
        started = time.perf_counter()
        for _ in range(20):
            call()
        costs[name] = (time.perf_counter() - started) / 20 * 1000
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    print("live update cost at 2,000 files (ms per request):", {k: round(v, 1) for k, v in costs.items()})


def test_a_batch_page_is_only_for_its_owner(make_user, client):
    owner, other = make_user("owner"), make_user("other")
    batch = Batch.objects.create(owner=owner)
    client.force_login(other)
    assert client.get(f"/batches/{batch.id}/").status_code == 404
    assert client.get(f"/batches/{uuid.uuid4()}/").status_code == 404
    client.force_login(owner)
    assert client.get(f"/batches/{batch.id}/").status_code == 200
