"""A long video's job as parts (chunks, one audio job, a finalizer): the
jobs side of transcoding/chunks.py.

The parent is the job the user sees. Its first attempt probes the file and,
when the video is long, splits it (job_split): the parts are created as jobs
of the same owner, in the same transaction that ends the parent's attempt,
and go through the fair dispatcher like any job (charged to the owner's
share, counted by the owner's cap, each with its own attempts, lease and
retries: a chunk that fails or whose host is lost runs again alone). The
parent stays `running`, without a lease (nothing runs it; the sweep that
recovers expired leases leaves it alone), until its parts end it:

- every chunk and the audio succeeded: the finalizer job is created, once,
  under a lock on the parent row (whichever part ends last creates it; the
  unique constraint on (parent, part, part_index) backs the lock);
- the finalizer succeeded: its outputs become the parent's and the parent
  succeeds, in the same transaction;
- a part failed for good (or was canceled by an operator): the parent
  fails with its error, and the other parts are canceled;
- the parent ended (canceled, failed, deleted): its unfinished parts are
  canceled (parts_cancel).

Parts have no upload of their own, so the user's job lists, batches and
notifications never see them; the admin shows them under their parent.
"""
from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import F, Sum

import dispatcher
import media
from project.dbclock import db_now
from uploads import services
from uploads.models import Job, JobAttempt, Output

log = logging.getLogger(__name__)


def _part(parent: Job, part: str, *, index: int | None, cost: float, now) -> Job:
    job = Job(parent=parent, owner_id=parent.owner_id, kind=Job.Kind.VIDEO, lane=parent.lane, part=part,
              part_index=index, queued_at=now, cost_estimate=cost)
    job.task_id = str(job.id)  # until a delivery records its message's id (services.job_start)
    return job


def job_split(*, job_id: str, attempt: int, plan: dict, chunk_costs: list[float], audio_cost: float | None,
              keep_first: bool = False) -> bool | str:
    """running attempt `attempt` of the parent -> its parts, queued and
    submitted after commit. The attempt ends as "split"; the parent keeps
    running without a lease. False when the attempt no longer owns the job
    (nothing is created). With `keep_first` the first chunk is not
    submitted: its id is returned, for the caller to run it at once, in
    the slot it holds (transcoding/services.py); if the caller dies before
    it starts it, the reconciler submits it as any queued job the
    dispatcher does not hold."""
    with transaction.atomic():
        parent = Job.objects.select_for_update().filter(
            id=job_id, status=Job.Status.RUNNING, attempts=attempt).first()
        if parent is None:
            return False
        now = db_now()
        # The audio first: it is short, and the finalizer waits for it too.
        parts = ([_part(parent, Job.Part.AUDIO, index=0, cost=audio_cost, now=now)] if audio_cost is not None else [])
        parts += [_part(parent, Job.Part.CHUNK, index=i, cost=cost, now=now) for i, cost in enumerate(chunk_costs)]
        for job in parts:
            job.save()
        Job.objects.filter(id=job_id).update(media_info={**parent.media_info, "chunks": plan},
                                             lease_expires_at=None, progress=1, checkpoint={})
        JobAttempt.objects.filter(job_id=job_id, number=attempt, finished_at__isnull=True).update(
            finished_at=now, outcome="split")
        first = next(str(job.id) for job in parts if job.part == Job.Part.CHUNK) if keep_first else None
        ids = [str(job.id) for job in parts if str(job.id) != first]
        dispatcher.after_commit(lambda: services.jobs_enqueue(job_ids=ids))
    log.info("job %s split into %d chunk(s)%s", job_id, len(chunk_costs), " and its audio" if audio_cost else "")
    return first or True


def parts_cancel(*, parent_id: str, message: str) -> list[str]:
    """Cancel the unfinished parts of a parent that has ended; inside the
    caller's transaction. A held part leaves the backlog after commit; a
    running one stops at its next progress report."""
    canceled = [str(job.id) for job in Job.objects.select_for_update().filter(parent_id=parent_id,
                                                                                status__in=Job.UNFINISHED)
                if services.job_finish(job_id=str(job.id), status=Job.Status.CANCELED, error_code="canceled",
                                       error_message=message)]
    if canceled:
        dispatcher.after_commit(lambda: dispatcher.cancel(services.TRANSCODE_TASK, canceled))
    return canceled


def _progress(parent_id: str) -> int:
    """The parent's progress: its parts' work done, weighted by their
    estimated cost (ended parts count whole); the finalizer's 1% is left."""
    rows = Job.objects.filter(parent_id=parent_id).exclude(part=Job.Part.FINALIZE).aggregate(
        total=Sum("cost_estimate"), done=Sum(F("cost_estimate") * F("progress")))
    total = rows["total"] or 0.0
    return max(1, min(99, int((rows["done"] or 0.0) / total))) if total else 1


def parent_progress_refresh(*, parent_id: str) -> None:
    """A part reported progress: its running parent shows its parts' sum
    (one UPDATE, at most once a second per running part)."""
    Job.objects.filter(id=parent_id, status=Job.Status.RUNNING).update(progress=_progress(parent_id))


def part_finished(*, part: Job, status: str, error_code: str, error_message: str) -> None:
    """A part has just ended (inside the transaction that ended it): move its
    parent on. The parent row is locked first, so two parts ending at once on
    two hosts are serialised, and the finalizer is created exactly once."""
    parent = Job.objects.select_for_update().filter(id=part.parent_id).first()
    if parent is None or parent.status != Job.Status.RUNNING:
        return  # the parent ended first (canceled, failed): nothing to move on
    parent_id = str(parent.id)
    if status != Job.Status.SUCCEEDED:
        why = error_message or f"A part of the video ({part.part}) was {status}."
        services.job_finish(job_id=parent_id, status=Job.Status.FAILED, error_code=error_code or status,
                            error_message=why)
        log.info("job %s failed because its %s part %s ended %s", parent_id, part.part, part.id, status)
        return
    if part.part == Job.Part.FINALIZE:
        Output.objects.filter(job_id=part.id).update(job_id=parent.id)
        services.job_finish(job_id=parent_id, status=Job.Status.SUCCEEDED, progress=100)
        # The finalizer copied the chunks' and the audio's segments into the
        # bundle; their own copies (and outputs) are of no more use.
        done = [str(i) for i in Job.objects.filter(parent_id=parent.id).exclude(id=part.id)
                .values_list("id", flat=True)]
        Output.objects.filter(job_id__in=done).delete()
        prefixes = [media.job_prefix(job_id=job_id) for job_id in done]
        transaction.on_commit(lambda: services.media_delete(prefixes=prefixes))
        log.info("job %s finished from its parts", parent_id)
        return
    parent_progress_refresh(parent_id=parent_id)
    siblings = Job.objects.filter(parent_id=parent.id)
    waiting = siblings.exclude(part=Job.Part.FINALIZE).exclude(status=Job.Status.SUCCEEDED).exists()
    if waiting or siblings.filter(part=Job.Part.FINALIZE).exists():
        return
    finalizer = _part(parent, Job.Part.FINALIZE, index=None, cost=max(0.05, parent.cost_estimate * 0.02),
                      now=db_now())
    finalizer.save()
    dispatcher.after_commit(lambda: services.jobs_enqueue(job_ids=[str(finalizer.id)]))
    log.info("job %s: every part done, finalizer %s queued", parent_id, finalizer.id)


def part_outputs(*, parent_id: str) -> tuple[list[Output], Output | None, Output | None]:
    """For the finalizer: each chunk's segments output (in chunk order), the
    sound's (the first chunk's `audio`, or an audio part's in a plan stored
    before), and the first chunk's poster."""
    outputs = list(Output.objects.filter(job__parent_id=parent_id, job__status=Job.Status.SUCCEEDED)
                   .select_related("job").order_by("job__part_index"))
    chunks = [o for o in outputs if o.job.part == Job.Part.CHUNK and o.name == "segments"]
    audio = next((o for o in outputs if o.job.part == Job.Part.AUDIO or o.name == "audio"), None)
    poster = next((o for o in outputs if o.job.part == Job.Part.CHUNK and o.name == "poster"), None)
    return chunks, audio, poster


def part_job_ids(*, parent_ids: list) -> list[str]:
    return [str(i) for i in Job.objects.filter(parent_id__in=parent_ids).values_list("id", flat=True)]
