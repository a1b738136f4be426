"""Transcode one job: copy its input to a private scratch folder, probe, run
the pipeline for its kind there, upload the outputs under the attempt's
own prefix; the database transition publishes them. Claiming, leases, retries and
failures are uploads/attempts.py's: a media error (MediaError) fails the job
with its code and touches nothing else.
"""
from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from django.conf import settings

import media
from transcoding import ladder, pipelines
from transcoding.probe import Probe, probe_file
from uploads import services as job_services
from uploads.attempts import Attempt, job_attempt_run
from uploads.services import OutputFile

log = logging.getLogger(__name__)

# Estimated worker seconds per second of media, by kind, for the fair
# dispatcher's charge (corrected afterwards by the measured run time). Video
# is the ladder from a 1080p source (bench/media.py: about 1.6 s of wall time
# per media second on an idle 2-core machine), scaled down by frame size.
COST_PER_MEDIA_SECOND = {"video": 1.6, "audio": 0.05}
COST_FLAT = {"image": 0.3, "pdf": 0.3}


def cost_estimate(probe: Probe) -> float:
    per_second = COST_PER_MEDIA_SECOND.get(probe.kind, 0.0)
    if probe.kind == "video":
        per_second *= max(0.1, min(1.0, (probe.width or 0) * (probe.height or 0) / ladder.FULL_HD_PIXELS))
    return max(0.05, COST_FLAT.get(probe.kind, 0.0) + per_second * probe.duration_s)


# Fault injection (tests/chaos, FAIRLANE_FAULT_INJECTION only): a file that
# starts with this kills the process that opens it, every time, as a file
# that crashes or exhausts its worker would.
FAULT_POISON_MARKER = b"FAIRLANE-POISON-PILL"


def _poison_check(src: Path) -> None:
    if settings.FAIRLANE_FAULT_INJECTION:
        with open(src, "rb") as f:
            if f.read(len(FAULT_POISON_MARKER)) == FAULT_POISON_MARKER:
                log.warning("fault injection: poison pill %s kills worker process %d", src, os.getpid())
                os.kill(os.getpid(), signal.SIGKILL)


def transcode(attempt: Attempt) -> list[OutputFile]:
    """The work of one attempt (uploads/attempts.py runs it): copy the input
    into the attempt's scratch folder, probe, check the limits, run the
    pipeline for the kind there, and upload what it made under the
    attempt's own prefix. Publishing is the database transition's
    (job_succeed); the scratch folder goes on every way out.

    The input is copied whole rather than read by ffmpeg through a
    presigned URL: the probe and the ladder read it several times (and seek
    for the poster), a copy is bounded by the upload limit and fetched in
    parallel ranges, and ffmpeg keeps to the `file` protocol, never the
    network."""
    job, job_id = attempt.job, str(attempt.job.id)
    started = time.monotonic()
    with media.attempt_scratch(job_id=job_id, attempt=attempt.number) as scratch:
        src = scratch / "input"
        media.fetch(job.upload.file.name, src, read_only=True)
        fetched = time.monotonic()
        _poison_check(src)
        workdir = scratch / "out"
        workdir.mkdir()
        probe = probe_file(src)  # also refuses media above the size and duration limits
        job_services.job_probe_record(job_id=job_id, kind=probe.kind, media_info=probe.as_json(),
                                      cost_estimate=cost_estimate(probe))
        # The progress write doubles as the stop check: when the job is no
        # longer this attempt's (canceled, handed back, taken over) it
        # raises, which kills ffmpeg's process group (transcoding/ffmpeg.py).
        produced = pipelines.PIPELINES[probe.kind](src, workdir, probe, attempt.progress)
        encoded = time.monotonic()
        attempt.progress(99)  # still ours? then upload (a replaced attempt stops here)
        prefix = attempt.outputs_prefix
        sizes = media.put_tree(workdir, prefix)
        outputs = [OutputFile(name=p.name, path=prefix + p.filename, content_type=p.content_type,
                              size=sizes[p.filename], metadata=p.metadata) for p in produced]
        log.info("job %s transcoded: %s, %d outputs in %.2f s (fetch %.3f s, upload %.3f s)", job_id, probe.kind,
                 len(outputs), time.monotonic() - started, fetched - started, time.monotonic() - encoded)
        return outputs


def job_transcode(*, job_id: str, hostname: str = "", soft_limit_s: float | None = None,
                  task_id: str = "") -> str | None:
    """Run one delivery of a transcode job; see uploads.attempts.job_attempt_run."""
    return job_attempt_run(job_id=job_id, hostname=hostname, soft_limit_s=soft_limit_s, work=transcode,
                           task_id=task_id)
