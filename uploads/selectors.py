"""Reads. Every query about a user's things starts from the user, so another
user's job is simply not found (404), never forbidden (403)."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet, Sum
from django.shortcuts import get_object_or_404
from django.utils import timezone

from project.lanes import Lane
from uploads.models import Job


def jobs_for_user(*, user: AbstractBaseUser, status: str | None = None) -> QuerySet[Job]:
    jobs = Job.objects.filter(owner=user).select_related("upload").prefetch_related("outputs")
    if status:
        jobs = jobs.filter(status=status)
    return jobs.order_by("-created_at")


def job_get_for_user(*, user: AbstractBaseUser, job_id: str) -> Job:
    return get_object_or_404(jobs_for_user(user=user), id=job_id)


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
        Job.objects.filter(lane=Lane.CPU_TRANSCODE, finished_at__gte=since, process_ms__isnull=False)
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
