"""The upload page follows job changes as they happen, without a reload, and
its idle polls cost a 304; a person registers a webhook in the web UI and
sees its secret once."""
from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_status_change_appears_on_the_upload_page_without_a_reload(make_person, page, site_login, screenshot):
    from django.utils import timezone

    from uploads.models import Job, Upload

    fay = make_person("fay")
    upload = Upload.objects.create(owner=fay, batch=uuid.uuid4(), filename="holiday.mp4", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=fay, lane="cpu-transcode", status="running", progress=10)
    answers = []
    page.on("response", lambda r: answers.append(r.status) if "/api/jobs/?" in r.url else None)

    site_login(page, fay)
    row = page.locator(f"#job-{job.id}")
    expect(row.locator("td").nth(2)).to_have_text("running")
    page.evaluate("window.__notReloaded = true")
    page.wait_for_timeout(2500)  # a few polls with nothing new
    assert 304 in answers, answers

    Job.objects.filter(id=job.id).update(status="failed", progress=100, error_code="not_media",
                                         error_message="Not a media file.", finished_at=timezone.now())
    expect(row.locator("td").nth(2)).to_have_class("status-failed")
    expect(row.locator("td").nth(2)).to_contain_text("not_media: Not a media file.")
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "upload-page-live-update")


def test_a_person_registers_a_webhook_and_sees_its_secret_once(make_person, page, site_login, screenshot, settings):
    settings.NOTIFY_WEBHOOK_ALLOW_LOOPBACK = False  # the live server's process: public URLs only
    gus = make_person("gus")
    site_login(page, gus)
    page.click("text=Notifications and webhooks")
    page.fill("#register input[name=url]", "http://10.0.0.8/hook")
    page.click("#register button[type=submit]")
    expect(page.locator("#form-error")).to_contain_text("Webhook addresses must be public")

    page.fill("#register input[name=url]", "https://93.184.216.34/fairlane")
    page.uncheck("#register input[value='job.succeeded']")
    page.click("#register button[type=submit]")
    secret = page.locator("#secret").inner_text()
    assert secret.startswith("whsec_")
    expect(page.locator("#endpoints")).to_contain_text("https://93.184.216.34/fairlane")
    expect(page.locator("#endpoints")).to_contain_text("job.failed, batch.completed")
    screenshot(page, "notifications-page")
    page.goto("/notifications/")
    expect(page.locator("#secret")).to_have_count(0)
    assert secret not in page.content()
