"""An endpoint deleted while the notify lane publishes to it: neither side
fails for the other (PostgreSQL checks foreign keys at commit, so the two
meet there)."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import IntegrityError, connection
from django.db.models.signals import pre_delete

from notify import services
from notify.models import Delivery, Endpoint, Event

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_io_worker"),
              pytest.mark.skipif("connection.vendor != 'postgresql'",
                                 reason="the race is PostgreSQL's deferred foreign keys; SQLite has one writer")]


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


def test_a_delivery_added_while_its_endpoint_is_deleted_is_refused_and_the_delete_succeeds(make_user, make_endpoint):
    """bench-isolation's hostile user got a 500 deleting an endpoint while its
    jobs' events were being published to it. Here a delivery to it commits
    (on the notify lane's own connection) after Django collected the
    endpoint's deliveries and before the delete commits: the delete
    succeeds, the delivery is refused, and nothing of the endpoint is left."""
    alice = make_user("alice")
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    event = Event.objects.create(owner=alice, type="job.succeeded", key="race", payload={})
    outcome: dict = {}

    def publish() -> None:  # the notify lane
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            Delivery.objects.create(event=event, channel="webhook", endpoint_id=endpoint.id)
            outcome["added"] = True
        except IntegrityError:
            outcome["refused"] = True
        finally:
            connection.close()

    publisher = threading.Thread(target=publish)

    def collected(sender, instance, **kwargs) -> None:
        # The deliveries to delete are collected; now the lane commits one.
        publisher.start()
        deadline = time.monotonic() + 60
        while publisher.is_alive() and time.monotonic() < deadline:
            if "pid" in outcome and _waiting_on_a_lock(outcome["pid"]):
                return  # it waits for the delete
            time.sleep(0.01)

    pre_delete.connect(collected, sender=Endpoint)
    try:
        services.endpoint_delete(endpoint=endpoint)
    finally:
        pre_delete.disconnect(collected, sender=Endpoint)
    publisher.join(timeout=60)
    assert outcome.get("refused") and not outcome.get("added"), outcome
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not Delivery.objects.filter(endpoint_id=endpoint.pk).exists()


def test_an_event_whose_endpoint_went_meanwhile_still_reaches_the_other_targets(make_user, make_endpoint,
                                                                                 monkeypatch):
    """The endpoint is deleted between the publish reading its targets and
    committing the deliveries: the event is published again without it,
    not dropped for everyone (its IntegrityError had read as "published
    already")."""
    alice = make_user("alice")
    gone = make_endpoint(alice, "http://127.0.0.1:9/gone", events=["job.failed"])
    kept = make_endpoint(alice, "http://127.0.0.1:9/kept", events=["job.failed"])
    services.preferences_set(user=alice, channel="webhook", events=["job.failed"])
    read = services._targets
    calls = []

    def targets_then_delete(**kwargs):
        found = read(**kwargs)
        if not calls:
            Endpoint.objects.filter(pk=gone.pk).delete()  # committed: another request
        calls.append(len(found))
        return found

    monkeypatch.setattr(services, "_targets", targets_then_delete)
    event = services.event_publish(owner=alice, event_type="job.failed", key="job.failed:x", data={})
    assert event is not None and len(calls) == 2
    assert set(Delivery.objects.filter(event=event).values_list("endpoint_id", flat=True)) == {kept.pk}


def test_a_try_recorded_while_its_endpoint_is_deleted_does_not_fail_the_delete(make_user, make_endpoint):
    """The same meeting one step later: a try of one of the endpoint's
    deliveries has stored its attempt row, not yet committed, when the
    delete runs. The delete removed the attempts it could see, then waited
    for the try's lock on the delivery, and failed at its commit: the try's
    attempt still referenced the delivery (a 500 to the owner;
    bench-isolation met it). Now the delete succeeds, the try's answer is
    kept until then, and nothing of the endpoint is left."""
    from django.db.models.signals import post_save
    from django.utils import timezone

    from notify import transport
    from notify.models import DeliveryAttempt

    alice = make_user("alice")
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    event = Event.objects.create(owner=alice, type="job.succeeded", key="race", payload={})
    delivery = Delivery.objects.create(event=event, channel="webhook", endpoint_id=endpoint.id)
    claimed = services._claim(str(delivery.id), delivery.seq)  # a try under way: sending, counted
    inserted, go = threading.Event(), threading.Event()
    outcome: dict = {}

    def hold(sender, instance, **kwargs) -> None:  # the attempt row stored, its transaction open
        if threading.current_thread() is recorder:
            inserted.set()
            go.wait(60)

    def record() -> None:  # the notify lane, its answer in hand
        try:
            outcome["recorded"] = services._record(
                claimed, started=timezone.now(), answer=transport.Response(status=200, latency_ms=5),
                retryable=True)
        finally:
            connection.close()

    def release_once_the_delete_waits(pid: int) -> None:
        deadline = time.monotonic() + 60
        while not _waiting_on_a_lock(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.set()
        connection.close()

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        deleting = cursor.fetchone()[0]
    recorder = threading.Thread(target=record)
    post_save.connect(hold, sender=DeliveryAttempt)
    try:
        recorder.start()
        assert inserted.wait(60)
        releaser = threading.Thread(target=release_once_the_delete_waits, args=(deleting,))
        releaser.start()
        services.endpoint_delete(endpoint=endpoint)
    finally:
        go.set()
        post_save.disconnect(hold, sender=DeliveryAttempt)
    recorder.join(timeout=60)
    releaser.join(timeout=60)
    assert outcome.get("recorded") == "succeeded", outcome
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not Delivery.objects.filter(pk=delivery.pk).exists()
    assert not DeliveryAttempt.objects.filter(delivery_id=delivery.pk).exists()
