"""The job lifecycle announces what happened (uploads/lifecycle.py) and the
apps that react subscribe: uploads imports neither notify nor exports, and
what they do on an announcement happens when it did before the hook, after
the commit of the transaction that made it true."""
from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

import dispatcher
import media
from project.lanes import Lane
from uploads import lifecycle, services
from uploads.models import Job, Upload

UPLOADS = Path(services.__file__).resolve().parent
IMPORTERS = {"import_module", "import_string", "__import__"}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in a module, function-local ones and
    imports by name (importlib's, Django's import_string) included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in IMPORTERS:
            found += [(node.lineno, arg.value) for arg in node.args[:1]
                      if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return found


def test_uploads_imports_neither_notify_nor_exports():
    """Dependencies point one way: notify and exports use uploads, and hear
    about jobs through uploads.lifecycle."""
    wrong = [f"{path.relative_to(UPLOADS.parent)}:{line} imports {module}"
             for path in sorted(UPLOADS.rglob("*.py"))
             for line, module in _imported(ast.parse(path.read_text(), str(path)))
             if module.split(".")[0] in {"notify", "exports"}]
    assert wrong == []


@pytest.mark.django_db
def test_a_jobs_ending_is_announced_once_its_transaction_commits(make_user, redis_client,
                                                                 django_capture_on_commit_callbacks):
    """notify hears of it through the hook, and submits its task only
    after the commit, as it did when uploads called it."""
    heard = []
    lifecycle.job_finished.connect(heard.append)
    try:
        owner = make_user("alice")
        upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
        job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="running",
                                 started_at=timezone.now())
        with django_capture_on_commit_callbacks() as callbacks:
            assert services.job_fail(job_id=str(job.id), code="not_media", message="Not a media file.")
            assert heard == []
        assert heard == []  # nothing before the commit
        for callback in callbacks:
            callback()
    finally:
        lifecycle.job_finished.disconnect(heard.append)
    assert heard == [lifecycle.JobFinished(job_id=str(job.id), owner_id=owner.pk, status="failed")]
    task = dispatcher.scheduler(Lane.IO_NOTIFY).known(f"notify-job-{job.id}-failed")
    assert task is not None  # notify's receiver (notify/apps.py) submitted it


def test_send_many_gives_each_receiver_all_the_events_at_once_or_one_by_one():
    """A batch's endings in one announcement: a receiver with a `many` hears
    them in one call; one without hears each, and an event it fails on does
    not keep it from the next, nor the other receivers from theirs."""
    events = [lifecycle.JobFinished(job_id=str(i), owner_id=1, status="canceled") for i in range(3)]
    together, one_by_one = [], []

    def each(event):
        if event.job_id == "1":
            raise RuntimeError("a receiver's failure")
        one_by_one.append(event)

    hook = lifecycle.Hook(lifecycle.JobFinished)  # job_finished's kind, without the apps' receivers
    hook.connect(together.append, many=together.append)
    hook.connect(each)
    hook.send_many(events)
    with pytest.raises(TypeError):
        hook.send_many([lifecycle.JobRestarted(job_id="1", checkpoint={})])
    assert together == [events]
    assert one_by_one == [events[0], events[2]]


@pytest.mark.django_db
def test_retrying_an_export_lets_exports_discard_its_unfinished_upload(storage_backend, make_user, redis_client,
                                                                      tmp_path, django_capture_on_commit_callbacks):
    """exports hears of the retry through the hook and drops what the old
    attempts' checkpoint names, as it did when uploads called it."""
    owner = make_user("alice")
    export = Job.objects.create(owner=owner, kind="export", batch=uuid.uuid4(), lane="cpu-transcode",
                                status="failed", attempts=1)
    key = media.export_key(job_id=str(export.id), token=uuid.uuid4().hex, filename="batch.zip")
    upload_id = media.multipart_begin(key)
    local = tmp_path / "tail"
    local.write_bytes(b"the spool's bytes")
    tail = f"{key.rsplit('/', 1)[0]}/tail-000001"
    media.put_file(local, tail)
    Job.objects.filter(id=export.id).update(checkpoint={"upload": {"key": key, "id": upload_id},
                                                        "tail": {"key": tail, "size": local.stat().st_size}})
    with django_capture_on_commit_callbacks() as callbacks:
        services.jobs_retry(job_ids=[export.id], actor=owner)
    assert media.exists(tail)  # nothing before the commit
    for callback in callbacks:
        callback()
    assert not media.exists(tail)  # the upload's folder is gone
    with pytest.raises(media.UploadGone):  # and the upload with it
        media.multipart_complete(key, upload_id, [])
