"""The web host's sweep of abandoned resumable uploads
(uploads/resumable_sweep.py, `manage.py sweep_resumable`): expired uploads
whose chunks are here go with their file, another host's stay for its
sweeper, live ones stay, and chunk files no upload owns go once no upload
could still be writing them."""
from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from uploads.models import ResumableUpload
from uploads.resumable_sweep import sweep_expired

pytestmark = pytest.mark.django_db
EXPIRE_S = 3600


@pytest.fixture
def folder(settings, tmp_path):
    settings.FAIRLANE_RESUMABLE_DIR = str(tmp_path / "resumable")
    settings.FAIRLANE_RESUMABLE_EXPIRE_S = EXPIRE_S
    (tmp_path / "resumable").mkdir()
    return tmp_path / "resumable"


def upload(user, folder, *, expired: bool, file_here: bool = True) -> ResumableUpload:
    """A resumable upload with 100 bytes received; its chunks on this host
    or (file_here=False) on another one, at the same path there."""
    row = ResumableUpload.objects.create(
        user=user, upload_length=1000, upload_offset=100, upload_metadata="{}", filename="clip.mp4",
        expires=timezone.now() + timedelta(seconds=-1 if expired else EXPIRE_S))
    path = folder / f"{row.guid}.part"
    if file_here:
        path.write_bytes(b"x" * 100)
    row.temporary_file_path = str(path)
    row.save(update_fields=["temporary_file_path"])
    return row


def aged(path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_expired_uploads_here_go_with_their_chunks_and_the_rest_stays(make_user, folder):
    alice, bob = make_user("alice"), make_user("bob")
    gone = upload(alice, folder, expired=True)
    live = upload(alice, folder, expired=False)
    elsewhere = upload(bob, folder, expired=True, file_here=False)
    never_written = ResumableUpload.objects.create(user=bob, upload_length=10, upload_metadata="{}",
                                                   expires=timezone.now() - timedelta(seconds=1))

    swept = sweep_expired()

    assert swept.uploads == 2
    left = set(ResumableUpload.objects.values_list("pk", flat=True))
    assert left == {live.pk, elsewhere.pk}  # another host's file is its sweeper's to remove
    assert not os.path.exists(gone.temporary_file_path)
    assert os.path.getsize(live.temporary_file_path) == 100
    assert never_written.pk not in left


def test_chunk_files_no_upload_owns_go_only_once_no_upload_could_own_them(make_user, folder):
    owned = upload(make_user("carol"), folder, expired=False)
    aged(owned.temporary_file_path, EXPIRE_S + 60)  # old, but its upload lives: kept
    orphan_old = folder / f"{uuid.uuid4()}.part"
    orphan_old.write_bytes(b"y")
    aged(orphan_old, EXPIRE_S + 60)
    orphan_young = folder / f"{uuid.uuid4()}.part"
    orphan_young.write_bytes(b"z")
    aged(orphan_young, EXPIRE_S - 60)
    junk_name = folder / "not-an-upload-id.part"
    junk_name.write_bytes(b"j")
    aged(junk_name, EXPIRE_S + 60)
    other_file = folder / "notes.txt"
    other_file.write_bytes(b"n")
    aged(other_file, EXPIRE_S + 60)

    swept = sweep_expired()

    assert swept == type(swept)(uploads=0, orphans=2)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [os.path.basename(owned.temporary_file_path), orphan_young.name, other_file.name])


def test_the_command_sweeps_once_and_says_what_it_removed(make_user, folder):
    upload(make_user("dave"), folder, expired=True)
    out = StringIO()
    call_command("sweep_resumable", stdout=out)
    assert out.getvalue().strip() == "1 expired uploads and 0 orphaned files removed"
    assert not ResumableUpload.objects.exists() and list(folder.iterdir()) == []
