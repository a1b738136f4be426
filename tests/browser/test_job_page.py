"""A person opens a finished job and the video plays in Chromium: the HLS
ladder, from start to end, through signed links (with object storage: the
playlists rewritten by the web, every segment straight from the store
through a presigned URL); and the page of every other kind of job shows its
media."""
from __future__ import annotations

import re

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.media import ffmpeg, make_video, one_page_pdf

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_hls_ladder_plays_from_start_to_end(
    workers, make_person, page, site_login, screenshot, wait_terminal, api_client_for, tmp_path
):
    fay = make_person("fay")
    job = transcoded(api_client_for(fay), wait_terminal, make_video(tmp_path / "clip.mp4", seconds=5, size="640x360"))
    renditions = next(o for o in job["outputs"] if o["name"] == "hls")["metadata"]["renditions"]
    assert [r["name"] for r in renditions] == ["240p", "360p"]

    segments: list[str] = []
    playlists: list[str] = []
    page.on("response", lambda r: segments.append(f"{r.status} {r.url}") if ".ts" in r.url.split("?")[0] else None)
    page.on("response", lambda r: playlists.append(r.url) if ".m3u8" in r.url.split("?")[0] else None)
    site_login(page, fay)
    page.goto(f"/jobs/{job['id']}/")
    expect(page.locator("h2")).to_have_text("clip.mp4")
    expect(page.locator("#source")).to_have_text("Playing the HLS ladder.")
    expect(page.locator("#outputs a[data-output]")).to_have_text(
        ["stream (HLS)", "video (MP4)", "poster", "scrub previews (sprite)", "scrub previews (WebVTT)"])
    player = page.locator("#player")
    page.wait_for_function("() => document.getElementById('player').readyState >= 1")
    assert "/o/" in playlists[0] and playlists[0].split("?")[0].endswith("/master.m3u8"), playlists
    # Pressing play (a person's click) plays with sound: the player is not muted.
    assert player.evaluate("v => [v.muted, v.autoplay, v.volume]") == [False, False, 1]
    page.click("#player-box .play")
    page.wait_for_function("() => document.getElementById('player').ended", timeout=30_000)
    state = player.evaluate("v => ({w: v.videoWidth, t: v.currentTime, d: v.duration, err: v.error, muted: v.muted,"
                            " audio: v.webkitAudioDecodedByteCount})")
    assert state["err"] is None and state["w"] in (426, 640) and state["t"] == pytest.approx(5, abs=0.25)
    assert not state["muted"] and state["audio"] > 0, state
    assert len({s.split("?")[0].rsplit("/", 1)[1] for s in segments}) >= 2  # both 4 s segments, in some rendition
    # It started mid-ladder (360p of 240p/360p), not at the lowest rendition.
    assert "/360p/seg_000.ts" in segments[0].split("?")[0], segments
    assert all(s.split(" ", 1)[0] in ("200", "206") for s in segments)
    if settings.FAIRLANE_STORAGE == "s3":  # every segment came from the store, presigned for its public name
        public = settings.STORAGES["public"]["OPTIONS"]["endpoint_url"]
        assert all(s.split(" ", 1)[1].startswith(public) and "X-Amz-Signature=" in s for s in segments)

    # The quality menu: automatic by default, naming what it plays; a choice holds.
    quality = page.locator("#player-box .quality")
    expect(quality.locator("option")).to_have_text([re.compile(r"^Auto \((240|360)p\)$"), "360p", "240p"])
    expect(quality).to_have_value("-1")
    quality.select_option(label="240p")
    player.evaluate("v => { v.currentTime = 0; v.play(); }")
    page.wait_for_function("() => document.getElementById('player').videoHeight === 240", timeout=15_000)
    player.evaluate("v => v.pause()")
    assert page.evaluate("document.getElementById('player-box').hls.autoLevelEnabled") is False
    quality.select_option("-1")
    assert page.evaluate("document.getElementById('player-box').hls.autoLevelEnabled") is True

    # Scrub previews: over the progress bar, the storyboard's frame of the time under the pointer.
    page.wait_for_function("() => document.getElementById('player-box').dataset.previews === '5'")
    player.evaluate("v => { v.currentTime = 2.5; }")  # a frame to look at in the screenshot
    page.wait_for_function("() => document.getElementById('player').readyState >= 2")
    seek = page.locator("#player-box .seek").bounding_box()
    page.mouse.move(seek["x"] + seek["width"] * 0.7, seek["y"] + seek["height"] / 2)  # 3.5 s: the 4th frame
    preview = page.locator("#player-box .preview")
    expect(preview).to_be_visible()
    expect(preview).to_have_attribute("data-cue", "480,0")
    expect(preview.locator(".at")).to_have_text("0:03")
    page.wait_for_function("""() => new Promise(resolve => {  // the sprite itself loaded (a picture, not a blank)
        const img = new Image(); img.onload = () => resolve(img.naturalWidth === 800); img.onerror = () => resolve(false);
        img.src = document.getElementById('player-box').dataset.storyboardSprite; })""")
    # The facts panel: from the probe and the outputs.
    facts = dict(zip(page.locator("#facts table.facts th").all_inner_texts(),
                     page.locator("#facts table.facts td").all_inner_texts()))
    assert facts["Duration"] == "5.0 s" and facts["Resolution"] == "640×360" and facts["Frame rate"] == "25 fps"
    assert facts["Codecs"].startswith("h264 video, aac audio") and facts["Container"] == "mov"
    expect(page.locator("#renditions tbody tr td:first-child")).to_have_text(["360p", "240p"])
    expect(page.locator("#renditions tbody tr").first).to_contain_text("640×360")
    expect(page.locator("#renditions tbody tr").first).to_contain_text("kbit/s")
    screenshot(page, "job-page")
    assert_fits_window(page, 640 / 360)


def test_a_portrait_video_fits_the_window(
    workers, make_person, page, site_login, screenshot, wait_terminal, api_client_for, tmp_path
):
    gil = make_person("gil")
    job = transcoded(api_client_for(gil), wait_terminal, make_video(tmp_path / "phone.mp4", seconds=2, size="360x640"))
    site_login(page, gil)
    page.goto(f"/jobs/{job['id']}/")
    player = page.locator("#player")
    page.wait_for_function("() => document.getElementById('player').readyState >= 2")
    assert player.evaluate("v => [v.videoWidth, v.videoHeight]") == [360, 640]  # mid-ladder: 360p first
    assert_fits_window(page, 360 / 640)
    page.set_viewport_size({"width": 700, "height": 500})  # a small window: still all of it in view
    # The page refits on its resize event, which Chromium dispatches after
    # set_viewport_size has returned: wait for it (a page that never refits
    # fails here), then check the fit.
    page.wait_for_function("() => document.getElementById('player').getBoundingClientRect().bottom <= innerHeight",
                           timeout=10_000)
    assert_fits_window(page, 360 / 640)
    screenshot(page, "job-page-portrait")


# A page of text and shapes: what the PDF pipeline renders as its thumbnail.
PDF_PAGE = (b"/Type /Page /MediaBox [0 0 612 792] /Resources << /Font << /F1 << /Type /Font /Subtype /Type1 "
            b"/BaseFont /Helvetica >> >> >>")
PDF_CONTENTS = (b"0.15 0.35 0.75 rg 72 560 468 160 re f 0.95 0.55 0.15 rg 72 380 220 140 re f "
                b"0.2 0.65 0.35 rg 320 380 220 140 re f 0 g BT /F1 40 Tf 72 300 Td (Quarterly report) Tj ET "
                b"BT /F1 16 Tf 72 260 Td (Page one of one, drawn by the test.) Tj ET")


def every_kind(folder) -> dict[str, object]:
    """One file of each kind a job page shows, and one that fails."""
    from PIL import Image, ImageDraw

    photo = folder / "photo.jpg"
    picture = Image.linear_gradient("L").resize((1200, 800)).convert("RGB")
    draw = ImageDraw.Draw(picture)
    draw.ellipse((700, 150, 1100, 550), fill=(230, 120, 30))
    draw.rectangle((100, 450, 600, 700), fill=(40, 110, 200))
    picture.save(photo, quality=90)
    # A tone that swells and fades twice: a waveform with a shape to look at.
    ffmpeg("-f", "lavfi", "-i", "aevalsrc=sin(2*PI*330*t)*(0.1+0.8*abs(sin(PI*t*2/3))):d=3:s=44100",
           "-c:a", "pcm_s16le", str(folder / "tone.wav"))
    return {
        "video": make_video(folder / "clip.mp4", seconds=2, size="640x360"),
        "portrait": make_video(folder / "phone.mp4", seconds=2, size="360x640"),
        "image": photo,
        "audio": folder / "tone.wav",
        "pdf": one_page_pdf(folder / "report.pdf", PDF_CONTENTS, page=PDF_PAGE),
        "failed": one_page_pdf(folder / "broken.pdf", b"", page=b"/Type /Pagx"),
    }


# What each kind's page must show, as a script evaluated in the page: it is
# true once the media is loaded (a frame, a picture's pixels, audio's duration).
SHOWN = {
    "video": "() => document.getElementById('player').readyState >= 2",
    "portrait": "() => document.getElementById('player').readyState >= 2",
    "image": "() => document.getElementById('image').naturalWidth > 0",
    "audio": "() => document.querySelector('audio').readyState >= 1",
    "pdf": "() => document.getElementById('image').naturalWidth > 0",
    "failed": "() => document.querySelector('.error') !== null",
}


def test_the_job_page_of_every_kind_shows_its_media(
    workers, make_person, page, site_login, screenshot, wait_terminal, api_client_for, tmp_path
):
    """Video, portrait video, image, audio, PDF and a failed job: each page
    answers, shows its media loaded (no broken picture) and its outputs, and
    is screenshotted (test-artifacts/screenshots/job-kind-*.png) to be
    looked at. A PDF's page was a 500 (the template asked for a medium size
    that a PDF does not have)."""
    ida = make_person("ida")
    client = api_client_for(ida)
    files = every_kind(tmp_path)
    handles = [open(path, "rb") for path in files.values()]  # noqa: SIM115 (closed below)
    try:
        uploads = client.post("/api/uploads/", {"file": handles}, format="multipart").json()["uploads"]
    finally:
        for handle in handles:
            handle.close()
    jobs = {kind: wait_terminal(client, upload["job"]["url"]) for kind, upload in zip(files, uploads)}
    assert {kind: job["status"] for kind, job in jobs.items()} == {
        **{kind: "succeeded" for kind in files}, "failed": "failed"}, {k: j["error"] for k, j in jobs.items()}

    site_login(page, ida)
    for kind, job in jobs.items():
        resp = page.goto(f"/jobs/{job['id']}/")
        assert resp.status == 200, kind
        expect(page.locator("h2")).to_have_text(files[kind].name)
        expect(page.locator("#outputs a[data-output]")).to_have_text([output["label"] for output in job["outputs"]])
        expect(page.locator("#facts")).to_contain_text("File size")
        page.wait_for_function(SHOWN[kind])
        if kind in ("video", "portrait"):
            page.locator("#player").evaluate("v => { v.currentTime = 1; }")  # a frame with something in it
            # Until the player can go on (HAVE_FUTURE_DATA), Chromium draws its spinner over the frame.
            page.wait_for_function("() => document.getElementById('player').readyState >= 3 && "
                                   "!document.getElementById('player').seeking")
        page.wait_for_function("() => [...document.images].every(i => i.complete)")
        broken = page.evaluate("() => [...document.images].filter(i => !i.naturalWidth).map(i => i.src)")
        assert broken == [], (kind, broken)
        screenshot(page, f"job-kind-{kind}")

    # The failed file's page: its reason, no empty outputs, and what can be done: retry, delete.
    expect(page.locator(".error")).to_contain_text("decode_failed")
    expect(page.locator("#outputs")).to_have_count(0)
    expect(page.locator("#job-actions button")).to_have_text(["Retry", "Delete"])
    failed = jobs["failed"]
    with page.expect_navigation():  # retried, the page reloads (the job queued again; it fails again)
        page.click("#job-actions .act-retry")
    assert wait_terminal(client, f"/api/jobs/{failed['id']}/")["attempts"] == 2
    # The page reloads itself when the job ends (a reload of the test's own
    # would race it and be aborted): once it has, the ended job's actions.
    expect(page.locator("#job-actions button")).to_have_text(["Retry", "Delete"], timeout=30_000)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#job-actions .act-delete")
    expect(page).to_have_url("/")
    assert client.get(f"/api/jobs/{failed['id']}/").status_code == 404


def transcoded(client, wait_terminal, video) -> dict:
    """The video uploaded through the API and transcoded by the workers: its job."""
    with open(video, "rb") as fh:
        upload = client.post("/api/uploads/", {"file": fh}, format="multipart").json()["uploads"][0]
    job = wait_terminal(client, upload["job"]["url"])
    assert job["status"] == "succeeded", job["error"]
    return job


def assert_fits_window(page, aspect: float) -> None:
    """The player is wholly inside the window (no scrolling to see the bottom
    of a portrait video) and has the video's shape (no bars)."""
    box = page.locator("#player").bounding_box()
    window = page.evaluate("() => ({w: innerWidth, h: innerHeight})")
    assert box["x"] >= 0 and box["y"] >= 0, box
    assert box["x"] + box["width"] <= window["w"] and box["y"] + box["height"] <= window["h"], (box, window)
    assert box["width"] / box["height"] == pytest.approx(aspect, rel=0.02), box
    assert box["height"] >= window["h"] / 2 or box["width"] >= 0.9 * page.locator("main").bounding_box()["width"]
