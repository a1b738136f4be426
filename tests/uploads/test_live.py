"""Watching a video while it is processed (uploads/live.py): the growing
playlists are made from what the job's current attempt recorded and
nothing else, on both storage backends. A replaced attempt's segments,
though stored, are never reachable; the link outlives an output link's age
while the job runs; once the job has succeeded every file of the live link
leads to the finished output's; the API says when and what can be watched.
The attempt's side (fenced records, playable_at once) is tested here too,
through the service the encoder's thread calls."""
from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from unittest import mock

import pytest
from django.conf import settings
from django.core import signing

import media
from tests.uploads.test_delivery import fetch
from uploads import lifecycle, live, services
from uploads.models import Job, Output, Upload

pytestmark = pytest.mark.django_db

RENDITIONS = [{"name": "240p", "width": 426, "height": 240, "max_kbps": 400},
              {"name": "360p", "width": 640, "height": 360, "max_kbps": 800},
              {"name": "720p", "width": 1280, "height": 720, "max_kbps": 2800}]
SEGMENT = b"G" * 188 * 3


def record(job: Job, entries: list[tuple[str, float]], *, audio: list[tuple[str, float]] | None = None,
           complete: bool = False) -> None:
    """What the attempt's streamer records (transcoding/live.py), its segments stored."""
    prefix = media.outputs_prefix(job_id=str(job.id), attempt=job.attempts)
    tracks = {"video": [[u, d] for u, d in entries], **({"audio": [[u, d] for u, d in audio]} if audio else {})}
    for track, folders in (("video", [r["name"] for r in RENDITIONS]), ("audio", ["audio"])):
        for folder in folders:
            for name, _ in tracks.get(track, []):
                if not media.exists(f"{prefix}hls/{folder}/{name}"):
                    media.put_many([(_segment_file(), f"{prefix}hls/{folder}/{name}")])
    job.live = {"renditions": RENDITIONS, "audio_kbps": 128, "audio_channels": 2, "target_s": 4, "tracks": tracks,
                **({"complete": True} if complete else {})}
    job.save(update_fields=["live"])


def _segment_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"fairlane-test-live-{os.getpid()}.ts"
    path.write_bytes(SEGMENT)
    return path


@pytest.fixture
def running(make_user, storage_backend):
    owner = make_user("viewer")
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="running", kind="video",
                              attempts=2, media_info={"duration_s": 30.0})


def get(client, url: str) -> tuple[int, bytes]:
    """What a player ends up with (following a redirect to the store)."""
    resp = client.get(url)
    if resp.status_code == 302 and resp["Location"].startswith("http"):
        status, body, _ = fetch(resp["Location"])
        return status, body
    if resp.status_code == 302:
        return get(client, resp["Location"])
    body = b"".join(resp.streaming_content) if resp.streaming else resp.content
    return resp.status_code, body


def playlist_uris(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_the_growing_playlists_list_the_running_attempts_segments_and_play_them(client, running):
    record(running, [("seg_00000.ts", 1.0), ("seg_00001.ts", 4.0)])
    master = client.get(live.live_url(running, "master.m3u8"))
    assert master.status_code == 200 and master["Cache-Control"] == "private, no-store"
    # the middle rendition first (players start with it), then the ladder in order
    assert playlist_uris(master.content.decode()) == ["360p/index.m3u8", "240p/index.m3u8", "720p/index.m3u8"]
    assert "BANDWIDTH=928000,RESOLUTION=640x360" in master.content.decode()
    variant = client.get(live.live_url(running, "720p/index.m3u8")).content.decode()
    assert "#EXT-X-PLAYLIST-TYPE:EVENT" in variant and "#EXT-X-ENDLIST" not in variant
    assert "#EXT-X-TARGETDURATION:4" in variant
    assert playlist_uris(variant) == [f"{running.id}/2/seg_00000.ts", f"{running.id}/2/seg_00001.ts"]
    for uri in playlist_uris(variant):
        assert get(client, live.live_url(running, f"720p/{uri}")) == (200, SEGMENT)
    # It grows: the next request lists what was recorded since.
    record(running, [("seg_00000.ts", 1.0), ("seg_00001.ts", 4.0), ("seg_00002.ts", 4.0)])
    assert len(playlist_uris(client.get(live.live_url(running, "240p/index.m3u8")).content.decode())) == 3
    stream = live.stream_for(running)
    assert stream.live and stream.encoded_s == 9.0 and stream.duration_s == 30.0
    # The encoder ended: its last segment and the playlist's end come in one record.
    running.live = {**running.live, "complete": True}
    running.save(update_fields=["live"])
    variant = client.get(live.live_url(running, "240p/index.m3u8")).content.decode()
    assert variant.endswith("#EXT-X-ENDLIST\n") and len(playlist_uris(variant)) == 3


def test_a_replaced_attempts_segments_are_never_reachable_though_stored(client, running):
    record(running, [("seg_00000.ts", 1.0), ("seg_00001.ts", 4.0)])
    master_url, old_uri = live.live_url(running, "master.m3u8"), f"{running.id}/2/seg_00001.ts"
    assert get(client, live.live_url(running, f"240p/{old_uri}"))[0] == 200
    # The attempt is lost; the job is handed back and a new attempt claims it.
    Job.objects.filter(id=running.id).update(status="queued")
    assert client.get(master_url).status_code == 404
    assert services.job_start(job_id=str(running.id)) is not None
    running.refresh_from_db()
    assert running.attempts == 3 and running.live == {}
    assert client.get(master_url).status_code == 404  # nothing to play until the new attempt stores some
    assert get(client, live.live_url(running, f"240p/{old_uri}"))[0] == 404
    record(running, [("seg_00000.ts", 1.0)])
    assert playlist_uris(client.get(live.live_url(running, "240p/index.m3u8")).content.decode()) == [
        f"{running.id}/3/seg_00000.ts"]
    # A segment the new attempt has not recorded, a path outside the video, another job's id: none.
    for path in (f"240p/{running.id}/3/seg_00001.ts", f"240p/{running.id}/2/seg_00000.ts", "240p/../../x.ts",
                 f"240p/{uuid.uuid4()}/3/seg_00000.ts", "1080p/index.m3u8", "audio/index.m3u8"):
        assert client.get(live.live_url(running, path)).status_code == 404, path


@pytest.mark.parametrize("status", ["failed", "canceled", "queued"])
def test_nothing_plays_from_a_job_that_is_not_running_or_done(client, running, status):
    record(running, [("seg_00000.ts", 1.0)])
    Job.objects.filter(id=running.id).update(status=status)
    assert client.get(live.live_url(running, "master.m3u8")).status_code == 404
    assert client.get(live.live_url(running, f"240p/{running.id}/2/seg_00000.ts")).status_code == 404


def test_the_link_outlives_an_output_links_age_while_the_job_runs_and_a_forged_one_is_refused(client, running):
    record(running, [("seg_00000.ts", 1.0)])
    signed_at = time.time() - settings.FAIRLANE_URL_MAX_AGE_S - 60
    with mock.patch("django.core.signing.time.time", return_value=signed_at):
        old = live.live_url(running, "master.m3u8")
    assert client.get(old).status_code == 200
    with mock.patch("django.core.signing.time.time", return_value=signed_at - live.LIVE_LINK_EXTRA_S):
        expired = live.live_url(running, "master.m3u8")
    assert client.get(expired).status_code == 404
    forged = signing.dumps(str(running.id), salt="fairlane.output", compress=True)  # another link's kind
    assert client.get(f"/o/live/{forged}/master.m3u8").status_code == 404


def test_once_the_job_has_succeeded_the_live_link_leads_to_the_finished_outputs(client, running, tmp_path):
    record(running, [("seg_00000.ts", 1.0)])
    player_had = live.live_url(running, "240p/index.m3u8")
    made = tmp_path / "made"
    (made / "hls" / "240p").mkdir(parents=True)
    (made / "hls" / "240p" / "index.m3u8").write_text(
        "#EXTM3U\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-TARGETDURATION:4\n#EXTINF:1.0,\nseg_00000.ts\n#EXT-X-ENDLIST\n")
    (made / "hls" / "master.m3u8").write_text("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\n240p/index.m3u8\n")
    prefix = media.outputs_prefix(job_id=str(running.id), attempt=2)
    media.put_tree(made, prefix, skip={"hls/240p/seg_00000.ts": len(SEGMENT)})  # streamed: not stored again
    Output.objects.create(job=running, name="hls", file=f"{prefix}hls/master.m3u8",
                          content_type="application/vnd.apple.mpegurl", size=1,
                          metadata={"duration_s": 1.0, "renditions": RENDITIONS[:1]})
    Job.objects.filter(id=running.id).update(status="succeeded", live={})
    resp = client.get(player_had)
    assert resp.status_code == 302 and resp["Location"].startswith("/o/") and "/o/live/" not in resp["Location"]
    status, body = get(client, player_had)
    assert status == 200 and b"#EXT-X-ENDLIST" in body
    assert get(client, live.live_url(running, f"240p/{running.id}/2/seg_00000.ts")) == (200, SEGMENT)
    stream = live.stream_for(Job.objects.get(id=running.id))
    assert not stream.live and stream.encoded_s == stream.duration_s == 1.0


def test_a_chunked_video_plays_its_chunks_in_order_up_to_the_first_not_done(client, running):
    Job.objects.filter(id=running.id).update(
        media_info={"duration_s": 30.0, "chunks": {"has_audio": True, "sound_in_first_chunk": True}})
    parts = [Job.objects.create(upload=running.upload, owner=running.owner, lane="cpu-transcode", parent=running,
                                part="chunk", part_index=i, kind="video", status=status, attempts=attempts)
             for i, (status, attempts) in enumerate([("running", 1), ("queued", 0), ("queued", 0)])]
    running.refresh_from_db()
    assert client.get(live.live_url(running, "master.m3u8")).status_code == 404  # nothing stored yet
    record(parts[0], [("seg_00000.ts", 1.0), ("seg_00001.ts", 4.0)], audio=[("seg_00000.ts", 4.0)])
    master = client.get(live.live_url(running, "master.m3u8")).content.decode()
    assert 'TYPE=AUDIO,GROUP-ID="audio"' in master and 'AUDIO="audio"' in master
    assert playlist_uris(client.get(live.live_url(running, "audio/index.m3u8")).content.decode()) == [
        f"{parts[0].id}/1/seg_00000.ts"]
    # The second chunk runs: the video stops where the first chunk's stored part stops.
    Job.objects.filter(id=parts[1].id).update(status="running", attempts=1)
    parts[1].refresh_from_db()
    record(parts[1], [("seg_00003.ts", 4.0)])
    assert len(playlist_uris(client.get(live.live_url(running, "360p/index.m3u8")).content.decode())) == 2
    # The first is done: the second's segments follow its own, each under its attempt.
    Job.objects.filter(id=parts[0].id).update(status="succeeded")
    uris = playlist_uris(client.get(live.live_url(running, "360p/index.m3u8")).content.decode())
    assert uris == [f"{parts[0].id}/1/seg_00000.ts", f"{parts[0].id}/1/seg_00001.ts", f"{parts[1].id}/1/seg_00003.ts"]
    assert get(client, live.live_url(running, f"360p/{uris[-1]}")) == (200, SEGMENT)
    assert live.stream_for(running).encoded_s == 4.0  # the sound's stored part is the shorter
    # The first chunk's encoders end: the whole sound is there (its playlist ends), the video goes on.
    record(parts[0], [("seg_00000.ts", 1.0), ("seg_00001.ts", 4.0)],
           audio=[("seg_00000.ts", 4.0), ("seg_00001.ts", 8.0)], complete=True)
    assert live.stream_for(running).encoded_s == 9.0
    assert client.get(live.live_url(running, "audio/index.m3u8")).content.decode().endswith("#EXT-X-ENDLIST\n")
    assert "#EXT-X-ENDLIST" not in client.get(live.live_url(running, "360p/index.m3u8")).content.decode()
    # The last chunk's encoder ends (its job not yet marked done), then the second's: the video is whole.
    Job.objects.filter(id=parts[2].id).update(status="running", attempts=1)
    parts[2].refresh_from_db()
    record(parts[2], [("seg_00004.ts", 4.0)], complete=True)
    assert "#EXT-X-ENDLIST" not in client.get(live.live_url(running, "360p/index.m3u8")).content.decode()
    record(parts[1], [("seg_00003.ts", 4.0)], complete=True)
    variant = client.get(live.live_url(running, "360p/index.m3u8")).content.decode()
    assert variant.endswith("#EXT-X-ENDLIST\n") and len(playlist_uris(variant)) == 4


def test_the_api_says_when_and_what_can_be_watched(running, api_client_for):
    api = api_client_for(running.owner)
    body = api.get(f"/api/jobs/{running.id}/").json()
    assert body["playable_at"] is None and body["stream"] is None
    record(running, [("seg_00000.ts", 1.0), ("seg_00001.ts", 4.0)])
    assert services.job_live_record(job_id=str(running.id), attempt=2, live=running.live, playable=True)
    body = api.get(f"/api/jobs/{running.id}/").json()
    assert body["playable_at"] is not None
    stream = body["stream"]
    assert stream["live"] is True and stream["renditions"] == ["240p", "360p", "720p"]
    assert stream["encoded_s"] == 5.0 and stream["duration_s"] == 30.0
    assert "/o/live/" in stream["url"] and stream["url"].startswith("http")


def test_only_the_attempt_that_owns_the_job_records_and_playable_at_is_set_once(running):
    heard: list[lifecycle.JobPlayable] = []
    lifecycle.job_playable.connect(heard.append)
    try:
        state = {"tracks": {"video": [["seg_00000.ts", 1.0]]}}
        assert not services.job_live_record(job_id=str(running.id), attempt=1, live=state, playable=True)
        running.refresh_from_db()
        assert running.live == {} and running.playable_at is None
        with mock.patch("uploads.services.dispatcher.after_commit", side_effect=lambda fn: fn()):
            assert services.job_live_record(job_id=str(running.id), attempt=2, live=state, playable=True)
            first = Job.objects.get(id=running.id).playable_at
            assert services.job_live_record(job_id=str(running.id), attempt=2, live=state, playable=True)
        assert first is not None and Job.objects.get(id=running.id).playable_at == first
        assert heard == [lifecycle.JobPlayable(job_id=str(running.id), owner_id=running.owner_id)]
    finally:
        lifecycle.job_playable.disconnect(heard.append)
