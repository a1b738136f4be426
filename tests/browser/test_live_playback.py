"""A video plays on its job's page while it is still being processed: from
its growing playlists (uploads/live.py), attached as soon as its first
seconds are stored, up to where the encoding has got; seeking past that
says so and is played from once it is encoded; and the same player plays
on to the end when the job finishes. A single pass here; a chunked video
in test_chunked_playback.py, beside the other test of the chunking workers
(one pool of them for both).

The job is held where it is by stopping the worker process that runs it
(tests.workers.attempt_held; a chunked video's, the whole lane's worker:
tests.workers.worker_stopped) once it is playable, so what the page shows
meanwhile does not depend on how fast the machine encodes."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.media import make_video
from tests.promise import wait_for
from tests.workers import attempt_held
from uploads.live import stream_for
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECONDS = 30
SEEK_SHARE = 0.8  # 24 s of 30


def _upload(client, paths) -> list[str]:
    handles = [open(p, "rb") for p in paths]
    try:
        uploads = client.post("/api/uploads/", {"file": handles}, format="multipart").json()["uploads"]
    finally:
        for h in handles:
            h.close()
    return [u["job"]["id"] for u in uploads]


def _playable(job_id: str, *, stored_s: float = 0.0) -> None:
    """Until the video is playable, with at least `stored_s` seconds stored."""
    def ready() -> bool:
        job = Job.objects.filter(id=job_id, playable_at__isnull=False).first()
        return job is not None and _held_seconds(job) >= stored_s

    wait_for(ready, 180, f"the video to be playable, {stored_s} s of it stored")


def _held_seconds(job: Job) -> float:
    """How much of the video its growing playlists serve now (a chunked
    one's: its chunks up to the first whose encoder has not ended)."""
    stream = stream_for(job)
    return stream.encoded_s if stream is not None and stream.live else 0.0


def _watch_while_held(page, job_id: str, screenshot, name: str) -> None:
    """With the job held: the player attaches, plays its stored seconds, says
    it is still processing at their end, and keeps a seek beyond them."""
    job = Job.objects.get(id=job_id)
    assert job.status == "running" and job.playable_at is not None
    held = _held_seconds(job)
    assert 0 < held < SEEK_SHARE * SECONDS - 2, f"held too late to see the edge: {held} s stored"
    box, player, state = page.locator("#player-box"), page.locator("#player"), page.locator("#player-box .state")
    expect(box).to_have_attribute("data-attached", "1", timeout=15_000)
    expect(page.locator("#job-status")).to_have_text("video · running · playable")
    expect(page.locator("#source")).to_have_text("Playing the HLS ladder while the rest of the video is processed.")
    player.evaluate("v => { v.muted = true; v.play(); }")
    page.wait_for_function("() => document.getElementById('player').currentTime > 0.5", timeout=30_000)
    assert box.get_attribute("data-first-frame")
    if held > 4:  # playing, with more to play: what the README shows
        expect(page.locator("#facts")).to_contain_text("Playable after")
        screenshot(page, f"{name}-playing")
    # On to just before the edge: a held worker's job is offered again once
    # its lease runs out (15 s), and a loaded machine playing all the held
    # seconds from the start could reach the edge only after that, when the
    # job moves on elsewhere (a fresh clone's failure: the job had succeeded).
    player.evaluate(f"v => {{ v.currentTime = Math.max(v.currentTime, {held - 1.5}); }}")
    expect(state).to_have_text("Still processing: more of the video is on its way.", timeout=(held + 30) * 1000)
    assert player.evaluate("v => v.error") is None and Job.objects.get(id=job_id).status == "running"
    seek = page.locator("#player-box .seek").bounding_box()
    page.mouse.click(seek["x"] + seek["width"] * SEEK_SHARE, seek["y"] + seek["height"] / 2)
    expect(state).to_contain_text(f"Still processing: 0:{int(SEEK_SHARE * SECONDS)} is not encoded yet")
    expect(page.locator("#player-box .time")).to_contain_text(f"0:{int(SEEK_SHARE * SECONDS)} / 0:{SECONDS}")
    assert player.evaluate("v => v.error") is None
    screenshot(page, name)


def _plays_to_the_end(page) -> None:
    """Let go: the wanted position is played from once encoded, then to the end."""
    try:
        page.wait_for_function(f"() => document.getElementById('player').currentTime > {SEEK_SHARE * SECONDS - 1}",
                               timeout=120_000)
        page.wait_for_function("() => document.getElementById('player').ended", timeout=120_000)
    except Exception:
        print("DEBUG", page.evaluate("""() => { const v = document.getElementById('player'), b = document.getElementById('player-box');
          const r = []; for (let i = 0; i < v.buffered.length; i++) r.push([v.buffered.start(i), v.buffered.end(i)]);
          return {t: v.currentTime, d: v.duration, paused: v.paused, rs: v.readyState, err: v.error && v.error.code,
                  buffered: r, state: b.querySelector('.state').textContent, time: b.querySelector('.time').textContent,
                  source: document.getElementById('source').textContent, status: document.getElementById('job-status').textContent,
                  level: b.hls && b.hls.levels.map(l => l.details && [l.details.live, l.details.totalduration, l.details.fragments.length])}; }"""))
        raise
    expect(page.locator("#player-box .state")).to_be_hidden()
    page.wait_for_function("() => document.getElementById('player').ended", timeout=120_000)
    assert page.locator("#player").evaluate("v => v.error") is None
    expect(page.locator("#job-status")).to_have_text("video · succeeded", timeout=30_000)


def test_a_video_plays_while_its_batch_is_processed(
        workers, make_person, page, site_login, screenshot, api_client_for, tmp_path):
    ada = make_person("ada")
    clips = [make_video(tmp_path / f"clip-{n}.mp4", seconds=SECONDS, size="640x360") for n in range(3)]
    first, *_ = _upload(api_client_for(ada), clips)
    site_login(page, ada)
    page.goto(f"/jobs/{first}/")
    expect(page.locator("#job-batch")).to_contain_text("of 3 files done")
    _playable(first, stored_s=8)
    with attempt_held(first):
        _watch_while_held(page, first, screenshot, "job-page-live")
    _plays_to_the_end(page)
    assert Job.objects.get(id=first).playable_at < Job.objects.get(id=first).finished_at
