"""Operators retry and cancel jobs from the admin: confirmed, permitted, logged."""
from __future__ import annotations

import uuid

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

import dispatcher
from project.lanes import Lane
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/uploads/job/"


def make_job(owner, status) -> Job:
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status=status,
                              error_code="decode_failed" if status == "failed" else "")


def test_retry_asks_first_showing_how_many_and_whose(admin_client, make_user):
    job = make_job(make_user("alice"), Job.Status.FAILED)
    resp = admin_client.post(CHANGELIST, {"action": "retry_jobs", "_selected_action": [job.pk]})
    assert resp.status_code == 200
    assert b"Retry 1 job?" in resp.content and b"alice: 1" in resp.content
    job.refresh_from_db()
    assert job.status == "failed"


def test_confirmed_retry_requeues_through_the_dispatcher_and_is_logged(admin_client, make_user, cpu_lane_paused,
                                                                       django_capture_on_commit_callbacks):
    done = make_job(make_user("bob"), Job.Status.SUCCEEDED)
    failed = make_job(done.owner, Job.Status.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        resp = admin_client.post(CHANGELIST, {"action": "retry_jobs", "_selected_action": [failed.pk, done.pk],
                                              "confirm": "yes"})
    assert resp.status_code == 302
    failed.refresh_from_db()
    done.refresh_from_db()
    assert failed.status == "queued" and failed.error_code == "" and done.status == "succeeded"
    assert dispatcher.scheduler(Lane.CPU_TRANSCODE).known(str(failed.id)) in {"held", "released"}
    entry = LogEntry.objects.get(object_id=str(failed.id))
    assert entry.user.username == "admin" and "Retried" in entry.change_message
    dispatcher.scheduler(Lane.CPU_TRANSCODE).clear()


def test_cancel_takes_a_held_job_out_of_the_backlog(admin_client, make_user, cpu_lane_paused,
                                                    django_capture_on_commit_callbacks):
    job = make_job(make_user("carol"), Job.Status.QUEUED)
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    sched.submit(str(job.id), str(job.owner_id), due=9e9)  # held (delayed) so nothing releases it
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(CHANGELIST, {"action": "cancel_jobs", "_selected_action": [job.pk], "confirm": "yes"})
    job.refresh_from_db()
    assert job.status == "canceled" and job.error_code == "canceled"
    assert sched.known(str(job.id)) is None


def test_staff_without_the_permission_cannot_retry(client, make_user):
    staff = make_user("staff", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(staff)
    job = make_job(make_user("dave"), Job.Status.FAILED)
    page = client.get(CHANGELIST)
    assert page.status_code == 200 and b"retry_jobs" not in page.content
    client.post(CHANGELIST, {"action": "retry_jobs", "_selected_action": [job.pk], "confirm": "yes"})
    job.refresh_from_db()
    assert job.status == "failed"
    staff.user_permissions.add(Permission.objects.get(codename="retry_job"))
    staff = type(staff).objects.get(pk=staff.pk)  # permissions are cached per instance
    client.force_login(staff)
    assert b"retry_jobs" in client.get(CHANGELIST).content


def test_job_list_filters_and_searches(admin_client, make_user):
    job = make_job(make_user("erin"), Job.Status.FAILED)
    make_job(job.owner, Job.Status.SUCCEEDED)
    resp = admin_client.get(CHANGELIST, {"status__exact": "failed"})
    assert list(resp.context["cl"].result_list) == [job]
    resp = admin_client.get(CHANGELIST, {"q": str(job.id)})
    assert list(resp.context["cl"].result_list) == [job]


def test_a_chunked_job_shows_its_parts_each_linking_to_its_own_page(admin_client, make_user):
    parent = make_job(make_user("dora"), Job.Status.RUNNING)
    chunk = Job.objects.create(parent=parent, owner=parent.owner, lane="cpu-transcode", kind="video",
                               part=Job.Part.CHUNK, part_index=3, status=Job.Status.QUEUED)
    page = admin_client.get(f"{CHANGELIST}{parent.pk}/change/").content.decode()
    assert "parts (chunks, audio, finalizer)" in page.lower() and f"{CHANGELIST}{chunk.pk}/change/" in page
    listed = admin_client.get(CHANGELIST, {"part": "chunk"}).content.decode()
    assert "chunk 3 of a.mp4" in listed and str(parent.pk) not in listed


def test_a_job_is_a_record_with_its_batch_and_the_actions_that_apply_to_it(admin_client, make_user):
    failed = make_job(make_user("fay"), Job.Status.FAILED)
    page = admin_client.get(f"{CHANGELIST}{failed.pk}/change/").content.decode()
    assert 'name="_save"' not in page and "Add another" not in page
    # The batch its file came in (not the export's own field), linked to the batch's jobs.
    assert f'href="{CHANGELIST}?q={failed.upload.batch}"' in page and "field-batch_link" in page
    assert 'class="form-row field-batch"' not in page
    assert ">Retry</button>" in page and ">Cancel</button>" not in page
    queued = make_job(failed.owner, Job.Status.QUEUED)
    page = admin_client.get(f"{CHANGELIST}{queued.pk}/change/").content.decode()
    assert ">Cancel</button>" in page and ">Retry</button>" not in page
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403


def test_the_job_list_finds_a_job_by_its_short_id_and_a_batchs_jobs_by_the_batch(admin_client, make_user):
    job = make_job(make_user("gus"), Job.Status.SUCCEEDED)
    other = make_job(job.owner, Job.Status.SUCCEEDED)
    resp = admin_client.get(CHANGELIST, {"q": str(job.id)[:8]})
    assert list(resp.context["cl"].result_list) == [job]
    resp = admin_client.get(CHANGELIST, {"q": str(other.upload.batch)})
    assert list(resp.context["cl"].result_list) == [other]
