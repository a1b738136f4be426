"""What a job's ending produces: its own event where wanted, and once the
whole upload batch has ended, exactly one summary; per-channel preferences
decide who gets what."""
from __future__ import annotations

import pytest
from django.core import mail

from notify import services
from notify.models import Delivery, Event
from uploads.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(make_user):
    return make_user("alice")


def end(job: Job, status: str) -> None:
    """The job reaches `status`, then its notify task runs (as on a worker)."""
    from django.utils import timezone

    error = {"error_code": "not_media", "error_message": "Not a media file."} if status == "failed" else {}
    Job.objects.filter(id=job.id).update(status=status, finished_at=timezone.now(), **error)
    services.job_event_process(job_id=str(job.id), status=status)


def test_the_batch_summary_waits_for_every_job_and_is_sent_once_even_with_failures(
        alice, make_batch, make_endpoint):
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/h", events=["batch.completed"])
    jobs = make_batch(alice, ["running", "running", "running"])
    end(jobs[0], "succeeded")
    end(jobs[1], "failed")
    assert not Event.objects.filter(type="batch.completed").exists()
    end(jobs[2], "canceled")
    # Every job's task may see the batch complete (redelivery, races): still one.
    for job in jobs:
        services.job_event_process(job_id=str(job.id), status=Job.objects.get(id=job.id).status)
    [summary] = Event.objects.filter(type="batch.completed")
    batch = summary.payload["data"]["batch"]
    assert batch["total"] == 3 and batch["counts"] == {"succeeded": 1, "failed": 1, "canceled": 1}
    # The failed files (not every file): the batch's page lists them all.
    assert [f["filename"] for f in batch["failures"]] == ["file-1.mp4"] and batch["failures_not_listed"] == 0
    assert batch["failures"][0]["error"] == {"code": "not_media", "message": "Not a media file."}
    assert batch["results_url"].endswith(f"/batches/{jobs[0].upload.batch}/")
    assert sorted(summary.deliveries.values_list("channel", flat=True)) == ["email", "webhook"]
    assert summary.deliveries.get(channel="webhook").endpoint == endpoint


def test_by_default_email_gets_only_the_summary_and_webhooks_get_every_event(alice, make_batch, make_endpoint):
    make_endpoint(alice, "http://127.0.0.1:9/h")
    job_a, job_b = make_batch(alice, ["running", "running"])
    end(job_a, "succeeded")
    end(job_b, "failed")
    by_type = {(d.event.type, d.channel) for d in Delivery.objects.select_related("event")}
    assert by_type == {("job.succeeded", "webhook"), ("job.failed", "webhook"),
                       ("batch.completed", "webhook"), ("batch.completed", "email")}


def test_preferences_per_channel_are_respected(alice, make_batch, make_endpoint):
    make_endpoint(alice, "http://127.0.0.1:9/all")
    make_endpoint(alice, "http://127.0.0.1:9/failures", events=["job.failed"])
    services.preferences_set(user=alice, channel="email", events=["job.failed"])
    services.preferences_set(user=alice, channel="webhook", events=["job.failed", "batch.completed"])
    job_a, job_b = make_batch(alice, ["running", "running"])
    end(job_a, "succeeded")
    end(job_b, "failed")
    sent = sorted((d.event.type, d.channel, d.endpoint.url if d.endpoint else d.recipient)
                  for d in Delivery.objects.select_related("event", "endpoint"))
    assert sent == [
        ("batch.completed", "webhook", "http://127.0.0.1:9/all"),
        ("job.failed", "email", "alice@example.com"),
        ("job.failed", "webhook", "http://127.0.0.1:9/all"),
        ("job.failed", "webhook", "http://127.0.0.1:9/failures"),
    ]
    # Nobody wanted job.succeeded: no event row kept for it.
    assert not Event.objects.filter(type="job.succeeded").exists()


def test_a_job_retried_since_is_not_reported_as_failed(alice, make_batch, make_endpoint):
    make_endpoint(alice, "http://127.0.0.1:9/h")
    [job] = make_batch(alice, ["failed"])
    Job.objects.filter(id=job.id).update(status="queued")
    services.job_event_process(job_id=str(job.id), status="failed")
    assert not Event.objects.exists()


def test_the_summary_email_has_text_and_html_with_the_failures_and_a_link_to_the_batch(alice, make_batch, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.FAIRLANE_BASE_URL = "https://fairlane.example"
    jobs = make_batch(alice, ["running", "running"])
    end(jobs[0], "succeeded")
    end(jobs[1], "failed")
    delivery = Delivery.objects.get(channel="email")
    assert services.delivery_attempt(delivery_id=str(delivery.id), seq=0) == "succeeded"
    [message] = mail.outbox
    assert message.to == ["alice@example.com"] and message.subject == "[Fairlane] 2 file(s) done, 1 failed"
    assert "1 succeeded" in message.body and "- file-1.mp4 (not_media: Not a media file.)" in message.body
    assert "file-0.mp4" not in message.body  # succeeded files are counted, not listed
    batch_url = f"https://fairlane.example/batches/{jobs[0].upload.batch}/"
    assert batch_url in message.body
    html, mimetype = message.alternatives[0]
    assert mimetype == "text/html" and f'href="{batch_url}"' in html
    assert services.delivery_attempt(delivery_id=str(delivery.id), seq=0) == "stale"  # a duplicate sends nothing
    assert len(mail.outbox) == 1


def test_the_summary_names_the_batch_in_its_subject_text_html_and_webhook(alice, make_batch, make_endpoint,
                                                                           settings):
    from uploads.models import Batch

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    make_endpoint(alice, "http://127.0.0.1:9/h", events=["batch.completed"])
    [job] = make_batch(alice, ["running"])
    Batch.objects.create(id=job.upload.batch, owner=alice, name="Holiday <clips>")
    end(job, "succeeded")
    summary = Event.objects.get(type="batch.completed")
    assert summary.payload["data"]["batch"]["name"] == "Holiday <clips>"  # the webhook's payload
    delivery = Delivery.objects.get(channel="email")
    assert services.delivery_attempt(delivery_id=str(delivery.id), seq=0) == "succeeded"
    [message] = mail.outbox
    assert message.subject == "[Fairlane] Holiday <clips>: 1 file(s) done"
    assert 'All 1 file(s) of your batch "Holiday <clips>" are done: 1 succeeded.' in message.body
    assert "<strong>Holiday &lt;clips&gt;</strong>" in message.alternatives[0][0]


def test_a_failing_mail_server_is_retried(alice, make_batch, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2  # nothing listens
    [job] = make_batch(alice, ["running"])
    end(job, "succeeded")
    delivery = Delivery.objects.get(channel="email")
    assert services.delivery_attempt(delivery_id=str(delivery.id), seq=0) == "retry"
    delivery.refresh_from_db()
    assert delivery.status == "pending" and "ConnectionRefused" in delivery.last_error


# --- an ending whose events cannot be made: counted tries, given up once ----------------


@pytest.fixture
def broken(alice):
    """alice's choices stored around the API's checks: reading them raises, every time."""
    from notify.models import ChannelPreference

    ChannelPreference.objects.create(user=alice, channel="email", events=5)
    return alice


def test_an_ending_that_fails_every_try_is_given_up_at_the_last_with_its_code(broken, make_batch, settings):
    from notify.models import JobEnding

    settings.NOTIFY_MAX_ATTEMPTS = 3
    [job] = make_batch(broken, ["running"])
    with pytest.raises(TypeError):
        end(job, "failed")
    Job.objects.filter(id=job.id).update(notify_pending=True)  # as job_finish leaves it
    for expected in ("pending", "failed"):
        with pytest.raises(TypeError):
            services.job_event_process(job_id=str(job.id), status="failed")
        assert JobEnding.objects.get(job_id=job.id).status == expected
    ending = JobEnding.objects.get(job_id=job.id)
    assert (ending.tries, ending.error_code) == (3, "TypeError") and "iterable" in ending.error_message
    assert not Job.objects.get(id=job.id).notify_pending  # the reconciler submits it no more
    services.job_event_process(job_id=str(job.id), status="failed")  # a stale message: nothing runs
    assert JobEnding.objects.get(job_id=job.id).tries == 3


def test_tries_whose_worker_died_count_and_the_ending_is_given_up_without_running(alice, make_batch, settings):
    from notify.models import JobEnding

    settings.NOTIFY_MAX_ATTEMPTS = 2
    [job] = make_batch(alice, ["failed"])
    Job.objects.filter(id=job.id).update(notify_pending=True)
    JobEnding.objects.create(job_id=job.id, finished_at=job.finished_at, job_status="failed", tries=2)
    services.job_event_process(job_id=str(job.id), status="failed")
    ending = JobEnding.objects.get(job_id=job.id)
    assert (ending.status, ending.tries, ending.error_code) == ("failed", 2, "no_outcome")
    assert not Event.objects.filter(job_id=job.id).exists() and not Job.objects.get(id=job.id).notify_pending


def test_a_later_ending_of_a_job_whose_ending_was_given_up_has_tries_of_its_own(broken, make_batch, settings):
    from notify.models import ChannelPreference, JobEnding

    settings.NOTIFY_MAX_ATTEMPTS = 1
    [job] = make_batch(broken, ["running"])
    with pytest.raises(TypeError):
        end(job, "failed")
    [given_up] = JobEnding.objects.all()
    assert given_up.status == "failed"
    ChannelPreference.objects.filter(user=broken).delete()  # mended; the job is retried and ends again
    end(job, "failed")
    assert list(JobEnding.objects.all()) == [given_up]  # the new ending's count went with its success
    assert Event.objects.filter(type="batch.completed").exists()


def test_a_video_that_became_playable_is_announced_once_and_before_its_job_succeeded(alice, make_batch,
                                                                                       make_endpoint):
    """job.playable comes from its own task while the job runs; if that task
    was lost, the job's ending publishes it first. Either way once per run."""
    from django.utils import timezone

    make_endpoint(alice, "http://127.0.0.1:9/h", events=["job.playable", "job.succeeded"])
    watched, lost = make_batch(alice, ["running", "running"])
    Job.objects.filter(id__in=[watched.id, lost.id]).update(playable_at=timezone.now())
    services.job_playable_process(job_id=str(watched.id))
    services.job_playable_process(job_id=str(watched.id))  # a redelivered task
    assert list(Event.objects.values_list("type", flat=True)) == ["job.playable"]
    for job in (watched, lost):  # `lost`'s own task never ran
        end(job, "succeeded")
        services.job_playable_process(job_id=str(job.id))  # late: nothing more
        events = Event.objects.filter(job_id=job.id).order_by("created_at")
        assert [(e.type, e.payload["data"]["job"]["id"]) for e in events] == [
            ("job.playable", str(job.id)), ("job.succeeded", str(job.id))]


def test_a_video_that_failed_before_its_playable_task_ran_is_not_announced_playable(alice, make_batch,
                                                                                      make_endpoint):
    from django.utils import timezone

    make_endpoint(alice, "http://127.0.0.1:9/h", events=["job.playable", "job.failed"])
    [job] = make_batch(alice, ["running"])
    Job.objects.filter(id=job.id).update(playable_at=timezone.now())
    end(job, "failed")
    services.job_playable_process(job_id=str(job.id))
    assert list(Event.objects.filter(job_id=job.id).values_list("type", flat=True)) == ["job.failed"]
