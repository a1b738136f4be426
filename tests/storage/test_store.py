"""The storage seam on both backends: keys are unguessable and never
reused, uploads stream (multipart to S3), each prefork child has its own
client, and a replaced attempt's objects are deleted while the winner's
stay."""
from __future__ import annotations

import os
import re
import uuid

import pytest
from celery.signals import worker_process_init
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

import media
from bench.ports import free_port
from media import store
from uploads import attempts, services
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db


def test_upload_keys_are_random_per_user_and_never_repeat(make_user, api_client_for, storage_backend):
    user = make_user("u")
    keys = [media.upload_key(owner_id=user.pk) for _ in range(1000)]
    assert len(set(keys)) == 1000
    assert all(re.fullmatch(rf"uploads/{user.pk}/[0-9a-f]{{32}}", k) for k in keys)
    # The same file posted twice: two objects, neither replacing the other.
    client = api_client_for(user)
    for _ in range(2):
        resp = client.post("/api/uploads/", {"file": SimpleUploadedFile("same.png", b"same bytes")},
                           format="multipart")
        assert resp.status_code == 202
    stored = [u.file.name for u in Upload.objects.filter(owner=user)]
    assert len(set(stored)) == 2 and all(media.read_bytes(k) == b"same bytes" for k in stored)


def test_a_large_upload_streams_to_object_storage_in_parts(make_user, api_client_for, s3_storage, settings,
                                                           tmp_path):
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path)
    size = 12 * 1024 * 1024  # above boto3's 8 MiB multipart threshold
    body = os.urandom(size)
    resp = api_client_for(make_user("u")).post(
        "/api/uploads/", {"file": SimpleUploadedFile("big.mp4", body)}, format="multipart")
    assert resp.status_code == 202, resp.content
    key = Upload.objects.get().file.name
    head = store._client().head_object(Bucket=store._bucket(), Key=key)
    assert head["ContentLength"] == size
    assert re.fullmatch(r'"[0-9a-f]{32}-\d+"', head["ETag"])  # an S3 multipart upload's ETag
    assert media.read_bytes(key) == body


def test_a_prefork_child_builds_its_own_client(s3_storage):
    parent = store._client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, as Celery's prefork pool makes it
        try:
            worker_process_init.send(sender=None)
            child = store._client()
            ok = child is not parent and child is store._client()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert store._client() is parent  # the parent keeps its own


def _job(owner) -> Job:
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", queued_at=timezone.now())


def _stores(name: str, tmp_path):
    """A work function that stores one object under its attempt's prefix."""
    def work(attempt: attempts.Attempt) -> list[services.OutputFile]:
        made = tmp_path / f"made-{attempt.number}"
        made.mkdir()
        (made / name).write_bytes(name.encode())
        media.put_tree(made, attempt.outputs_prefix)
        return [services.OutputFile(name="out", path=attempt.outputs_prefix + name, content_type="text/plain",
                                    size=len(name), metadata={})]
    return work


@pytest.fixture
def long_lease(settings):
    settings.FAIRLANE_JOB_LEASE_S = 3600  # the attempts run inside the test's transaction


def test_a_replaced_attempts_objects_are_deleted_and_the_winners_kept(make_user, storage_backend, long_lease,
                                                                      tmp_path):
    job = _job(make_user("u"))
    job_id = str(job.id)

    def replaced(attempt: attempts.Attempt) -> list[services.OutputFile]:
        outputs = _stores("one.txt", tmp_path)(attempt)
        # Its lease runs out while it works; attempt 2 takes the job over and wins.
        Job.objects.filter(id=job_id).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
        assert attempts.jobs_recover_expired() == 1
        attempts.job_attempt_run(job_id=job_id, hostname="", soft_limit_s=None, work=_stores("two.txt", tmp_path))
        return outputs  # ... and then it finishes too, too late to publish

    attempts.job_attempt_run(job_id=job_id, hostname="", soft_limit_s=None, work=replaced)
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempts == 2
    assert [o.file.name for o in job.outputs.all()] == [f"outputs/{job_id}/2/two.txt"]
    assert list(media.list_prefix(media.job_prefix(job_id=job_id))) == [f"outputs/{job_id}/2/two.txt"]


def test_the_winner_deletes_what_a_killed_attempt_left(make_user, storage_backend, long_lease, tmp_path):
    job = _job(make_user("u"))
    job_id = str(job.id)
    left = tmp_path / "left"
    left.mkdir()
    (left / "partial.ts").write_bytes(b"half")
    media.put_tree(left, media.outputs_prefix(job_id=job_id, attempt=1))  # uploaded, then SIGKILL
    Job.objects.filter(id=job_id).update(attempts=1)

    attempts.job_attempt_run(job_id=job_id, hostname="", soft_limit_s=None, work=_stores("two.txt", tmp_path))
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempts == 2
    assert list(media.list_prefix(media.job_prefix(job_id=job_id))) == [f"outputs/{job_id}/2/two.txt"]


def test_retrying_a_job_deletes_its_stored_outputs(make_user, storage_backend, long_lease, tmp_path,
                                                   django_capture_on_commit_callbacks):
    user = make_user("u")
    job = _job(user)
    job_id = str(job.id)
    attempts.job_attempt_run(job_id=job_id, hostname="", soft_limit_s=None, work=_stores("one.txt", tmp_path))
    Job.objects.filter(id=job_id).update(status="failed")
    assert media.list_prefix(media.job_prefix(job_id=job_id))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.jobs_retry(job_ids=[job_id], actor=user)
    callbacks[0]()  # the deletion (the enqueue after it needs Redis, not this test)
    assert media.list_prefix(media.job_prefix(job_id=job_id)) == {}


def test_a_retry_looks_in_the_store_only_for_the_attempts_since_the_last_one(
        make_user, storage_backend, long_lease, tmp_path, django_capture_on_commit_callbacks, monkeypatch):
    """Each retry deletes the objects of the attempts made so far; the next
    one has only those made since to look for (a 5,000-job batch retried
    again and again listed every attempt it ever made, on the web's thread)."""
    user = make_user("u")
    job_id = str(_job(user).id)
    listed: list[str] = []
    real = media.delete_prefix
    monkeypatch.setattr(media, "delete_prefix", lambda prefix, **kw: listed.append(prefix) or real(prefix, **kw))

    def run_then_retry(name: str | None) -> list[str]:
        if name:
            attempts.job_attempt_run(job_id=job_id, hostname="", soft_limit_s=None, work=_stores(name, tmp_path))
        Job.objects.filter(id=job_id).update(status="failed")
        listed.clear()
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            assert services.jobs_retry(job_ids=[job_id], actor=user)
        callbacks[0]()  # the deletion (the enqueue after it needs Redis, not this test)
        assert media.list_prefix(media.job_prefix(job_id=job_id)) == {}
        return listed

    assert run_then_retry("one.txt") == [media.outputs_prefix(job_id=job_id, attempt=1)]
    assert run_then_retry("two.txt") == [media.outputs_prefix(job_id=job_id, attempt=2)]
    assert run_then_retry(None) == []  # retried again before it ran: nothing to look for


@pytest.fixture
def dead_store(settings) -> None:
    """The S3 backend pointed at an endpoint nobody answers (a store that is
    down or restarting), with botocore's retries cut short."""
    from botocore.config import Config

    from project.settings import s3_storages

    endpoint = f"http://127.0.0.1:{free_port()}"
    storages = s3_storages({"FAIRLANE_S3_ENDPOINT": endpoint, "FAIRLANE_S3_ACCESS_KEY_ID": "x",
                            "FAIRLANE_S3_SECRET_ACCESS_KEY": "y"})
    for conf in storages.values():
        conf["OPTIONS"]["client_config"] = conf["OPTIONS"]["client_config"].merge(
            Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=1))
    settings.FAIRLANE_STORAGE = "s3"
    settings.STORAGES = {**settings.STORAGES, **storages}


def test_a_store_that_does_not_answer_is_a_transient_error_not_a_bug(dead_store, tmp_path):
    """An outage reaches callers as StorageUnavailable, an OSError: a job
    attempt that meets it is retried later (uploads/attempts.py), never
    failed as an internal error."""
    from uploads.attempts import TRANSIENT_ERRORS

    local = tmp_path / "seg.ts"
    local.write_bytes(b"x" * 100)
    calls = [lambda: media.put_file(local, "outputs/j/1/seg.ts"), lambda: media.fetch("uploads/1/x", tmp_path / "in"),
             lambda: media.list_prefix("outputs/j/"), lambda: media.put_tree(tmp_path, "outputs/j/2/"),
             lambda: media.read_bytes("outputs/j/1/a.m3u8"), lambda: media.multipart_begin("exports/j/t/b.zip")]
    for call in calls:
        with pytest.raises(media.StorageUnavailable) as raised:
            call()
        assert isinstance(raised.value, TRANSIENT_ERRORS)


@pytest.mark.django_db
def test_an_upload_while_the_store_is_down_answers_503_and_stores_nothing(dead_store, make_user, api_client_for):
    resp = api_client_for(make_user("alice")).post(
        "/api/uploads/", {"file": SimpleUploadedFile("a.png", b"\x89PNG" + b"x" * 100)}, format="multipart")
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "storage_unavailable"
    assert not Upload.objects.exists() and not Job.objects.exists()


def test_a_web_worker_builds_its_s3_clients_as_it_boots(s3_storage):
    """project/wsgi.py calls warm_clients: the first upload request of a
    worker then finds both clients made (about a quarter of a second of CPU)."""
    store._shared_clients.clear()
    store.warm_clients()
    built = dict(store._shared_clients)
    assert set(built) == {(os.getpid(), "default"), (os.getpid(), "public")}
    assert store._client("public") is built[(os.getpid(), "public")][1]
