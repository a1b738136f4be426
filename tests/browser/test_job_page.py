"""A person opens a finished job and the video plays in Chromium: the HLS
ladder, from start to end, through signed links (with object storage: the
playlists rewritten by the web, every segment straight from the store
through a presigned URL)."""
from __future__ import annotations

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.media import make_video

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_hls_ladder_plays_from_start_to_end(
    workers, make_person, page, site_login, screenshot, wait_terminal, api_client_for, tmp_path
):
    fay = make_person("fay")
    with open(make_video(tmp_path / "clip.mp4", seconds=5, size="640x360"), "rb") as fh:
        upload = api_client_for(fay).post("/api/uploads/", {"file": fh}, format="multipart").json()["uploads"][0]
    job = wait_terminal(api_client_for(fay), upload["job"]["url"])
    assert job["status"] == "succeeded", job["error"]
    renditions = next(o for o in job["outputs"] if o["name"] == "hls")["metadata"]["renditions"]
    assert [r["name"] for r in renditions] == ["240p", "360p"]

    segments: list[str] = []
    page.on("response", lambda r: segments.append(f"{r.status} {r.url}") if ".ts" in r.url.split("?")[0] else None)
    site_login(page, fay)
    page.goto(f"/jobs/{job['id']}/")
    expect(page.locator("h2")).to_have_text("clip.mp4")
    expect(page.locator("#source")).to_have_text("Playing the HLS ladder.")
    player = page.locator("#player")
    assert "/o/" in player.evaluate("v => v.currentSrc") and "master.m3u8" in player.evaluate("v => v.currentSrc")
    player.evaluate("v => v.play()")
    page.wait_for_function("() => document.getElementById('player').ended", timeout=30_000)
    state = player.evaluate("v => ({w: v.videoWidth, t: v.currentTime, d: v.duration, err: v.error})")
    assert state["err"] is None and state["w"] in (426, 640) and state["t"] == pytest.approx(5, abs=0.25)
    assert len({s.split("?")[0].rsplit("/", 1)[1] for s in segments}) >= 2  # both 4 s segments, in some rendition
    assert all(s.split(" ", 1)[0] in ("200", "206") for s in segments)
    if settings.FAIRLANE_STORAGE == "s3":  # every segment came from the store, presigned for its public name
        public = settings.STORAGES["public"]["OPTIONS"]["endpoint_url"]
        assert all(s.split(" ", 1)[1].startswith(public) and "X-Amz-Signature=" in s for s in segments)
    player.evaluate("v => { v.currentTime = 2.5; }")  # a frame to look at in the screenshot
    page.wait_for_function("() => document.getElementById('player').readyState >= 2")
    screenshot(page, "job-page")
