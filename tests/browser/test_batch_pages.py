"""The upload page and a batch's page with a 2,000-file batch (rows created
in the database: what is tested is the page, not 2,000 transcodes): the
batch as one row with its progress (bar and words: files ended), counts and
an estimate said to be one, with its range;
files in pages of 50 (older, newer), filtered by status and searched by
name; cancel, retry and delete from the page; and what live updates cost
at that size (printed, for docs/benchmarks.md)."""
from __future__ import annotations

import re
import time
import uuid

import pytest
from playwright.sync_api import expect

from uploads.models import Batch, Job, Upload

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
FILES = 2000
FAILED, QUEUED = 20, 480  # the rest succeeded


def seed_batch(owner) -> Batch:
    batch = Batch.objects.create(owner=owner, name="file-00000.mp4 and 1,999 more")
    uploads = Upload.objects.bulk_create(
        Upload(owner=owner, batch=batch.id, filename=f"file-{i:05d}.mp4", file=f"uploads/seed/{i}", size=1_000_000)
        for i in range(FILES))
    statuses = [Job.Status.FAILED] * FAILED + [Job.Status.QUEUED] * QUEUED
    statuses += [Job.Status.SUCCEEDED] * (FILES - len(statuses))
    Job.objects.bulk_create(
        Job(upload=u, owner=owner, lane="cpu-transcode", kind=Job.Kind.VIDEO, status=s, cost_estimate=2.0,
            progress=100 if s == Job.Status.SUCCEEDED else 0, wait_ms=179_171 if s == Job.Status.SUCCEEDED else None,
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
    expect(row.locator("td.sent a")).to_have_text("file-00000.mp4 and 1,999 more")  # named, and when it was sent
    expect(row).to_contain_text("2,000")
    expect(row).to_contain_text(f"1,500 succeeded · {FAILED} failed · {QUEUED} queued")
    expect(row.locator("td.finish")).to_contain_text("estimate")
    expect(row.locator("td.finish")).to_contain_text("about ")
    # The estimate says its range: nothing measured yet, so a wide one ("3–11 min").
    expect(row.locator("td.finish .range")).to_have_text(re.compile(r"^\s*\((about \d+|\d+( s| min)?–\d+) (s|min)\)$"))
    # The bar and its words count the same: files ended (1,500 succeeded and 20 failed), not work done.
    expect(row.locator("td.progress")).to_contain_text("1,520 of 2,000 ended")
    expect(row.locator("td.progress progress")).to_have_js_property("max", FILES)
    expect(row.locator("td.progress progress")).to_have_js_property("value", 1500 + FAILED)
    files = page.locator("#jobs tbody tr")
    expect(files).to_have_count(50)
    summary = page.locator("#files-summary")
    expect(summary).to_have_text("2,000 files · page 1 of 40")
    screenshot(page, "upload-page-2000")
    # Waits in words, and no time or wait broken over two lines, on a laptop's screen too.
    page.set_viewport_size({"width": 1366, "height": 768})
    done = page.locator("#jobs tbody tr", has=page.locator("td.status-succeeded")).first
    expect(done.locator("td.wait")).to_have_text("2 min 59 s")
    assert_one_line(page, [row.locator("td.sent time"), row.locator("td.finish span.at"),
                           row.locator("td.finish span.range"), done.locator("td.wait")])
    screenshot(page, "upload-page-2000-1366")
    page.set_viewport_size({"width": 1920, "height": 1000})

    # Pages of 50, older and back.
    first = files.first.locator("td").first.inner_text()
    page.click("#next")
    expect(files.first.locator("td").first).not_to_have_text(first)
    expect(files).to_have_count(50)
    expect(summary).to_have_text("2,000 files · page 2 of 40")
    page.click("#prev")
    expect(files.first.locator("td").first).to_have_text(first)
    expect(summary).to_have_text("2,000 files · page 1 of 40")

    # Filter and search; a filter that matches nothing says so.
    page.select_option("#status-filter", "failed")
    expect(files).to_have_count(FAILED)
    expect(summary).to_have_text(f"{FAILED} matching files")
    expect(page.locator("#next")).to_be_disabled()
    page.select_option("#status-filter", "running")
    expect(files).to_have_count(1)
    expect(files.first.locator("td.empty")).to_have_text("No file matches this status or name.")
    expect(summary).to_have_text("0 matching files")
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
    expect(files.locator("td.empty")).to_have_text("No file matches this status or name.")
    assert not Upload.objects.filter(id=queued.upload_id).exists()
    expect(row).to_contain_text("1,999")

    # The batch's own page: the same batch, its files only; cancel the rest.
    page.fill("#search", "")
    row.locator("a").first.click()
    expect(page).to_have_url(f"/batches/{batch.id}/")
    expect(page.locator(f"#batch-{batch.id}")).to_contain_text(f"{QUEUED} queued")
    expect(page.locator("#jobs tbody tr")).to_have_count(50)
    page.locator(f"#batch-{batch.id} button.batch-cancel").click()
    # One request cancels the 480 queued jobs, each ended as its own
    # transaction: seconds on a quiet machine, over 10 s on a loaded one.
    expect(page.locator(f"#batch-{batch.id}")).to_contain_text("done", timeout=90_000)
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


def assert_one_line(page, locators) -> None:
    """Each element's text stands on one line ("22.6 s" and "12:02 PM" wrapped
    in narrow columns): its text's boxes all share one top."""
    for locator in locators:
        tops = locator.evaluate("e => { const r = document.createRange(); r.selectNodeContents(e);"
                                " return [...r.getClientRects()].map(b => Math.round(b.top)); }")
        assert tops and len(set(tops)) == 1, (locator, locator.inner_text(), tops)


def test_during_a_flood_the_page_shows_what_moves_above_the_newest_first_list(
    make_person, page, site_login, screenshot, cpu_lane_paused
):
    """Files run oldest first while the list is newest first: its first
    pages are all queued. Above it, the running files and the last to end."""
    from datetime import timedelta

    from django.utils import timezone

    fay = make_person("fay")
    batch = Batch.objects.create(owner=fay, name="A flood of 300")
    uploads = Upload.objects.bulk_create(
        Upload(owner=fay, batch=batch.id, filename=f"clip-{i:03d}.mp4", file=f"uploads/seed/{i}", size=1_000_000)
        for i in range(300))
    now = timezone.now()
    # The oldest five ended, the next two run, the rest wait (the order the dispatcher takes them).
    statuses = [Job.Status.SUCCEEDED] * 4 + [Job.Status.FAILED] + [Job.Status.RUNNING] * 2
    jobs = Job.objects.bulk_create(
        Job(upload=u, owner=fay, lane="cpu-transcode", kind=Job.Kind.VIDEO if i < 7 else Job.Kind.UNKNOWN,
            status=statuses[i] if i < len(statuses) else Job.Status.QUEUED,
            progress={5: 40, 6: 10}.get(i, 100 if i < 5 else 0),
            started_at=now - timedelta(seconds=60 - 5 * i) if i < 7 else None,
            finished_at=now - timedelta(seconds=30 - 5 * i) if i < 5 else None,
            wait_ms=22_600 if i < 7 else None,
            error_code="decode_failed" if i == 4 else "", error_message="Broken." if i == 4 else "")
        for i, u in enumerate(uploads))
    for i, job in enumerate(jobs):  # created in upload order, a millisecond apart
        Job.objects.filter(id=job.id).update(created_at=now - timedelta(seconds=120) + timedelta(milliseconds=i))
    site_login(page, fay)

    moving = page.locator("#moving")
    expect(moving).to_be_visible()
    expect(page.locator("#moving-summary")).to_have_text(
        "2 running, 293 waiting (your files run oldest first); below them, the latest to end.")
    rows = moving.locator("tbody tr")
    expect(rows.locator("td:first-child")).to_have_text(
        ["clip-005.mp4", "clip-006.mp4", "clip-004.mp4", "clip-003.mp4", "clip-002.mp4", "clip-001.mp4",
         "clip-000.mp4"])
    expect(rows.nth(0).locator("td").nth(2)).to_have_text("running")
    expect(rows.nth(2).locator("td").nth(2)).to_have_text("failed")
    expect(rows.nth(0).locator("td").nth(4)).to_contain_text("started")
    expect(rows.nth(2).locator("td").nth(4)).to_contain_text("ended")
    # The list itself keeps newest first: queued files whose kind is not known yet.
    files = page.locator("#jobs tbody tr")
    expect(files.first.locator("td").first).to_have_text("clip-299.mp4")
    expect(files.first.locator("td").nth(1)).to_have_text("not known yet")
    expect(page.locator("#files-summary")).to_have_text("300 files · page 1 of 6")
    screenshot(page, "upload-page-flood")

    # Once nothing runs or waits, the strip goes: the list says it all.
    Job.objects.filter(owner=fay, status__in=[Job.Status.QUEUED, Job.Status.RUNNING]).update(
        status=Job.Status.CANCELED, finished_at=timezone.now())
    expect(moving).to_be_hidden(timeout=15_000)


def test_a_batch_is_renamed_and_exported_from_its_page(
    workers, make_person, page, site_login, screenshot, api_client_for, wait_terminal, tmp_path
):
    import zipfile
    from io import BytesIO

    from PIL import Image

    from tests.media import make_video

    gail = make_person("gail")
    client = api_client_for(gail)
    Image.new("RGB", (320, 240), (30, 120, 200)).save(tmp_path / "photo.png")
    files = [tmp_path / "photo.png", make_video(tmp_path / "clip.mp4", seconds=1)]
    handles = [open(path, "rb") for path in files]  # noqa: SIM115 (closed below)
    try:
        accepted = client.post("/api/uploads/", {"file": handles}, format="multipart").json()
    finally:
        for handle in handles:
            handle.close()
    for upload in accepted["uploads"]:
        assert wait_terminal(client, upload["job"]["url"])["status"] == "succeeded"
    batch_id = accepted["batch"]

    site_login(page, gail)
    row = page.locator(f"#batch-{batch_id}")
    expect(row.locator("td.sent a")).to_have_text("photo.png and 1 more")  # named after its first file
    row.locator("td.sent a").click()
    expect(page.locator("#batch-name")).to_have_text("photo.png and 1 more")
    page.click("#rename-open")
    page.fill("#rename input[name=name]", "  Summer   trip ")
    page.click("#rename button[type=submit]")
    expect(page.locator("#batch-name")).to_have_text("Summer trip")
    expect(page.locator(f"#batch-{batch_id} td.sent a")).to_have_text("Summer trip")
    expect(page).to_have_title("Summer trip · Fairlane")
    assert Batch.objects.get(id=batch_id).name == "Summer trip"

    expect(page.locator("#export-rows td.empty")).to_have_text("No export yet.")
    page.click("#export")
    export_row = page.locator("#export-rows tbody tr").first
    expect(export_row.locator("a.zip")).to_have_text("Download ZIP", timeout=60_000)  # progress, then the link
    expect(export_row.locator("td").nth(1)).to_have_text("succeeded")
    expect(export_row.locator("progress")).to_have_js_property("value", 100)
    zip_bytes = page.request.get(export_row.locator("a.zip").get_attribute("href")).body()
    with zipfile.ZipFile(BytesIO(zip_bytes)) as archive:
        names = archive.namelist()
    assert any(n.startswith("photo.png-") for n in names) and any(n.endswith("/storyboard.vtt") for n in names)
    screenshot(page, "batch-export")
