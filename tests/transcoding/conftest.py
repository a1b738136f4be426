"""Pipelines called directly on generated files (no database, no workers),
and whole jobs run by their task in this process (database, no broker)."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.core.files import File

import media

from project.lanes import Lane
from transcoding import pipelines, tasks
from transcoding.probe import probe_file
from transcoding.produced import Produced
from uploads.attempts import JobFailed
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

    def __init__(self, owner, media_root: Path, scratch: Path):
        self.owner = owner
        self.media_root = media_root
        self.scratch = scratch
        self.job_ids: list[str] = []
        # Where FileSystemStorage stores this user's uploads: bait is put
        # here, beside the stored file.
        self.folder = media_root / "uploads" / str(owner.id)
        self.folder.mkdir(parents=True)

    def __call__(self, src: Path) -> Job:
        upload = Upload(owner=self.owner, batch=uuid.uuid4(), filename=src.name, size=src.stat().st_size)
        with open(src, "rb") as fh:
            upload.file.save("upload", File(fh), save=True)
        job = Job.objects.create(upload=upload, owner=self.owner, lane=Lane.CPU_TRANSCODE)
        self.job_ids.append(str(job.id))
        result = tasks.job_run.apply(args=[str(job.id)])
        if result.failed() and not isinstance(result.result, JobFailed):
            raise result.result  # a crash; JobFailed is the task's report of a failed job
        job.refresh_from_db()
        return job

    def leftovers(self) -> list[str]:
        """Scratch folders and stored outputs of the jobs it ran (a failed
        job leaves none)."""
        stored = [key for job_id in self.job_ids for key in media.list_prefix(media.job_prefix(job_id=job_id))]
        return [str(p) for p in self.scratch.glob("*")] + stored

    def outputs(self, job: Job, tmp_path: Path) -> list[Path]:
        """Local copies of every object the job published."""
        copies = []
        for key in media.list_prefix(media.job_prefix(job_id=str(job.id))):
            copies.append(tmp_path / "copies" / key)
            copies[-1].parent.mkdir(parents=True, exist_ok=True)
            media.fetch(key, copies[-1])
        return copies


@pytest.fixture
def run_job(make_user, settings, tmp_path: Path) -> JobRunner:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    # The job runs inside the test's transaction, which the lease keeper's own
    # connection cannot see: a renewal would find no running job and mark the
    # attempt lost. One lease covers the whole run, whatever the machine's load.
    settings.FAIRLANE_JOB_LEASE_S = 3600
    return JobRunner(make_user("uploader"), settings.MEDIA_ROOT, settings.FAIRLANE_SCRATCH_DIR)
