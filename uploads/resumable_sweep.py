"""Giving up abandoned resumable uploads on this web host.

A resumable upload's chunks are in a file under FAIRLANE_RESUMABLE_DIR on
the web host that received them, and its row (drf-tus's, with `expires`)
is in the shared database. Creating an upload deletes its owner's expired
ones, but an owner who never comes back would leave their chunks on disk
for good; this sweep, run on every web host by the Procfile's
`resumable-sweeper` (`manage.py sweep_resumable --every`), removes:

- expired uploads whose file is on this host: the row and the file
  (another host's expired uploads are that host's sweeper's: only it can
  remove the file, and it finds the row by its file);
- files here without a row (their row was deleted on another host, or by
  an owner's next upload there) once they are older than an upload may
  live, FAIRLANE_RESUMABLE_EXPIRE_S: no live upload can own them.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from uploads.models import ResumableUpload

log = logging.getLogger(__name__)

# Rows deleted per query, so a host that was down for a while catches up in
# bounded steps.
BATCH = 500


@dataclass(frozen=True)
class Swept:
    uploads: int  # expired uploads removed (row and file)
    orphans: int  # files removed that no upload owned


def _guid(stem: str) -> str | None:
    """The upload id a chunk file is named by; None for a name no upload has."""
    try:
        return str(uuid.UUID(stem))
    except ValueError:
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # removed meanwhile (another process of this host)
        return float("inf")


def sweep_expired() -> Swept:
    """Remove this host's expired resumable uploads and its orphaned chunk files."""
    uploads, last_pk = 0, 0
    while rows := list(ResumableUpload.objects.filter(expires__lt=timezone.now(), pk__gt=last_pk)
                       .order_by("pk").only("pk", "temporary_file_path")[:BATCH]):
        last_pk = rows[-1].pk
        for upload in rows:
            path = upload.temporary_file_path
            # No file yet: nothing on any host. Its file here: ours to remove.
            if not path or Path(path).is_file():
                upload.delete()  # drf-tus removes the file with the row
                uploads += 1
    orphans = 0
    folder = Path(settings.FAIRLANE_RESUMABLE_DIR)
    if folder.is_dir():
        cutoff = time.time() - settings.FAIRLANE_RESUMABLE_EXPIRE_S
        old = [(_guid(p.stem), p) for p in folder.glob("*.part") if _mtime(p) < cutoff]
        for start in range(0, len(old), BATCH):
            chunk = old[start:start + BATCH]
            owned = {str(g) for g in ResumableUpload.objects.filter(
                guid__in=[g for g, _ in chunk if g is not None]).values_list("guid", flat=True)}
            for guid, path in chunk:
                if guid not in owned:
                    path.unlink(missing_ok=True)
                    orphans += 1
    if uploads or orphans:
        log.info("resumable uploads swept: %d expired, %d orphaned files", uploads, orphans)
    return Swept(uploads, orphans)
