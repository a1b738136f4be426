"""Job state transitions are guarded: at-least-once delivery cannot run a job twice."""
from __future__ import annotations

import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

import media
from uploads import services
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(make_user) -> Job:
    owner = make_user("owner")
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode")


def test_a_job_starts_once_and_a_duplicate_delivery_is_dropped(job):
    assert services.job_start(job_id=job.id) is not None
    assert services.job_start(job_id=job.id) is None
    job.refresh_from_db()
    assert job.status == "running" and job.attempts == 1 and job.wait_ms is not None


def test_a_finished_job_cannot_be_failed_or_succeeded_again(job):
    services.job_start(job_id=job.id)
    assert services.job_fail(job_id=job.id, code="decode_failed", message="bad") is True
    assert services.job_succeed(job_id=job.id, outputs=[]) is False
    assert services.job_fail(job_id=job.id, code="other", message="x") is False
    job.refresh_from_db()
    assert job.status == "failed" and job.error == {"code": "decode_failed", "message": "bad"}
    assert job.process_ms is not None


def test_a_failure_message_keeps_the_words_and_loses_what_names_the_server(job, settings, tmp_path):
    """Whatever code fails a job (pipelines, exports, a storage client), the
    message its owner sees names no path, URL, address or host of ours."""
    import socket

    settings.MEDIA_ROOT = tmp_path / "media root"  # a space: a folder is taken out whole
    services.job_start(job_id=job.id)
    services.job_fail(job_id=job.id, code="decode_failed", message=(
        f"Cannot open '{settings.MEDIA_ROOT}/tmp/{job.id}-x/in.mp4' (from /srv/fairlane/var/media) via "
        f"http://seaweed.internal:8333/media/key?X-Amz-Signature=abc at 10.0.0.7:8333 on {socket.gethostname()}: "
        "[h264 @ 0x55d4c1e08a40] error at 30 kbit/s, N/A, 1/25."))
    job.refresh_from_db()
    assert job.error_message == ("Cannot open '[path]' (from [path]) via [link] at [address] on [host]: "
                                 "[h264 @ [address]] error at 30 kbit/s, N/A, 1/25.")


def test_progress_is_clamped_and_only_moves_while_running(job):
    services.job_progress_set(job_id=job.id, progress=50)
    job.refresh_from_db()
    assert job.progress == 0
    services.job_start(job_id=job.id)
    services.job_progress_set(job_id=job.id, progress=150)
    job.refresh_from_db()
    assert job.progress == 100


class _BreaksWhileRead(SimpleUploadedFile):
    """An uploaded file whose temporary copy fails to read half-way (a full
    or failing disk under the upload handler), however the backend reads
    it (FileSystemStorage by chunks, S3 by read())."""

    def chunks(self, chunk_size=None):
        yield b"first part"
        raise OSError(5, "Input/output error")

    def read(self, *args):
        raise OSError(5, "Input/output error")


@pytest.mark.django_db(transaction=True)
def test_a_request_that_fails_half_way_leaves_no_rows_no_files_and_enqueues_nothing(make_user, redis_client,
                                                                                    storage_backend):
    import dispatcher
    from project.lanes import Lane

    owner = make_user("owner")
    good = SimpleUploadedFile("good.png", b"\x89PNG fine", content_type="image/png")
    with pytest.raises(OSError):
        services.uploads_create(owner=owner, files=[good, _BreaksWhileRead("bad.png", b"x" * 20)])
    assert not Upload.objects.exists() and not Job.objects.exists()
    assert media.list_prefix(f"uploads/{owner.pk}/") == {}  # the first file, already stored, is removed
    assert dispatcher.scheduler(Lane.CPU_TRANSCODE).snapshot()["totals"]["held"] == 0
