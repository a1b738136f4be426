"""A chunked video (four chunks of two 2 s segments, audio as its own
rendition) plays in Chromium from start to end, and plays on from seeks
that land just before each join between chunks; and one plays while its
chunks are encoded (as test_live_playback.py's single pass does)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser import test_live_playback as live_page
from tests.media import make_video
from tests.workers import worker_stopped

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECONDS = 16
JOINS_S = (4.0, 8.0, 12.0)  # chunks of 4 s


def test_a_chunked_video_plays_through_and_seeks_across_its_joins(
    chunking_workers, make_person, page, site_login, screenshot, wait_terminal, api_client_for, tmp_path
):
    gus = make_person("gus")
    with open(make_video(tmp_path / "long.mp4", seconds=SECONDS, size="640x360"), "rb") as fh:
        upload = api_client_for(gus).post("/api/uploads/", {"file": fh}, format="multipart").json()["uploads"][0]
    job = wait_terminal(api_client_for(gus), upload["job"]["url"], timeout_s=240)
    assert job["status"] == "succeeded", job["error"]
    assert next(o for o in job["outputs"] if o["name"] == "hls")["metadata"]["chunks"] == 4

    site_login(page, gus)
    page.goto(f"/jobs/{job['id']}/")
    expect(page.locator("#source")).to_have_text("Playing the HLS ladder.")
    player = page.locator("#player")
    player.evaluate("v => { v.muted = true; v.play(); }")
    page.wait_for_function("() => document.getElementById('player').ended", timeout=60_000)
    state = player.evaluate("v => ({t: v.currentTime, d: v.duration, err: v.error && v.error.code,"
                            " audio: v.webkitAudioDecodedByteCount,"
                            " frames: v.getVideoPlaybackQuality().totalVideoFrames})")
    assert state["err"] is None and state["t"] == pytest.approx(SECONDS, abs=0.25), state
    assert state["d"] == pytest.approx(SECONDS, abs=0.1)
    assert state["audio"] > 0  # the separate audio rendition was loaded and decoded
    # every frame shown, none dropped at the joins (a headless machine may drop a few under load)
    assert state["frames"] >= SECONDS * 25 * 0.9, state

    for join in JOINS_S:
        player.evaluate(f"v => {{ v.currentTime = {join - 0.3}; v.play(); }}")
        page.wait_for_function(f"() => document.getElementById('player').currentTime > {join + 0.5}",
                               timeout=15_000)
        assert player.evaluate("v => v.error") is None
    player.evaluate("v => { v.pause(); v.currentTime = 8.0; }")  # a frame just after a join, for the screenshot
    page.wait_for_function("() => document.getElementById('player').readyState >= 2")
    # Scrub previews made by the finalizer from the whole rendition: one a second, across the joins.
    page.wait_for_function(f"() => document.getElementById('player-box').dataset.previews === '{SECONDS}'")
    seek = page.locator("#player-box .seek").bounding_box()
    page.mouse.move(seek["x"] + seek["width"] * 12.5 / SECONDS, seek["y"] + seek["height"] / 2)  # past the last join
    expect(page.locator("#player-box .preview")).to_have_attribute("data-cue", "320,90")  # the 13th frame: row 2
    screenshot(page, "chunked-job-page")


def test_a_chunked_video_plays_while_its_chunks_are_encoded(
        chunking_workers, make_person, page, site_login, screenshot, api_client_for, tmp_path):
    bea = make_person("bea")
    clip = make_video(tmp_path / "long.mp4", seconds=live_page.SECONDS, size="640x360")
    [job_id] = live_page._upload(api_client_for(bea), [clip])
    site_login(page, bea)
    page.goto(f"/jobs/{job_id}/")
    live_page._playable(job_id)
    # Chunks are encoded side by side, and a chunk whose encoder has ended
    # lets the stream run on into the next: holding the first chunk's worker
    # alone may hold nothing (a CI run's failure: its 4 s were all stored,
    # the video played on to its end). Stopping the whole lane's worker as
    # soon as the video is playable holds it at the first chunk not encoded,
    # with the chunks after it not started.
    with worker_stopped(chunking_workers.procs["cpu"]):
        live_page._watch_while_held(page, job_id, screenshot, "job-page-live-chunked")
    live_page._plays_to_the_end(page)
