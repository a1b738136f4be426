"""One try at a delivery, as a worker thread runs it, against a real HTTP
receiver on 127.0.0.1, the real database and Redis (no worker: the tests
call the service the task calls, and look at what it scheduled next)."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connections
from django.utils import timezone
from standardwebhooks import Webhook

import dispatcher
from notify import services
from notify.models import Delivery, Endpoint, Event
from project.lanes import Lane
from tests.notify.receiver import Answer, Receiver, scripted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_io_worker")]


@pytest.fixture
def alice(make_user):
    return make_user("alice")


def deliver(owner, endpoint, *, key: str = "k1", data: dict | None = None) -> Delivery:
    """A job.failed event for `owner`, with its delivery to `endpoint`."""
    event = services.event_publish(owner=owner, event_type="job.failed", key=key, data=data or {"job": {"id": key}})
    return event.deliveries.get(endpoint=endpoint)


def attempt(delivery: Delivery, **kwargs) -> str:
    delivery.refresh_from_db()
    return services.delivery_attempt(delivery_id=str(delivery.id), seq=delivery.seq, **kwargs)


def test_the_receiver_verifies_the_signature_with_the_standard_webhooks_library(
        alice, make_endpoint, receiver, fast_retries, redis_client):
    endpoint = make_endpoint(alice, receiver.url)
    delivery = deliver(alice, endpoint, data={"job": {"id": "j1", "filename": "ünïcode.mp4"}})
    assert attempt(delivery) == "succeeded"
    [request] = receiver.received()
    payload = Webhook(endpoint.secret).verify(request.body, request.headers)
    assert payload["type"] == "job.failed" and payload["data"]["job"]["filename"] == "ünïcode.mp4"
    assert request.headers["webhook-id"] == delivery.event.webhook_id
    assert request.headers["content-type"] == "application/json"
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 5
    with pytest.raises(Exception):
        Webhook(endpoint.secret).verify(request.body.replace(b"j1", b"j2"), request.headers)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("succeeded", 1, 200)
    [logged] = delivery.attempt_log.all()
    assert logged.status_code == 200 and logged.response_prefix == "ok" and logged.latency_ms is not None


def test_a_5xx_is_retried_at_once_then_later_through_the_fair_dispatcher_with_the_same_webhook_id(
        alice, make_endpoint, fast_retries, redis_client):
    with Receiver(scripted(Answer(503, body=b"down"), Answer(503, body=b"down"), Answer(200))) as r:
        endpoint = make_endpoint(alice, r.url)
        delivery = deliver(alice, endpoint)
        before = timezone.now()
        assert attempt(delivery) == "retry"
        after = timezone.now()
        delivery.refresh_from_db()
        assert delivery.status == "pending" and delivery.seq == 1 and delivery.attempts == 1
        # The first retry is due at once: submitted to the dispatcher undelayed.
        assert before <= delivery.next_attempt_at <= after
        assert dispatcher.scheduler(Lane.IO_NOTIFY).known(f"notify-dlv-{delivery.id}-1") in ("held", "released")
        before = timezone.now()
        assert attempt(delivery) == "retry"
        after = timezone.now()
        delivery.refresh_from_db()
        assert delivery.status == "pending" and delivery.seq == 2 and delivery.attempts == 2
        # then base 0.3 s +-20%, counted from when the answer was recorded
        assert before + timedelta(seconds=0.24) <= delivery.next_attempt_at <= after + timedelta(seconds=0.36)
        task_id = f"notify-dlv-{delivery.id}-2"
        # Held by the dispatcher until due, no Celery ETA (once due, a
        # worker's ticker may have released it already: the io lane is paused).
        assert dispatcher.scheduler(Lane.IO_NOTIFY).known(task_id) in ("delayed", "released")
        # The old messages, delivered again, claim nothing.
        for seq in (0, 1):
            assert services.delivery_attempt(delivery_id=str(delivery.id), seq=seq) == "stale"
        assert attempt(delivery) == "succeeded"
        requests = r.received()
    assert len(requests) == 3 and len({request.headers["webhook-id"] for request in requests}) == 1
    assert [a.outcome for a in delivery.attempt_log.all()] == ["retry", "retry", "succeeded"]
    assert delivery.attempt_log.first().response_prefix == "down"


@pytest.mark.parametrize(("status", "outcome"), [(400, "failed"), (404, "failed"), (410, "failed"),
                                                 (408, "retry"), (429, "retry"), (500, "retry")])
def test_4xx_are_not_retried_except_408_and_429(status, outcome, alice, make_endpoint, fast_retries, redis_client):
    with Receiver(lambda request: Answer(status)) as r:
        delivery = deliver(alice, make_endpoint(alice, r.url))
        assert attempt(delivery) == outcome


def test_retry_after_is_honoured(alice, make_endpoint, fast_retries, redis_client):
    with Receiver(lambda request: Answer(429, headers={"Retry-After": "7"})) as r:
        delivery = deliver(alice, make_endpoint(alice, r.url))
        before = timezone.now()
        assert attempt(delivery) == "retry"
    delivery.refresh_from_db()
    assert delivery.next_attempt_at >= before + timedelta(seconds=7)


def test_redirects_are_not_followed(alice, make_endpoint, fast_retries, redis_client):
    with Receiver(lambda request: Answer(307, headers={"Location": "http://169.254.169.254/"})) as r:
        delivery = deliver(alice, make_endpoint(alice, r.url))
        assert attempt(delivery) == "failed"
        assert len(r.received()) == 1
    delivery.refresh_from_db()
    assert delivery.last_status_code == 307


def test_a_slow_receiver_times_out_and_only_a_prefix_of_a_big_answer_is_kept(
        alice, make_endpoint, fast_retries, redis_client):
    fast_retries.NOTIFY_WEBHOOK_READ_TIMEOUT_S = 0.3
    fast_retries.NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES = 16
    with Receiver(scripted(Answer(200, delay_s=1.0), Answer(500, body=b"x" * 100_000))) as r:
        delivery = deliver(alice, make_endpoint(alice, r.url))
        assert attempt(delivery) == "retry"
        delivery.refresh_from_db()
        assert delivery.last_error == "timeout" and delivery.last_status_code is None
        assert attempt(delivery) == "retry"
    assert [a.response_prefix for a in delivery.attempt_log.all()] == ["", "x" * 16]


def test_a_connection_refused_is_retried(alice, make_endpoint, fast_retries, redis_client):
    with Receiver() as r:
        url = r.url
    delivery = deliver(alice, make_endpoint(alice, url))  # nothing listens there any more
    assert attempt(delivery) == "retry"
    delivery.refresh_from_db()
    assert "ConnectionRefused" in delivery.last_error


def test_dns_rebinding_to_a_private_address_is_refused_at_connect_time(
        alice, api_client_for, fast_retries, redis_client):
    fast_retries.NOTIFY_WEBHOOK_ALLOW_LOOPBACK = False
    answers = iter([["93.184.216.34"], ["10.0.0.7"]])
    resolver = lambda host, port: next(answers)  # noqa: E731: public when registered, private when sending
    endpoint = services.endpoint_create(owner=alice, url="http://hooks.example/in", events=["job.failed"],
                                        resolver=resolver)
    delivery = deliver(alice, endpoint)
    assert attempt(delivery, resolver=resolver) == "failed"  # not retried: a private address is no outage
    delivery.refresh_from_db()
    # The rule, not the address: the attempt log is the user's to read.
    assert delivery.last_error == ("url_not_public: Webhook addresses must be public: the name resolves to an "
                                   "address in a special-purpose range (private-use).")
    assert delivery.last_status_code is None


def test_a_live_receiver_on_an_internal_address_gets_nothing_once_internal_targets_are_refused(
        alice, make_endpoint, receiver, fast_retries, redis_client):
    """The connect-time check with the system's resolver: `localhost` names
    the live receiver on 127.0.0.1, which answers when loopback is allowed
    (tests) and is never contacted when it is not (production)."""
    endpoint = make_endpoint(alice, receiver.url.replace("127.0.0.1", "localhost"))
    assert attempt(deliver(alice, endpoint, key="allowed")) == "succeeded"
    fast_retries.NOTIFY_WEBHOOK_ALLOW_LOOPBACK = False
    refused = deliver(alice, endpoint, key="refused")
    assert attempt(refused) == "failed"  # no retry: an internal address is not an outage
    assert len(receiver.received()) == 1
    refused.refresh_from_db()
    assert refused.last_error.startswith("url_not_public") and refused.last_status_code is None


def test_the_database_connection_is_released_during_the_http_call(alice, make_endpoint, fast_retries, redis_client):
    db = connections["default"]  # this thread's connection, the one a worker thread would hold
    seen = []

    def check(request):
        seen.append(db.connection is None)
        return Answer(200)

    with Receiver(check) as r:
        delivery = deliver(alice, make_endpoint(alice, r.url))
        assert db.connection is not None
        assert attempt(delivery) == "succeeded"
    assert seen == [True]
    assert db.connection is None  # and closed again after recording


def test_an_endpoint_that_keeps_failing_is_disabled_and_its_owner_emailed(
        alice, make_endpoint, fast_retries, redis_client):
    with Receiver(lambda request: Answer(500)) as r:
        endpoint = make_endpoint(alice, r.url)
        first, second, waiting = (deliver(alice, endpoint, key=k) for k in ("a", "b", "c"))
        assert attempt(first) == "retry" and attempt(second) == "retry"
        assert Endpoint.objects.get(id=endpoint.id).is_active
        assert attempt(first) == "retry"  # the third failure in a row
    endpoint.refresh_from_db()
    assert not endpoint.is_active and "3 failed attempts in a row" in endpoint.disabled_reason
    assert set(Delivery.objects.filter(endpoint=endpoint).values_list("status", flat=True)) == {"canceled"}
    assert attempt(waiting) == "stale"
    told = Event.objects.get(owner=alice, type="endpoint.disabled").deliveries.get()
    assert told.channel == "email" and told.recipient == "alice@example.com"
    assert attempt(told) == "succeeded"
    [message] = mail.outbox
    assert r.url in message.body and message.to == ["alice@example.com"]
    assert "/notifications/" in message.alternatives[0][0]


def test_a_success_resets_the_failure_streak(alice, make_endpoint, fast_retries, redis_client):
    with Receiver(scripted(Answer(500), Answer(500), Answer(200), Answer(500))) as r:
        endpoint = make_endpoint(alice, r.url)
        delivery, another = deliver(alice, endpoint, key="a"), deliver(alice, endpoint, key="b")
        assert [attempt(delivery) for _ in range(3)] == ["retry", "retry", "succeeded"]
        assert attempt(another) == "retry"
    endpoint.refresh_from_db()
    assert endpoint.is_active and endpoint.failure_streak == 1


def test_a_throttled_try_is_rescheduled_for_its_token_without_counting_an_attempt(
        alice, make_endpoint, receiver, fast_retries, redis_client):
    endpoint = make_endpoint(alice, receiver.url, rate_per_s=2, burst=1)
    first, second = deliver(alice, endpoint, key="a"), deliver(alice, endpoint, key="b")
    before = timezone.now()
    assert attempt(first) == "succeeded"  # takes the only token; the next one comes 0.5 s later
    assert attempt(second) == "throttled"
    after = timezone.now()
    second.refresh_from_db()
    assert second.attempts == 0 and second.status == "pending" and not second.attempt_log.exists()
    # the second token is due 0.5 s after the first was taken (Redis's clock: a few ms of slack)
    assert before + timedelta(seconds=0.49) <= second.next_attempt_at <= after + timedelta(seconds=0.51)
    assert dispatcher.scheduler(Lane.IO_NOTIFY).known(f"notify-dlv-{second.id}-1") in ("delayed", "released")
    assert attempt(second, reserved=True) == "succeeded"  # it holds its token: no second check
    assert json.loads(receiver.received()[1].body)["type"] == "job.failed"


def test_a_jobs_later_event_waits_for_its_earlier_ones_first_try_at_the_same_endpoint(
        alice, make_endpoint, receiver, fast_retries, redis_client, make_batch):
    """job.playable and job.succeeded are tries of their own, maybe on two
    threads at once: the receiver still gets them in the order they happened."""
    endpoint = make_endpoint(alice, receiver.url, events=["job.playable", "job.succeeded"])
    [job] = make_batch(alice, ["succeeded"])
    playable, succeeded = (
        services.event_publish(owner=alice, event_type=kind, key=f"{kind}:{job.id}", data={"job": {"id": kind}},
                               job_id=job.id).deliveries.get(endpoint=endpoint)
        for kind in ("job.playable", "job.succeeded"))
    assert attempt(succeeded) == "held"
    succeeded.refresh_from_db()
    assert (succeeded.status, succeeded.attempts, succeeded.seq) == ("pending", 0, 1)
    assert attempt(playable) == "succeeded"
    assert attempt(succeeded) == "succeeded"
    assert [json.loads(r.body)["type"] for r in receiver.received()] == ["job.playable", "job.succeeded"]
