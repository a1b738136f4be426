"""A person opens a finished job and the video plays in Chromium."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.media import make_video

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_processed_video_plays_and_its_time_advances(
    workers, make_person, page, site_login, screenshot, wait_terminal, api_client_for, tmp_path
):
    fay = make_person("fay")
    with open(make_video(tmp_path / "clip.mp4", seconds=3, size="320x240"), "rb") as fh:
        upload = api_client_for(fay).post("/api/uploads/", {"file": fh}, format="multipart").json()["uploads"][0]
    job = wait_terminal(api_client_for(fay), upload["job"]["url"])
    assert job["status"] == "succeeded", job["error"]

    site_login(page, fay)
    page.goto(f"/jobs/{job['id']}/")
    expect(page.locator("h2")).to_have_text("clip.mp4")
    player = page.locator("#player")
    source = player.evaluate("v => v.currentSrc")
    assert "/o/" in source  # a signed output link, HLS or MP4 by what Chromium plays
    player.evaluate("v => v.play()")
    page.wait_for_function("() => { const v = document.getElementById('player');"
                           " return !v.paused && v.readyState >= 3 && v.currentTime > 0.5; }", timeout=20_000)
    state = player.evaluate("v => ({w: v.videoWidth, h: v.videoHeight, t: v.currentTime, err: v.error})")
    assert state["err"] is None and (state["w"], state["h"]) == (320, 240)
    screenshot(page, "job-page")

