"""The uploads app's periodic task: beat runs it on one host for all."""
from __future__ import annotations

from celery import shared_task

from uploads import direct


@shared_task(name="uploads.direct_sweep", ignore_result=True)
def direct_sweep() -> None:
    """Give up expired direct uploads and abort orphaned multipart uploads."""
    direct.direct_uploads_sweep()
