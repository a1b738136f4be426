"""A webhook endpoint's delivery log in Chromium, with the real io worker:
a delivery the receiver refused is listed with its status, tries and
response code; Replay sends its event again as a new delivery through the
fair lane, and the page shows it arrive."""
from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from notify import services
from notify.models import Delivery, Endpoint
from tests.notify.receiver import Answer, Receiver, scripted

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_refused_delivery_is_logged_and_replayed(workers, make_person, page, site_login, screenshot):
    rosa = make_person("rosa")
    with Receiver(scripted(Answer(400, body=b"unknown customer"), Answer(200, body=b"thanks"))) as receiver:
        endpoint = services.endpoint_create(owner=rosa, url=receiver.url, events=["job.failed"])
        with transaction.atomic():
            event = services.event_publish(owner=rosa, event_type="job.failed", key="browser-replay",
                                           data={"job": {"id": "j1", "filename": "clip.mp4", "status": "failed"}})
        site_login(page, rosa)
        page.goto("/notifications/")
        page.click(f"#endpoints a[href='/notifications/webhooks/{endpoint.id}/']")
        first = page.locator(f"#delivery-{event.deliveries.get().id}")
        expect(first.locator("td").nth(2)).to_have_text("failed", timeout=30_000)  # the page refreshes itself
        expect(first.locator("td.tries")).to_have_text("1")
        expect(first.locator("td.response")).to_have_text("400")
        first.locator("summary").click()
        expect(first.locator("details li")).to_contain_text("unknown customer")

        first.locator("button.replay").click()
        expect(page.locator("#message")).to_contain_text("is being delivered again")
        replay = Delivery.objects.get(replay_of__isnull=False)
        row = page.locator(f"#delivery-{replay.id}")
        expect(row).to_contain_text("replay of the delivery of")
        expect(row.locator("td").nth(2)).to_have_text("succeeded", timeout=30_000)
        expect(row.locator("td.response")).to_have_text("200")
        expect(first.locator("td").nth(2)).to_have_text("failed")  # the first keeps its log
        requests = receiver.received()
    assert len(requests) == 2 and len({r.headers["webhook-id"] for r in requests}) == 1
    assert Endpoint.objects.get(id=endpoint.id).is_active
    page.locator(f"#delivery-{replay.id} summary").click()
    screenshot(page, "webhook-deliveries")
