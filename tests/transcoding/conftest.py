"""Pipelines called directly on generated files (no database, no workers),
and whole jobs run by their task in this process (database, no broker)."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.core.files import File

from project.lanes import Lane
from transcoding import pipelines, tasks
from transcoding.probe import probe_file
from transcoding.produced import Produced
from uploads.models import Job, Upload


@pytest.fixture
def transcode(tmp_path: Path):
    """Probe a file and run its pipeline into a fresh work directory; returns
    {output name: (absolute path, Produced)}."""

    def run(src: Path) -> dict[str, tuple[Path, Produced]]:
        workdir = tmp_path / f"work-{src.stem}"
        workdir.mkdir()
        probe = probe_file(src)
        produced = pipelines.PIPELINES[probe.kind](src, workdir, probe, lambda pct: None)
        return {p.name: (workdir / p.filename, p) for p in produced}

    return run


class JobRunner:
    """Uploads a file for one user and runs its `transcoding.job_run` task
    here, as a worker would after the dispatcher released it."""

    def __init__(self, owner, media_root: Path):
        self.owner = owner
        self.media_root = media_root
        # Where uploads.models.upload_path stores this user's files: what a
        # relative reference inside an uploaded file would be resolved against.
        self.folder = media_root / "uploads" / str(owner.id)
        self.folder.mkdir(parents=True)

    def __call__(self, src: Path) -> Job:
        upload = Upload(owner=self.owner, batch=uuid.uuid4(), filename=src.name, size=src.stat().st_size)
        with open(src, "rb") as fh:
            upload.file.save("upload", File(fh), save=True)
        job = Job.objects.create(upload=upload, owner=self.owner, lane=Lane.CPU_TRANSCODE)
        tasks.job_run.apply(args=[str(job.id)]).get()
        job.refresh_from_db()
        return job

    def leftovers(self) -> list[Path]:
        """Work directories and outputs on disk (a failed job leaves none)."""
        return [p for sub in ("tmp", "outputs") for p in (self.media_root / sub).glob("*")]


@pytest.fixture
def run_job(make_user, settings, tmp_path: Path) -> JobRunner:
    settings.MEDIA_ROOT = tmp_path / "media"
    # The job runs inside the test's transaction, which the lease keeper's own
    # connection cannot see: a renewal would find no running job and mark the
    # attempt lost. One lease covers the whole run, whatever the machine's load.
    settings.FAIRLANE_JOB_LEASE_S = 3600
    return JobRunner(make_user("uploader"), settings.MEDIA_ROOT)
