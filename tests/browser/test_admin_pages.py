"""Every admin page at 1,366 px (a common laptop screen): nothing wider than
the window, the fairness link laid out like the other index entries, and
records the system writes (jobs, their attempts and outputs, deliveries,
events) read-only, with actions for what an operator may do. Each page is
screenshotted (test-artifacts/screenshots/admin-1366-*.png)."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LAPTOP = {"width": 1366, "height": 768}
LONG_NAME = "IMG_20261126_143107_holiday-at-the-lake-with-the-whole-family-and-the-dog.mp4"


@pytest.fixture
def records(make_person):
    """One of each record the admin lists, as the system writes them: a
    finished job with attempts and outputs, a failed one, a chunked video
    with its parts, an export, a webhook delivery that failed twice and an
    email that went out, a given-up job ending, a task result."""
    from django_celery_results.models import TaskResult

    from notify.models import ChannelPreference, Delivery, DeliveryAttempt, Endpoint, Event, JobEnding
    from organisations import members_move, organisation_create
    from uploads.models import Job, JobAttempt, Output, Profile, Upload

    alice = make_person("alice")
    Profile.objects.create(user=alice, weight=2.0, transcode_cap=4)
    # An organisation of several people (alice's page shows it; the others
    # stay in their organisations of one).
    studio = organisation_create(name="Northwind Post-Production Studio", transcode_weight=3.0, transcode_cap=12,
                                 notify_rate_per_s=20.0)
    members_move(user_ids=[alice.pk, *(make_person(f"editor-{i:02}").pk for i in range(1, 25))],
                 organisation=studio)
    now = timezone.now()
    batch = uuid.uuid4()

    def job(filename: str, **fields) -> Job:
        upload = Upload.objects.create(owner=alice, batch=batch, filename=filename, file=f"uploads/{uuid.uuid4()}",
                                       size=48_213_904)
        return Job.objects.create(upload=upload, owner=alice, lane="cpu-transcode", **fields)

    done = job(LONG_NAME, kind="video", status="succeeded", progress=100, attempts=1, wait_ms=179_171,
               process_ms=8_412, queued_at=now, started_at=now + timedelta(seconds=179),
               finished_at=now + timedelta(seconds=187), task_id="x@1")
    JobAttempt.objects.create(job=done, number=1, worker="cpu@host-a/4242", started_at=done.started_at,
                              finished_at=done.finished_at, outcome="succeeded", task_id="x@1")
    for name, content_type in (("hls", "application/vnd.apple.mpegurl"), ("mp4", "video/mp4"),
                               ("poster", "image/jpeg")):
        Output.objects.create(job=done, name=name, file=f"outputs/{done.id}/1/{name}", content_type=content_type,
                              size=1_234_567)
    failed = job("scan.pdf", kind="pdf", status="failed", attempts=2, error_code="resource_limit",
                 error_message="The file needs more memory than a decoder may use.", finished_at=now)
    for number, outcome in ((1, "lost"), (2, "failed")):
        JobAttempt.objects.create(job=failed, number=number, worker="cpu@host-b/7", started_at=now,
                                  finished_at=now, outcome=outcome, error_code="resource_limit")
    parent = job("long-concert.mov", kind="video", status="running", progress=40, attempts=1, started_at=now)
    for part, index, status in (("chunk", 0, "succeeded"), ("chunk", 1, "running"), ("audio", 0, "queued")):
        Job.objects.create(parent=parent, owner=alice, lane="cpu-transcode", kind="video", part=part,
                           part_index=index, status=status)
    Job.objects.create(owner=alice, lane="cpu-transcode", kind="export", batch=batch, status="queued")

    endpoint = Endpoint.objects.create(owner=alice, url="https://hooks.example.com/fairlane/jobs", secret="s",
                                       events=["job.succeeded"])
    event = Event.objects.create(owner=alice, type="job.succeeded", key=f"job.succeeded:{done.id}", job_id=done.id,
                                 batch=batch, payload={"type": "job.succeeded"})
    webhook = Delivery.objects.create(event=event, channel="webhook", endpoint=endpoint, status="failed",
                                      attempts=2, seq=2, last_status_code=503, last_error="")
    for number in (1, 2):
        DeliveryAttempt.objects.create(delivery=webhook, number=number, started_at=now, latency_ms=41,
                                       status_code=503, outcome="retry" if number == 1 else "failed",
                                       response_prefix="Service Unavailable")
    Delivery.objects.create(event=event, channel="email", recipient=alice.email, status="succeeded", attempts=1,
                            delivered_at=now)
    JobEnding.objects.create(job_id=failed.id, finished_at=now, job_status="failed", status="failed", tries=4,
                             error_code="KeyError", given_up_at=now)
    ChannelPreference.objects.create(user=alice, channel="email", events=["batch.completed"])
    TaskResult.objects.create(task_id=f"{done.id}@1764168000123456", task_name="transcoding.job_run",
                              status="SUCCESS", worker="cpu@worker-host-a.example.internal")
    return {"done": done, "failed": failed, "parent": parent, "batch": batch, "webhook": webhook,
            "organisation": studio}


def _admin_pages(records: dict) -> list[tuple[str, str]]:
    """(name, URL) of the index, the fairness page, every registered
    model's list and the page of its first row, and the pages of a
    finished, a failed and a chunked job and of a failed delivery."""
    job_page, delivery_page = "admin:uploads_job_change", "admin:notify_delivery_change"
    pages = [("index", reverse("admin:index")), ("fairness", reverse("admin-fairness")),
             ("job-done", reverse(job_page, args=[records["done"].id])),
             ("job-failed", reverse(job_page, args=[records["failed"].id])),
             ("job-chunked", reverse(job_page, args=[records["parent"].id])),
             ("delivery-failed", reverse(delivery_page, args=[records["webhook"].id])),
             ("organisation-of-25", reverse("admin:organisations_organisation_change",
                                            args=[records["organisation"].pk]))]
    for model in sorted(admin.site._registry, key=lambda m: m._meta.label):
        opts = model._meta
        name = f"{opts.app_label}-{opts.model_name}"
        pages.append((f"{name}-list", reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages.append((name, reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk])))
    return pages


# What is wider than its box: the page itself, or a box that scrolls
# sideways (the admin's lists scroll inside theirs instead of widening the page).
_OVERFLOWS = """() => [document.documentElement, ...document.querySelectorAll('#container *')]
    .filter(e => e === document.documentElement || e.tagName !== 'SELECT'  // a list box scrolls by nature
                 && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX))
    .filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`)"""


@pytest.fixture
def laptop(browser, live_server, make_person, admin_login) -> Page:
    """A superuser's admin session in a 1,366 x 768 window."""
    context = browser.new_context(base_url=live_server.url, viewport=LAPTOP)
    context.set_default_timeout(10_000)
    page = context.new_page()
    admin_login(page, make_person("olga", staff=True))
    yield page
    context.close()


def test_every_admin_page_fits_a_1366_px_window(records, laptop, screenshot):
    too_wide = {}
    for name, url in _admin_pages(records):
        response = laptop.goto(url)
        assert response.status == 200, f"{url}: {response.status}"
        screenshot(laptop, f"admin-1366-{name}")
        if overflows := laptop.evaluate(_OVERFLOWS):
            too_wide[url] = overflows
    assert not too_wide, f"wider than {LAPTOP['width']} px: {too_wide}"


def test_the_fairness_link_is_laid_out_like_the_other_index_entries(laptop):
    laptop.goto(reverse("admin:index"))
    link = laptop.locator("#fair-dispatch-link a", has_text="Fair dispatch")
    other = laptop.locator(".app-uploads a", has_text="Jobs").first
    expect(link).to_be_visible()
    # One line of text, as tall as a model's link in the app lists beside it.
    assert link.bounding_box()["height"] <= other.bounding_box()["height"] + 2
    assert laptop.locator("#fair-dispatch-link").bounding_box()["width"] == pytest.approx(
        laptop.locator(".app-uploads").bounding_box()["width"], abs=2)


def test_the_index_spells_every_plural_right(laptop):
    laptop.goto(reverse("admin:index"))
    names = laptop.locator("#content-main th[scope=row] a").all_inner_texts()
    assert "Deliveries" in names and not [n for n in names if n.endswith(("ys", "sss"))], names


def test_the_job_list_shows_short_ids_as_links_one_line_per_job(records, laptop, screenshot):
    laptop.goto(reverse("admin:uploads_job_changelist"))
    done = records["done"]
    row = laptop.locator("#result_list tbody tr", has=laptop.locator(f"input.action-select[value='{done.id}']"))
    link = row.locator("th a, td a").first
    expect(link).to_have_text(str(done.id)[:8])
    expect(link).to_have_attribute("href", reverse("admin:uploads_job_change", args=[done.id]))
    heights = {r.bounding_box()["height"] for r in laptop.locator("#result_list tbody tr").all()}
    assert max(heights) < 40, f"rows of {sorted(heights)} px: some cell wraps"
    expect(row).to_contain_text("2 min 59 s")  # waited, in human units
    screenshot(laptop, "admin-1366-job-list-rows")


@pytest.mark.parametrize("model", ["uploads.job", "uploads.upload", "notify.delivery", "notify.event",
                                   "notify.jobending"])
def test_records_the_system_writes_have_no_add_and_no_save(records, laptop, model):
    app_label, model_name = model.split(".")
    laptop.goto(reverse(f"admin:{app_label}_{model_name}_changelist"))
    expect(laptop.locator("#content-main")).to_be_visible()
    expect(laptop.locator(".object-tools a.addlink")).to_have_count(0)
    laptop.locator("#result_list tbody tr").first.locator("th a").click()
    expect(laptop.locator("#content-main")).to_be_visible()
    expect(laptop.locator("input[type=submit], button[type=submit]").filter(has_text="Save")).to_have_count(0)
    expect(laptop.locator("input[name=_save], input[name=_continue], input[name=_addanother]")).to_have_count(0)
    # No "Add another ..." under the inlines (the admin's script keeps a hidden one).
    expect(laptop.locator("#content-main .add-row:visible, #content-main a.addlink:visible")).to_have_count(0)


def test_a_jobs_page_shows_its_batch_and_offers_retry(records, laptop, screenshot):
    failed = records["failed"]
    laptop.goto(reverse("admin:uploads_job_change", args=[failed.id]))
    batch = laptop.locator(".field-batch_link")
    expect(batch.get_by_role("link")).to_have_text(str(records["batch"])[:8])
    expect(laptop.locator(".field-batch")).to_have_count(0)  # the export's own field, empty on a file's job
    screenshot(laptop, "admin-1366-job-failed")
    laptop.get_by_role("button", name="Retry").click()
    expect(laptop.locator("#content")).to_contain_text("Retry 1 job?")
    expect(laptop.locator("#content")).to_contain_text("alice: 1")
    # The batch's link lists its jobs.
    laptop.go_back()
    batch.get_by_role("link").click()
    expect(laptop.locator("#result_list tbody tr")).to_have_count(4)  # done, failed, the chunked parent, the export


def test_a_deliverys_page_offers_replay(records, laptop):
    laptop.goto(reverse("admin:notify_delivery_changelist"))
    laptop.locator(f"input.action-select[value='{records['webhook'].id}']").check()
    options = laptop.locator("select[name=action] option").all_inner_texts()
    assert "Replay selected deliveries" in options, options
