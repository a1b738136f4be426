"""Flower's tasks page, as an operator sees it: a user's held jobs listed as
PENDING with their owner beside the tasks that ran (dispatcher/monitor.py)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from PIL import Image
from playwright.sync_api import Browser, expect

from tests.flower import AUTH

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_flower_lists_held_jobs_with_their_owner(browser: Browser, flower, make_user, api_client_for, tmp_path,
                                                  screenshot):
    client = api_client_for(make_user("nightly"))
    later = (timezone.now() + timedelta(hours=2)).isoformat()
    images = [tmp_path / f"scan-{i}.png" for i in range(3)]
    for i, path in enumerate(images):
        Image.new("RGB", (64, 48), (60 * i, 90, 140)).save(path)
    handles = [open(p, "rb") for p in images]
    try:
        resp = client.post("/api/uploads/", {"file": handles, "scheduled_for": later}, format="multipart")
    finally:
        for h in handles:
            h.close()
    assert resp.status_code == 202, resp.content
    held = [u["job"]["id"] for u in resp.json()["uploads"]]

    context = browser.new_context(base_url=flower, viewport={"width": 1920, "height": 600},
                                  http_credentials={"username": AUTH[0], "password": AUTH[1]})
    page = context.new_page()
    try:
        page.goto("/tasks")
        page.fill("input[type=search]", "nightly")
        rows = page.locator("#tasks-table tbody tr")
        expect(rows).to_have_count(len(held), timeout=30_000)
        for job_id in held:
            row = rows.filter(has_text=job_id)
            expect(row).to_contain_text("PENDING")
            expect(row).to_contain_text("'owner': 'nightly'")
            expect(row).to_contain_text("transcoding.job_run")
        screenshot(page, "flower-held-jobs")
    finally:
        context.close()
