"""A person logs in, picks several files on the upload page, and watches every
row reach done, with links to what was made."""
from __future__ import annotations

import pytest
from PIL import Image
from playwright.sync_api import expect

from tests.media import make_video

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Real workers transcode while the page polls; generous, as the first jobs of
# a run also wait for the workers to warm up.
JOB_TIMEOUT_MS = 90_000


def test_a_user_uploads_three_files_and_watches_them_all_succeed(
    workers, make_person, page, site_login, screenshot, tmp_path
):
    carol = make_person("carol")
    files = [
        make_video(tmp_path / "beach.mp4", seconds=1),
        make_video(tmp_path / "party.mov", seconds=1),
        tmp_path / "sunset.png",
    ]
    Image.new("RGB", (160, 120), (240, 140, 40)).save(files[2])

    site_login(page, carol)
    expect(page).to_have_url("/")
    page.set_input_files("#picker", [str(f) for f in files])

    expect(page.locator("#sending .batch-status")).to_have_text("3 file(s) accepted.")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(3)
    for name in ("beach.mp4", "party.mov", "sunset.png"):
        row = rows.filter(has_text=name)
        expect(row.locator("td").nth(2)).to_have_class("status-succeeded", timeout=JOB_TIMEOUT_MS)
        expect(row.locator("td").nth(2)).to_have_text("succeeded")
        expect(row.locator("progress")).to_have_js_property("value", 100)
        expect(row.locator("td").nth(5).locator("a").first).to_be_visible()
    for name in ("beach.mp4", "party.mov"):
        expect(rows.filter(has_text=name).locator("td").nth(1)).to_have_text("video")
        outputs = rows.filter(has_text=name).locator("td").nth(5)  # the file name cell links to the job page
        expect(outputs.locator("a[data-output=mp4]")).to_have_text("video (MP4)")  # named for people
    expect(rows.filter(has_text="sunset.png").locator("td").nth(1)).to_have_text("image")

    # The page is done polling fast once nothing moves; the links it shows
    # are signed and open in this browser session.
    for name in ("beach.mp4", "party.mov", "sunset.png"):  # a thumbnail (image) or poster (video) beside each name
        thumb = rows.filter(has_text=name).locator("img.thumb")
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle())
    mp4_url = rows.filter(has_text="beach.mp4").locator("td").nth(5).locator("a[data-output=mp4]").get_attribute("href")
    screenshot(page, "upload-page")

    # Debian's Chromium decodes H.264: the produced file really plays here.
    played = page.evaluate(
        """url => new Promise((resolve, reject) => {
            const v = document.createElement("video");
            v.muted = true;
            v.onloadeddata = () => resolve({width: v.videoWidth, height: v.videoHeight, duration: v.duration});
            v.onerror = () => reject(new Error(`video error ${v.error && v.error.code}`));
            v.src = url;
        })""",
        mp4_url,
    )
    assert played["width"] == 160 and played["height"] == 120
    assert 0.8 < played["duration"] < 1.5


def test_files_picked_before_the_page_has_finished_loading_are_sent(
    workers, make_person, page, site_login, tmp_path
):
    """The picker is in the page before the script that handles it: a pick
    in between fires its change event with nobody listening. Held here by
    stalling the uploader's script, which the page loads before its own."""
    dina = make_person("dina")
    picked = tmp_path / "early.png"
    Image.new("RGB", (64, 48), (40, 140, 240)).save(picked)
    site_login(page, dina)
    held = []
    page.route("**/uploads/uploader*.js", lambda route: held.append(route))  # answered once the pick is made
    page.goto("/", wait_until="commit")
    page.wait_for_selector("#picker", state="attached")
    for _ in range(500):  # Playwright's sync API hands over the route only inside its own calls
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the page did not ask for the uploader's script within 10 s"
    page.set_input_files("#picker", [str(picked)])
    held[0].continue_()
    expect(page.locator("#sending .batch-status")).to_have_text("1 file(s) accepted.")
