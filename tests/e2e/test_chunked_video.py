"""A long video through real workers (on whichever storage backend the run
uses): split into parts that the fair dispatcher runs as the owner's jobs,
seen by the user as one job, finished by one finalizer, and a stream whose
joins a player cannot find. The workers' thresholds are lowered
(tests/conftest.py, chunking_workers) so that a 16 s clip is four chunks of
two 2 s segments."""
from __future__ import annotations

import posixpath
from pathlib import Path

import pytest

import media
from media import input_cache
from tests.e2e.test_upload_slice import post_files, wait_terminal
from tests.hls_checks import (
    continuity_breaks,
    joined,
    master_audio_uri,
    playlist_segments,
    stream_facts,
)
from tests.media import make_video
from tests.promise import wait_for
from tests.workers import running_job_held, wait_settled
from uploads.models import Job, JobAttempt, Output

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECONDS, FPS = 16, 25


def fetch_bundle(output: Output, to: Path) -> Path:
    """The stored HLS folder of an output, through the storage seam."""
    root = posixpath.dirname(output.file.name) + "/"
    for key in media.list_prefix(root):
        (to / key[len(root):]).parent.mkdir(parents=True, exist_ok=True)
        media.fetch(key, to / key[len(root):])
    return to / posixpath.basename(output.file.name)


def test_a_long_video_is_one_job_to_its_user_made_of_parts(chunking_workers, make_user, api_client_for, tmp_path):
    user = make_user("marathon")
    client = api_client_for(user)
    video = make_video(tmp_path / "long.mp4", seconds=SECONDS, size="640x360", rate=FPS)
    [upload] = post_files(client, [video]).json()["uploads"]
    job = wait_terminal(client, upload["job"]["url"], timeout=240)
    assert job["status"] == "succeeded", (job["error"], chunking_workers.log_tail("cpu"))
    assert job["progress"] == 100 and {o["name"] for o in job["outputs"]} == {
        "hls", "mp4", "poster", "storyboard", "storyboard_vtt"}
    assert [j["id"] for j in client.get("/api/jobs/").json()["results"]] == [job["id"]]

    parent = Job.objects.get(id=job["id"])
    kids = Job.objects.filter(parent=parent)
    # the first chunk makes the sound (no audio part), and runs in the slot of the delivery that split
    assert sorted((k.part, k.part_index, k.status) for k in kids if k.part != "finalize") == [
        ("chunk", i, "succeeded") for i in range(4)]
    assert kids.filter(part="finalize", status="succeeded").count() == 1
    assert {k.owner_id for k in kids} == {user.id}
    split = JobAttempt.objects.get(job=parent)
    assert split.outcome == "split"
    assert JobAttempt.objects.get(job=kids.get(part="chunk", part_index=0)).worker == split.worker
    assert parent.playable_at is not None and split.started_at < parent.playable_at < parent.finished_at
    # The source was scanned once on this host: the split's scan (media on
    # disk) or the first part's (streamed); every other part read its note.
    note = input_cache._note_path(parent.upload.file.name, "probe-").name
    log = [line for line in chunking_workers.procs["cpu"].log.read_text().splitlines() if note in line]
    assert sum("written" in line for line in log) == 1 and sum(" read" in line for line in log) >= 3, log

    master = fetch_bundle(parent.outputs.get(name="hls"), tmp_path / "hls")
    for rendition in ("240p", "360p"):
        stream = joined(playlist_segments(master.parent / rendition / "index.m3u8"), tmp_path / f"{rendition}.ts")
        facts = stream_facts(stream, "video")
        assert facts.errors == 0 and facts.steps == {1 / FPS}
        assert facts.decoded == SECONDS * FPS
        assert continuity_breaks(stream) == 0
    audio = stream_facts(joined(playlist_segments(master.parent / master_audio_uri(master)), tmp_path / "a.ts"),
                         "audio")
    assert audio.errors == 0 and audio.steps == {round(1024 / 48000, 4)}
    # the parts' own copies of the segments go once the bundle is published; the bundle stays
    wait_for(lambda: not any(media.list_prefix(media.job_prefix(job_id=str(k.id)))
                             for k in kids if k.part != "finalize"), 30, "the parts' copies deleted")
    assert media.exists(parent.outputs.get(name="mp4").file.name)


def test_canceling_a_chunked_job_stops_its_running_chunk_and_withdraws_the_rest(
        chunking_workers, make_user, api_client_for, tmp_path):
    client = api_client_for(make_user("quitter"))
    # 720p: a chunk runs for a few seconds, long enough to be caught running
    video = make_video(tmp_path / "long.mp4", seconds=SECONDS, size="1280x720", rate=FPS)
    [upload] = post_files(client, [video]).json()["uploads"]
    job_id = upload["job"]["id"]
    # Held (SIGSTOP) while the cancel is asked: it is running then, however fast the machine.
    with running_job_held(lambda: Job.objects.filter(parent_id=job_id, part="chunk", status="running",
                                                     attempt_log__isnull=False).first(), 120,
                          "a chunk running") as running:
        assert client.post(f"/api/jobs/{job_id}/cancel/").status_code == 200
    wait_for(lambda: not Job.objects.filter(parent_id=job_id, status__in=["queued", "running"]).exists(), 30,
             "every part ended")
    assert wait_settled(timeout_s=60)  # nothing left running or in flight in the dispatcher
    assert Job.objects.get(id=job_id).status == "canceled"
    running.refresh_from_db()
    assert running.status == "canceled" and running.outputs.count() == 0
    parts = Job.objects.filter(parent_id=job_id)
    assert not parts.filter(part="finalize").exists()
    assert set(parts.values_list("status", flat=True)) <= {"canceled", "succeeded"}
    assert parts.filter(status="canceled").count() >= 2  # the running chunk and at least one not started
