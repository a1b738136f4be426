"""Batch exports on both storage backends: assembled in the store, resumed
by the next attempt from the checkpoint alone (a fresh scratch folder, as
on another host), holding exactly the manifest frozen by the first
attempt."""
from __future__ import annotations

import os
import uuid
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

import media
from exports import services as exports
from uploads import attempts
from uploads.models import Job, Output, Upload

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def one_lease_for_the_run(settings):
    # The attempt runs inside the test's transaction, which the lease
    # keeper's own connection cannot see: no renewal may happen.
    settings.FAIRLANE_JOB_LEASE_S = 3600
    settings.FAIRLANE_EXPORT_CHUNK_FILES = 1


def publish(job: Job, files: dict[str, bytes], tmp_path: Path) -> Job:
    """The job succeeds, its attempt 1 having published `files`, an output each."""
    local = tmp_path / f"made-{job.id}"
    for rel, data in files.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(data)
    prefix = media.outputs_prefix(job_id=str(job.id), attempt=1)
    media.put_tree(local, prefix)
    for rel, data in files.items():
        Output.objects.create(job=job, name=rel, file=prefix + rel, content_type="video/mp2t", size=len(data))
    Job.objects.filter(pk=job.pk).update(status="succeeded", attempts=1)
    return job


def upload_job(owner, batch, name: str) -> Job:
    upload = Upload.objects.create(owner=owner, batch=batch, filename=name, file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="running")


def crash_first_attempt_after(monkeypatch, chunk: int) -> None:
    """The first attempt dies (a transient error: the job is queued again)
    right after its checkpoint number `chunk`, as a killed worker would."""
    def crash(done_chunk: int, attempt) -> None:
        if attempt.number == 1 and done_chunk == chunk:
            raise OSError("worker lost (simulated)")
    monkeypatch.setattr(exports, "_fault_crash_after", crash)


def run_attempt(job: Job, settings, tmp_path: Path, host: str) -> Job:
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / f"scratch-{host}"  # nothing shared but the store
    attempts.job_attempt_run(job_id=str(job.id), hostname="", soft_limit_s=None, work=exports.export_build)
    job.refresh_from_db()
    return job


def zip_of(job: Job, tmp_path: Path) -> zipfile.ZipFile:
    out = job.outputs.get(name="zip")
    local = tmp_path / "export.zip"
    media.fetch(out.file.name, local)
    assert local.stat().st_size == out.size
    archive = zipfile.ZipFile(local)
    assert archive.testzip() is None
    return archive


def test_a_resumed_export_holds_its_first_attempts_manifest_once(
        storage_backend, make_user, settings, tmp_path, monkeypatch):
    owner = make_user("exporter")
    batch = uuid.uuid4()
    # `early` sorts first in the batch, but is still transcoding when the export starts.
    early = upload_job(owner, batch, "early.mp4")
    Upload.objects.filter(pk=early.upload_id).update(created_at=timezone.now() - timedelta(days=1))
    late = publish(upload_job(owner, batch, "late.mp4"), {"a.ts": b"A" * 100, "b.ts": b"B" * 100,
                                                          "c.ts": b"C" * 100}, tmp_path)
    export = Job.objects.create(owner=owner, kind="export", batch=batch, lane="cpu-transcode",
                                queued_at=timezone.now())
    crash_first_attempt_after(monkeypatch, chunk=1)
    export = run_attempt(export, settings, tmp_path, "one")
    assert export.status == "queued" and export.checkpoint["entries"] == 1

    # Meanwhile the early upload finishes: had the next attempt rebuilt the
    # list, its files would take the first places and shift the rest.
    publish(early, {"x.ts": b"X" * 100, "y.ts": b"Y" * 100}, tmp_path)

    export = run_attempt(export, settings, tmp_path, "two")
    assert export.status == "succeeded", export.error
    zip_output = export.outputs.get(name="zip")
    assert zip_output.metadata == {"entries": 3, "resumed_from_entry": 1}
    archive = zip_of(export, tmp_path)
    folder = f"late.mp4-{late.upload_id.hex[:8]}"
    assert archive.namelist() == [f"{folder}/a.ts", f"{folder}/b.ts", f"{folder}/c.ts"]
    assert [archive.read(n) for n in archive.namelist()] == [b"A" * 100, b"B" * 100, b"C" * 100]


def test_an_export_spanning_several_parts_resumes_mid_way_on_another_host(
        storage_backend, make_user, settings, tmp_path, monkeypatch):
    settings.FAIRLANE_EXPORT_PART_BYTES = 5 * 1024 * 1024  # S3's minimum part
    owner = make_user("exporter")
    batch = uuid.uuid4()
    blobs = {f"seg_{i}.ts": os.urandom(3 * 1024 * 1024) for i in range(4)}  # a part every two entries
    publish(upload_job(owner, batch, "clip.mp4"), blobs, tmp_path)
    export = Job.objects.create(owner=owner, kind="export", batch=batch, lane="cpu-transcode",
                                queued_at=timezone.now())
    crash_first_attempt_after(monkeypatch, chunk=3)
    export = run_attempt(export, settings, tmp_path, "one")
    cp = export.checkpoint
    assert (cp["entries"], len(cp["parts"])) == (3, 1) and cp["tail"]["size"] > 0  # one part, one tail

    export = run_attempt(export, settings, tmp_path, "two")
    assert export.status == "succeeded", export.error
    assert export.outputs.get(name="zip").metadata["resumed_from_entry"] == 3
    archive = zip_of(export, tmp_path)
    assert [archive.read(n) for n in archive.namelist()] == [blobs[k] for k in sorted(blobs)]
    # Nothing of the assembly is left beside the published ZIP.
    key = export.outputs.get(name="zip").file.name
    assert list(media.list_prefix(media.exports_prefix(job_id=str(export.id)))) == [key]
    assert not any((tmp_path / "scratch-one").iterdir()) and not any((tmp_path / "scratch-two").iterdir())


def test_outputs_stored_under_another_jobs_prefix_are_exported_whole(
        storage_backend, make_user, settings, tmp_path):
    """A chunked video's outputs become its own, but stay where its finalizer
    stored them: the export follows the Output rows (an HLS output is its
    whole folder), not paths rebuilt from the job's id."""
    owner = make_user("exporter")
    batch = uuid.uuid4()
    video = upload_job(owner, batch, "long.mp4")
    finalizer = Job.objects.create(owner=owner, parent=video, part="finalize", lane="cpu-transcode")
    files = {"hls/master.m3u8": b"#EXTM3U\n360p/index.m3u8\n", "hls/360p/index.m3u8": b"#EXTM3U\nseg_0.ts\n",
             "hls/360p/seg_0.ts": b"S" * 300, "video.mp4": b"M" * 200}
    local = tmp_path / "finalized"
    for rel, data in files.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(data)
    prefix = media.outputs_prefix(job_id=str(finalizer.id), attempt=1)
    media.put_tree(local, prefix)
    Output.objects.create(job=video, name="hls", file=prefix + "hls/master.m3u8",
                          content_type="application/vnd.apple.mpegurl", size=len(files["hls/master.m3u8"]))
    Output.objects.create(job=video, name="mp4", file=prefix + "video.mp4", content_type="video/mp4", size=200)
    Job.objects.filter(pk=video.pk).update(status="succeeded", attempts=1)
    export = Job.objects.create(owner=owner, kind="export", batch=batch, lane="cpu-transcode",
                                queued_at=timezone.now())

    export = run_attempt(export, settings, tmp_path, "one")
    assert export.status == "succeeded", export.error
    archive = zip_of(export, tmp_path)
    folder = f"long.mp4-{video.upload_id.hex[:8]}"
    assert archive.namelist() == [f"{folder}/{rel}" for rel in sorted(files)]
    assert {name.removeprefix(folder + "/"): archive.read(name) for name in archive.namelist()} == files
