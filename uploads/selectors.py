"""Reads. Every query about a user's things starts from the user, so another
user's job is simply not found (404), never forbidden (403)."""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from uploads.models import Job


def jobs_for_user(*, user: AbstractBaseUser, status: str | None = None) -> QuerySet[Job]:
    jobs = Job.objects.filter(owner=user).select_related("upload").prefetch_related("outputs")
    if status:
        jobs = jobs.filter(status=status)
    return jobs.order_by("-created_at")


def job_get_for_user(*, user: AbstractBaseUser, job_id: str) -> Job:
    return get_object_or_404(jobs_for_user(user=user), id=job_id)
