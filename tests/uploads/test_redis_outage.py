"""Redis (the fair dispatcher and the broker) is unreachable at the moment a
committed change is to be published. The request or the job still succeeds
(its rows are committed), and the rows are the outbox: once Redis answers
again the reconcilers publish what was missed, and nothing is lost."""
from __future__ import annotations

import io
import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from PIL import Image

import dispatcher
import media
from bench.ports import free_port
from notify import services as notify_services
from project.lanes import Lane
from tests.workers import RUNNING, lane_paused, wait_settled
from uploads import attempts, services
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db(transaction=True)


class Outage:
    """Points this process's dispatcher at a port nobody listens on, as a
    Redis that is down looks to a client (connection refused)."""

    def __init__(self, settings):
        self.settings, self.real = settings, settings.FAIR_REDIS_URL
        self.dead = f"redis://127.0.0.1:{free_port()}/0"

    def begin(self) -> None:
        self.settings.FAIR_REDIS_URL = self.dead
        dispatcher.service._schedulers.clear()  # the clients are cached per process

    def end(self) -> None:
        self.settings.FAIR_REDIS_URL = self.real
        dispatcher.service._schedulers.clear()


@pytest.fixture
def outage(settings, redis_client):
    settings.FAIR_RECONCILE_MIN_AGE_S = 0
    outage = Outage(settings)
    with lane_paused("cpu-transcode"), lane_paused("io-notify"):  # the session's workers keep out of it
        yield outage
        outage.end()
    # Back in, the session's workers take what the test released (its job's
    # notify task): let them finish before pytest-django's flush, which a
    # worker's read beside it turns into a deadlock (a fresh clone's error).
    if RUNNING:
        wait_settled(timeout_s=30)


def png() -> SimpleUploadedFile:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "PNG")
    return SimpleUploadedFile("a.png", buf.getvalue(), content_type="image/png")


def test_an_upload_accepted_while_redis_is_down_is_published_once_it_is_back(outage, make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    outage.begin()
    resp = client.post("/api/uploads/", {"file": png()}, format="multipart")
    assert resp.status_code == 202, resp.content  # committed: accepted, whatever Redis says
    [upload] = resp.json()["uploads"]
    job_id = upload["job"]["id"]
    assert Job.objects.get(id=job_id).status == "queued"

    outage.end()
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    assert sched.known(job_id) is None  # nothing reached the dispatcher
    assert services.jobs_reconcile() == 1
    assert sched.known(job_id) in ("held", "released")
    assert services.jobs_reconcile() == 0


def test_a_job_that_ends_while_redis_is_down_keeps_its_outputs_and_is_notified_later(outage, make_user, tmp_path):
    owner = make_user("alice")
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", queued_at=timezone.now())

    def work(attempt: attempts.Attempt) -> list[services.OutputFile]:
        made = tmp_path / "made"
        made.mkdir()
        (made / "a.txt").write_text("done")
        media.put_tree(made, attempt.outputs_prefix)
        outage.begin()  # Redis goes away while the job is publishing
        return [services.OutputFile(name="a", path=f"outputs/{job.id}/{attempt.number}/a.txt",
                                    content_type="text/plain", size=4, metadata={})]

    assert attempts.job_attempt_run(job_id=str(job.id), hostname="", soft_limit_s=None, work=work) is None
    job.refresh_from_db()
    assert job.status == "succeeded" and job.notify_pending
    assert media.exists(f"outputs/{job.id}/1/a.txt")  # published, and kept

    outage.end()
    task_id = f"notify-job-{job.id}-succeeded"
    assert dispatcher.scheduler(Lane.IO_NOTIFY).known(task_id) is None
    assert notify_services.job_notifications_reconcile() == 1
    assert dispatcher.scheduler(Lane.IO_NOTIFY).known(task_id) in ("held", "released")
    notify_services.job_event_process(job_id=str(job.id), status="succeeded")  # as the io worker does
    job.refresh_from_db()
    assert not job.notify_pending
    assert notify_services.job_notifications_reconcile() == 0
