"""Reads. Every query about a user's things starts from the user, so another
user's job is simply not found (404), never forbidden (403)."""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.shortcuts import get_object_or_404
from django.utils import timezone
from rest_framework.authtoken.models import Token

from project.lanes import Lane
from uploads import rates
from uploads.models import Batch, Job, Upload


def jobs_for_user(*, user: AbstractBaseUser, status: str | None = None, batch: uuid.UUID | None = None,
                  search: str = "", kind: str | None = None) -> QuerySet[Job]:
    """`search`: part of the file's name, any case (a scan of the user's
    rows: fine for thousands, an index on lower(filename) for millions).
    A chunked job's parts are the admin's business (uploads/parts.py)."""
    jobs = Job.objects.filter(owner=user, parent__isnull=True).select_related("upload").prefetch_related("outputs")
    if status:
        jobs = jobs.filter(status=status)
    if kind:
        jobs = jobs.filter(kind=kind)
    if search:
        jobs = jobs.filter(upload__filename__icontains=search)
    if batch:  # its uploads' jobs and its exports
        jobs = jobs.filter(Q(upload__batch=batch) | Q(kind=Job.Kind.EXPORT, batch=batch))
    return jobs.order_by("-created_at")


def job_get_for_user(*, user: AbstractBaseUser, job_id: str) -> Job:
    return get_object_or_404(jobs_for_user(user=user), id=job_id)


# What is moving: at most this many running and this many just-ended jobs,
# ended at most this long ago.
MOVING_SHOWN = 5
MOVING_RECENT_S = 600


@dataclass
class Moving:
    running: list[Job]
    finished: list[Job]
    running_count: int
    queued_count: int


def jobs_moving(*, user: AbstractBaseUser, batch: uuid.UUID | None = None) -> Moving:
    """The user's (or a batch's) running jobs, first started first, and the
    ones that ended last, with how many run and wait. A user's files run
    oldest first, so during a flood a newest-first list shows only queued
    files on its first pages; this is what moves. Four small queries: the
    running and queued counts through the status index, the running rows,
    and the recently ended through (owner, finished_at)."""
    jobs = jobs_for_user(user=user, batch=batch)
    counts = dict(jobs.filter(status__in=[Job.Status.RUNNING, Job.Status.QUEUED]).order_by()
                  .values_list("status").annotate(n=Count("id")))
    since = timezone.now() - timedelta(seconds=MOVING_RECENT_S)
    return Moving(
        running=list(jobs.filter(status=Job.Status.RUNNING).order_by("started_at")[:MOVING_SHOWN]),
        finished=list(jobs.filter(status__in=Job.TERMINAL, finished_at__gte=since)
                      .order_by("-finished_at")[:MOVING_SHOWN]),
        running_count=counts.get(Job.Status.RUNNING, 0), queued_count=counts.get(Job.Status.QUEUED, 0))


def uploads_for_user(*, user: AbstractBaseUser, batch: uuid.UUID | None = None) -> QuerySet[Upload]:
    uploads = Upload.objects.filter(owner=user).prefetch_related("jobs")
    if batch:
        uploads = uploads.filter(batch=batch)
    return uploads.order_by("-created_at")


def upload_get_for_user(*, user: AbstractBaseUser, upload_id) -> Upload:
    return get_object_or_404(uploads_for_user(user=user), id=upload_id)


def api_token_for_user(*, user: AbstractBaseUser) -> Token | None:
    """The user's API token (DRF authtoken: at most one), if any."""
    return Token.objects.filter(user=user).first()


def batches_for_user(*, user: AbstractBaseUser) -> QuerySet[Batch]:
    return Batch.objects.filter(owner=user).order_by("-created_at")


def batch_get_for_user(*, user: AbstractBaseUser, batch_id) -> Batch:
    return get_object_or_404(batches_for_user(user=user), id=batch_id)


@dataclass
class BatchProgress:
    """Where a batch's files are: jobs per status, and the share of its
    estimated work done (ended jobs count whole, running ones by their
    progress)."""

    counts: dict[str, int]
    files: int
    progress: int
    unfinished: int
    last_created_at: datetime | None


def batches_progress(*, owner_id: int, batch_ids: list[uuid.UUID]) -> dict[uuid.UUID, BatchProgress]:
    """BatchProgress of each of the owner's batches, in one grouped query
    over their files' jobs. Asked of the owner's jobs, not of the batches
    alone: PostgreSQL joined the batches' uploads to a scan of every
    user's jobs, so each poll cost more as others queued work."""
    rows = (Job.objects.filter(owner_id=owner_id, upload__batch__in=batch_ids).values("upload__batch", "status")
            .annotate(n=Count("id"), cost=Sum("cost_estimate"), done=Sum(F("cost_estimate") * F("progress")),
                      last=Max("created_at")).order_by())
    summary = {batch_id: BatchProgress({s: 0 for s in Job.Status.values}, 0, 0, 0, None)
               for batch_id in batch_ids}
    totals = {batch_id: [0.0, 0.0] for batch_id in batch_ids}  # [all work, work done]
    for row in rows:
        item, status = summary[row["upload__batch"]], row["status"]
        item.counts[status] = row["n"]
        item.files += row["n"]
        item.last_created_at = max(filter(None, [item.last_created_at, row["last"]]))
        cost, done = row["cost"] or 0.0, (row["done"] or 0.0) / 100
        if status in Job.TERMINAL:
            done = cost
        else:
            item.unfinished += row["n"]
        totals[row["upload__batch"]][0] += cost
        totals[row["upload__batch"]][1] += done
    for batch_id, (work, done) in totals.items():
        item = summary[batch_id]
        item.progress = 100 if item.files and not item.unfinished else (int(100 * done / work) if work else 0)
    return summary


@dataclass(frozen=True)
class KeyBacklog:
    """A user's unfinished work of one rate key (uploads/rates.py)."""

    jobs: int
    units: float  # units still to do: a running job counts by what its progress says is left
    cost_s: float  # the same work in the jobs' static estimates (cost_estimate), for a key not measured yet


def backlog_until(*, user: AbstractBaseUser, until: dict[uuid.UUID, datetime]
                  ) -> dict[uuid.UUID, dict[str, KeyBacklog]]:
    """For each batch: the user's unfinished work on the transcode lane up
    to and including that batch's last job, per rate key. A user's
    backlog runs in order, so that is the work between now and the batch's
    end. One grouped, conditional aggregate over the user's own unfinished
    jobs (the (owner, status) index), never other users', reading each
    job's stored rate key and units (rates.rate_of; a job stored without
    them has them filled first, once: rates.rate_keys_fill)."""
    if not until:
        return {}
    left = (100 - F("progress")) / 100.0
    # A chunked job's parent carries the whole video; its parts are not counted again.
    unfinished = Job.objects.filter(owner=user, lane=Lane.CPU_TRANSCODE, parent__isnull=True,
                                    status__in=Job.UNFINISHED)
    sums = {}
    for i, last in enumerate(until.values()):
        upto = Q(created_at__lte=last)
        sums[f"n{i}"] = Count("id", filter=upto)
        sums[f"u{i}"] = Sum(F("rate_units") * left, filter=upto)
        sums[f"c{i}"] = Sum(F("cost_estimate") * left, filter=upto)
    grouped = unfinished.values("rate_key").annotate(**sums).order_by()
    rows = list(grouped)
    if any(row["rate_key"] is None for row in rows):
        rates.rate_keys_fill(unfinished)
        rows = list(grouped.all())  # asked again, not the cached rows
    return {batch_id: {row["rate_key"]: KeyBacklog(row[f"n{i}"], float(row[f"u{i}"] or 0.0), float(row[f"c{i}"] or 0.0))
                       for row in rows if row[f"n{i}"] and row["rate_key"] is not None}
            for i, batch_id in enumerate(until)}


def backlog_until_reused(*, user: AbstractBaseUser, until: dict[uuid.UUID, datetime], seen: object
                         ) -> dict[uuid.UUID, dict[str, KeyBacklog]]:
    """backlog_until, reused for FAIRLANE_ESTIMATE_REUSE_S while `seen` (what
    the caller read of the same batches: their counts and progress) is the
    same. Each of a user's open pages polls; a thousand of them asked the
    same aggregate over the same jobs a thousand times, and it was most of
    what their polls cost the database (bench-isolation). A change in the
    polled batches is seen at once; one elsewhere in the user's backlog
    (an earlier batch's) within the interval. In the default cache (per
    process unless CACHES says otherwise), one entry per user and polled
    batches, bounded by the cache's own culling."""
    reuse_s = settings.FAIRLANE_ESTIMATE_REUSE_S
    if not until or reuse_s <= 0:
        return backlog_until(user=user, until=until)
    key = "fairlane:backlog:" + hashlib.sha256(repr((user.pk, sorted(until.items()))).encode()).hexdigest()
    kept = cache.get(key)
    if kept is not None and kept[0] == seen:
        return kept[1]
    backlog = backlog_until(user=user, until=until)
    cache.set(key, (seen, backlog), reuse_s)
    return backlog


def _percentile(ordered: list[int], q: float) -> int | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def transcode_usage_by_user(*, minutes: int = 10) -> dict[str, dict]:
    """Per user over the last `minutes`: share of cpu-transcode worker time
    (processing time of jobs that finished) and wait p50/p99 (jobs that
    started). Keyed like the fair dispatcher's keys (user id as text)."""
    since = timezone.now() - timedelta(minutes=minutes)
    busy = dict(
        # A chunked job's parent spans its parts' run (they are counted); it did no work itself.
        Job.objects.filter(lane=Lane.CPU_TRANSCODE, finished_at__gte=since, process_ms__isnull=False)
        .exclude(media_info__has_key="chunks")
        .values_list("owner_id").annotate(total=Sum("process_ms")).values_list("owner_id", "total")
    )
    waits: dict[int, list[int]] = {}
    recent = Job.objects.filter(lane=Lane.CPU_TRANSCODE, started_at__gte=since, wait_ms__isnull=False)
    for owner_id, wait_ms in recent.values_list("owner_id", "wait_ms")[:100_000]:
        waits.setdefault(owner_id, []).append(wait_ms)
    total = sum(busy.values()) or 1
    usage = {}
    for owner_id in set(busy) | set(waits):
        ordered = sorted(waits.get(owner_id, []))
        usage[str(owner_id)] = {
            "share": busy.get(owner_id, 0) / total,
            "wait_p50_ms": _percentile(ordered, 50),
            "wait_p99_ms": _percentile(ordered, 99),
        }
    return usage


def transcode_usage_history(*, minutes: int = 60) -> dict:
    """Per user and per minute over the last `minutes`: share of cpu-transcode
    worker time (processing time of the jobs that finished in that minute)
    and wait p99 (of the jobs that started in it), for the staff page's
    charts. Read from the Job rows themselves (their finished_at, started_at,
    process_ms and wait_ms are the history): nothing is recorded for it, and
    it is as exact as the rows. At most 100,000 jobs per kind are read."""
    now = timezone.now()
    start = (now - timedelta(minutes=minutes)).replace(second=0, microsecond=0)
    buckets = [int((start + timedelta(minutes=i)).timestamp()) for i in range(minutes + 1)]

    def bucket(at) -> int:
        return min(minutes, int((at - start).total_seconds() // 60))

    busy: dict[int, list[float]] = {}
    totals = [0.0] * len(buckets)
    finished = Job.objects.filter(lane=Lane.CPU_TRANSCODE, finished_at__gte=start, process_ms__isnull=False)
    for owner_id, at, process_ms in finished.values_list("owner_id", "finished_at", "process_ms")[:100_000]:
        i = bucket(at)
        busy.setdefault(owner_id, [0.0] * len(buckets))[i] += process_ms
        totals[i] += process_ms
    waits: dict[int, list[list[int]]] = {}
    started = Job.objects.filter(lane=Lane.CPU_TRANSCODE, started_at__gte=start, wait_ms__isnull=False)
    for owner_id, at, wait_ms in started.values_list("owner_id", "started_at", "wait_ms")[:100_000]:
        waits.setdefault(owner_id, [[] for _ in buckets])[bucket(at)].append(wait_ms)
    users = {}
    for owner_id in set(busy) | set(waits):
        own = busy.get(owner_id, [0.0] * len(buckets))
        own_waits = waits.get(owner_id, [[] for _ in buckets])
        users[str(owner_id)] = {
            "share_pct": [round(100 * b / t, 1) if t else None for b, t in zip(own, totals)],
            "wait_p99_ms": [_percentile(sorted(w), 99) for w in own_waits],
        }
    return {"t": buckets, "users": users}
