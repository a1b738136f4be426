"""The fairness page groups users under their organisations: a table of
organisations (share of worker time together, the slowest member's waits)
above the users, each user's organisation, and charts per organisation.
Screenshotted at 1,366 px (test-artifacts/screenshots/fairness-organisations.png)."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser.test_admin_pages import LAPTOP

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_fairness_page_groups_users_under_their_organisations(browser, live_server, make_person, admin_login,
                                                                   screenshot):
    from organisations import members_move, organisation_create
    from uploads.models import Job, Upload

    studio = organisation_create(name="Northwind Post-Production Studio")
    people = {name: make_person(name) for name in ("alice", "bob", "carol", "dave")}
    members_move(user_ids=[people["alice"].pk, people["bob"].pk, people["carol"].pk], organisation=studio)
    now = timezone.now()
    # Over the last half hour: Northwind's three took 1 + 1 + 1 s a job, dave alone 3 s: half each.
    for minutes_ago in range(2, 30, 3):
        for name, process_ms, wait_ms in (("alice", 1000, 400), ("bob", 1000, 2500), ("carol", 1000, 900),
                                          ("dave", 3000, 100)):
            upload = Upload.objects.create(owner=people[name], batch=uuid.uuid4(), filename="f.mp4", file="x", size=1)
            ended = now - timedelta(minutes=minutes_ago)
            Job.objects.create(upload=upload, owner=people[name], lane="cpu-transcode", status="succeeded",
                               started_at=ended - timedelta(milliseconds=process_ms), finished_at=ended,
                               process_ms=process_ms, wait_ms=wait_ms)
    context = browser.new_context(base_url=live_server.url, viewport=LAPTOP)
    context.set_default_timeout(10_000)
    page = context.new_page()
    admin_login(page, make_person("olga", staff=True))
    page.goto("/admin/fairness/")

    orgs = page.locator("#lane-cpu-transcode table.organisations")
    northwind = orgs.locator("tbody tr", has=page.locator("td", has_text="Northwind"))
    half = re.compile(r"^\s*50%$")
    expect(northwind.locator("td")).to_have_text(["Northwind Post-Production Studio", "3", half, "2.5 s", "2.5 s"])
    expect(orgs.locator("tbody tr", has=page.locator("td", has_text="dave")).locator("td").nth(2)).to_have_text(half)
    users = page.locator("#lane-cpu-transcode table.users")
    expect(users.locator("tbody tr", has=page.locator("td", has_text="bob")).locator("td").nth(1)).to_have_text(
        "Northwind Post-Production Studio")
    legend = page.locator("#lane-cpu-transcode .chart-org-pct .u-legend")
    expect(legend).to_contain_text("Northwind Post-Production Studio")
    expect(legend).to_contain_text("dave")
    screenshot(page, "fairness-organisations")
    context.close()
