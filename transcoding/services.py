"""Transcode one job: claim it, probe, run the pipeline for its kind in a
private work directory, publish the outputs atomically, record the result.

A duplicate delivery finds the job already claimed and returns at once; a
media error fails the job with its code and touches nothing else.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path

from django.conf import settings

from transcoding import ladder, pipelines
from transcoding.errors import MediaError
from transcoding.probe import Probe, probe_file
from uploads import services as job_services

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


def limits_check(probe: Probe) -> None:
    if probe.duration_s > settings.FAIRLANE_MAX_DURATION_S:
        raise MediaError(
            "too_long", f"Media longer than {int(settings.FAIRLANE_MAX_DURATION_S)} s is not accepted "
            f"(this one is {int(probe.duration_s)} s).",
        )
    # Checked from the header, before anything is decoded: this is what stops
    # decompression bombs (a few KB of PNG that inflate to gigabytes).
    if (probe.width or 0) * (probe.height or 0) > settings.FAIRLANE_MAX_PIXELS:
        raise MediaError("too_large", f"Pictures above {settings.FAIRLANE_MAX_PIXELS} pixels are not accepted "
                                      f"(this one is {probe.width}x{probe.height}).")


def outputs_dir(job_id: str) -> Path:
    return Path(settings.MEDIA_ROOT) / "outputs" / job_id


class JobCanceled(Exception):
    """The job stopped being `running` under us (an operator canceled it)."""


def job_transcode(*, job_id: str) -> None:
    job = job_services.job_start(job_id=job_id)
    if job is None:
        return
    started = time.monotonic()
    src = Path(job.upload.file.path)
    work_root = Path(settings.MEDIA_ROOT) / "tmp"
    work_root.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{job_id}-", dir=work_root))  # mode 0700
    try:
        probe = probe_file(src)
        limits_check(probe)
        job_services.job_probe_record(job_id=job_id, kind=probe.kind, media_info=probe.as_json(),
                                      cost_estimate=cost_estimate(probe))

        def on_progress(pct: int) -> None:
            # The progress write doubles as the cancellation check: an operator
            # canceled the job when it no longer is `running`. Raising here
            # kills ffmpeg's process group (transcoding/ffmpeg.py).
            if not job_services.job_progress_set(job_id=job_id, progress=pct):
                raise JobCanceled(job_id)

        produced = pipelines.PIPELINES[probe.kind](src, workdir, probe, on_progress)
        final = outputs_dir(job_id)
        if final.exists():  # left by an earlier attempt that died before recording
            shutil.rmtree(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        workdir.rename(final)  # atomic on one filesystem: readers see all outputs or none
        outputs = [
            job_services.OutputFile(
                name=p.name,
                path=str((final / p.filename).relative_to(settings.MEDIA_ROOT)),
                content_type=p.content_type,
                size=(final / p.filename).stat().st_size,
                metadata=p.metadata,
            )
            for p in produced
        ]
        if not job_services.job_succeed(job_id=job_id, outputs=outputs):
            shutil.rmtree(final, ignore_errors=True)  # canceled meanwhile: publish nothing
            log.info("job %s was canceled while finishing; outputs removed", job_id)
            return
        log.info("job %s succeeded: %s, %d outputs in %.2f s", job_id, probe.kind, len(outputs),
                 time.monotonic() - started)
    except JobCanceled:
        log.info("job %s canceled while running; stopped and cleaned up", job_id)
    except MediaError as exc:
        log.info("job %s failed: %s: %s", job_id, exc.code, exc.message)
        job_services.job_fail(job_id=job_id, code=exc.code, message=exc.message)
    except Exception:
        # A bug or an environment fault, not the user's file: fail the job so it
        # does not sit in `running` forever, and keep the traceback in the log.
        log.exception("job %s failed with an internal error", job_id)
        job_services.job_fail(job_id=job_id, code="internal_error",
                              message="Processing failed because of an internal error; it has been logged.")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
