"""Everything real: jobs end through the uploads services, the fair
dispatcher holds and releases notify tasks, real Celery io workers send to a
real HTTP receiver and a real SMTP server."""
from __future__ import annotations

import os
import threading
import time
import uuid
from collections import defaultdict
from email import message_from_bytes, policy

import pytest
import redis
from standardwebhooks import Webhook

from bench.ports import free_port
from notify import services
from notify.models import ChannelPreference, Delivery, Event, JobEnding
from tests.notify.processes import IoWorker
from tests.notify.receiver import Answer, Receiver
from tests.promise import wait_for
from uploads import services as upload_services
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def fail_first(times: int):
    """A receiver that answers 503 to the first `times` tries of each message."""
    seen: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def respond(request) -> Answer:
        with lock:
            seen[request.headers["webhook-id"]] += 1
            return Answer(503) if seen[request.headers["webhook-id"]] <= times else Answer(200)

    return respond


def test_ended_jobs_reach_a_webhook_signed_retried_with_growing_gaps_and_summarized_once(
        workers, make_user, make_endpoint, make_batch):
    alice = make_user("alice")
    with Receiver(fail_first(3)) as r:
        endpoint = make_endpoint(alice, r.url)
        jobs = make_batch(alice, ["running", "running"])
        upload_services.job_fail(job_id=str(jobs[0].id), code="not_media", message="Not a media file.")
        upload_services.job_fail(job_id=str(jobs[1].id), code="decode_failed", message="Broken frames.")
        # 2 job.failed + 1 batch.completed, each 503, 503, 503, 200.
        requests = r.wait_for(12, timeout_s=60)
        time.sleep(3.0)  # nothing more comes (a duplicate would be sent within a tick)
        assert len(r.received()) == 12
    by_id = defaultdict(list)
    for request in requests:
        by_id[request.headers["webhook-id"]].append(request)
        Webhook(endpoint.secret).verify(request.body, request.headers)  # raises if not signed right
    types = sorted(Webhook(endpoint.secret).verify(tries[0].body, tries[0].headers)["type"]
                   for tries in by_id.values())
    assert types == ["batch.completed", "job.failed", "job.failed"]
    for delivery in Delivery.objects.filter(endpoint=endpoint):
        assert delivery.status == "succeeded" and delivery.attempts == 4
        tries = list(delivery.attempt_log.all())
        assert [a.outcome for a in tries] == ["retry", "retry", "retry", "succeeded"]
        # The first retry at once, then the backoff doubles (base 0.3 s +-20%:
        # 0.24-0.36 s, then 0.48-0.72 s), counted from the answer: what lies
        # between the try's start and its due time is the receiver's latency,
        # the backoff, and the time it took to record the try (a loaded
        # machine's, so bounded loosely).
        delays = [(a.next_attempt_at - a.started_at).total_seconds() - a.latency_ms / 1000 for a in tries[:3]]
        assert 0 <= delays[0] < 1.0 and 0.24 <= delays[1] < 0.36 + 1.0 and 0.48 <= delays[2] < 0.72 + 1.0, delays
        # ... and each retry reached the receiver no sooner than scheduled, nor
        # much later (the dispatcher holds it until due; its ticker wakes for
        # it, at most FAIR_TICK_S late, not at beat's next minute).
        arrived = sorted(r.at for r in by_id[delivery.event.webhook_id])
        for scheduled, at in zip([a.next_attempt_at.timestamp() for a in tries[:3]], arrived[1:]):
            assert scheduled - 0.05 <= at < scheduled + 5, (scheduled, at)


def test_the_rate_limit_holds_across_two_worker_processes(workers, make_user, make_endpoint, tmp_path):
    rate, burst, count = 5.0, 2, 12
    second = IoWorker("io2", tmp_path)
    try:
        second.wait_ready()
        alice = make_user("alice")
        with Receiver() as r:
            endpoint = make_endpoint(alice, r.url, events=["job.failed"], rate_per_s=rate, burst=burst)
            started = time.time()
            for i in range(count):
                services.event_publish(owner=alice, event_type="job.failed", key=f"rate-{i}", data={"i": i})
            requests = r.wait_for(count, timeout_s=60)
    finally:
        second.stop()
    took = max(req.at for req in requests) - started
    assert took >= (count - burst) / rate
    assert took < (count - burst) / rate + 5  # and no needless waiting
    assert len({req.headers["webhook-id"] for req in requests}) == count
    assert not Delivery.objects.filter(endpoint=endpoint).exclude(status="succeeded").exists()
    assert all(d.attempts == 1 for d in Delivery.objects.filter(endpoint=endpoint))  # waits are not attempts


def test_a_real_email_goes_out_through_smtp_from_a_worker(make_user, make_batch, tmp_path, settings, private_redis):
    from aiosmtpd.controller import Controller

    received = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's naming)
            received.append(envelope)
            return "250 OK"

    alice = make_user("alice")
    [job] = make_batch(alice, ["running"])
    smtp = Controller(Handler(), hostname="127.0.0.1", port=free_port())
    smtp.start()
    # A private Redis: this worker's SMTP settings must not meet the run's other workers.
    redis_url = f"redis://127.0.0.1:{private_redis.connection_pool.connection_kwargs['port']}/0"
    # They share the database, though: the session's workers must not pick up
    # this job's ending (their reconciler would, once it is a few seconds old)
    # and mail it through their own backend. Holding the cluster's reconcile
    # turn keeps them out until the end of the test.
    session_redis = redis.Redis.from_url(os.environ["REDIS_URL"])
    session_redis.set("fairlane:reconcile-lock", "smtp-test", ex=120)
    worker = IoWorker("io-smtp", tmp_path, REDIS_URL=redis_url,
                      EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
                      EMAIL_HOST="127.0.0.1", EMAIL_PORT=str(smtp.port), FAIRLANE_BASE_URL="https://fairlane.example")
    try:
        worker.wait_ready()
        worker.run_django("from uploads import services\n"
                          f"services.job_fail(job_id='{job.id}', code='not_media', message='Not a media file.')")
        wait_for(lambda: received, 30, "an email at the SMTP server")
    finally:
        worker.stop()
        smtp.stop()
        session_redis.delete("fairlane:reconcile-lock")
    [envelope] = received
    assert envelope.rcpt_tos == ["alice@example.com"]
    message = message_from_bytes(envelope.content, policy=policy.default)
    assert message["Subject"] == "[Fairlane] 1 file(s) done, 1 failed"
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    assert "- file-0.mp4 (not_media: Not a media file.)" in text
    assert f'href="https://fairlane.example/batches/{job.upload.batch}/"' in html
    delivery = Delivery.objects.get(channel="email")
    assert delivery.status == "succeeded" and delivery.attempts == 1
    assert str(uuid.UUID(str(delivery.event.batch))) == str(job.upload.batch)


def test_a_job_ending_whose_events_fail_every_time_is_given_up_after_its_tries(workers, make_user, make_batch):
    """The reconciler re-submits an ending whose notify task never ran to
    the end; one whose task raises every time it used to re-submit every
    FAIR_RECONCILE_S, forever. Now it ends after NOTIFY_MAX_ATTEMPTS tries,
    failed with its error's code, once."""
    alice = make_user("alice")
    # Stored around the API's checks: reading alice's choices raises, on every try.
    ChannelPreference.objects.create(user=alice, channel="email", events=5)
    [job] = make_batch(alice, ["running"])
    upload_services.job_fail(job_id=str(job.id), code="not_media", message="Not a media file.")
    task_id = f"notify-job-{job.id}-failed"

    def tries() -> int:
        log = workers.procs["io"].log.read_text(errors="replace").splitlines()
        return sum(1 for line in log if task_id in line and "raised unexpected" in line)

    wait_for(lambda: not Job.objects.get(id=job.id).notify_pending, 90,
             lambda: f"the ending given up; tried {tries()} times so far")
    limit = int(os.environ["NOTIFY_MAX_ATTEMPTS"])
    # The last try gives the ending up before it raises, and Celery logs the raise after:
    # the flag can be off a moment before the last try's line is written.
    wait_for(lambda: tries() >= limit, 30, lambda: f"the last try logged; {tries()} so far")
    assert tries() == limit
    ending = JobEnding.objects.get(job_id=job.id)
    assert (ending.status, ending.tries, ending.error_code) == ("failed", limit, "TypeError")
    assert ending.given_up_at is not None and not Event.objects.filter(job_id=job.id).exists()
    # Given up once: the flag that makes the reconciler submit it again is off for good.
    given_up = [line for line in workers.procs["io"].log.read_text(errors="replace").splitlines()
                if str(job.id) in line and "given up" in line]
    assert len(given_up) == 1, given_up
