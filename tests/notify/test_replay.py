"""Replaying a delivery (notify.services.delivery_replay): a new delivery of
the same event to the same endpoint, through the fair io lane, with the
same webhook-id; from the API and the endpoint's page. A real receiver on
127.0.0.1, the real database and Redis; the tests play the io worker."""
from __future__ import annotations

import pytest

import dispatcher
from notify import services
from notify.models import Delivery
from project.lanes import Lane
from tests.notify.receiver import Answer, Receiver, scripted
from tests.notify.test_deliveries import attempt, deliver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_io_worker")]


@pytest.fixture
def alice(make_user):
    return make_user("alice")


def test_a_replay_is_a_new_delivery_of_the_same_event_through_the_fair_lane(
        alice, make_endpoint, fast_retries, redis_client):
    with Receiver(scripted(Answer(400, body=b"bad"), Answer(200))) as r:
        endpoint = make_endpoint(alice, r.url)
        delivery = deliver(alice, endpoint)
        assert attempt(delivery) == "failed"  # a 4xx is not retried
        delivery.refresh_from_db()
        replay = services.delivery_replay(delivery=delivery, actor=alice)
        assert replay.id != delivery.id and replay.event_id == delivery.event_id
        assert (replay.replay_of_id, replay.endpoint_id, replay.status) == (delivery.id, endpoint.id, "pending")
        # Submitted to the fair io lane as its first try, charged to the owner.
        assert dispatcher.scheduler(Lane.IO_NOTIFY).known(f"notify-dlv-{replay.id}-0") in ("held", "released")
        assert attempt(replay) == "succeeded"
        first, second = r.received()
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == delivery.event.webhook_id
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("failed", 1, 400)  # its log stays
    assert [a.status_code for a in replay.attempt_log.all()] == [200]


def test_a_pending_delivery_or_a_disabled_endpoint_is_not_replayed(alice, make_endpoint, fast_retries):
    from uploads.errors import ApplicationError

    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    delivery = deliver(alice, endpoint)
    with pytest.raises(ApplicationError) as refused:
        services.delivery_replay(delivery=delivery, actor=alice)
    assert (refused.value.code, refused.value.status_code) == ("not_replayable", 409)
    Delivery.objects.filter(id=delivery.id).update(status="succeeded")
    endpoint.is_active = False
    endpoint.save()
    delivery.refresh_from_db()
    with pytest.raises(ApplicationError) as refused:
        services.delivery_replay(delivery=delivery, actor=alice)
    assert refused.value.code == "endpoint_disabled"
    assert Delivery.objects.count() == 1


def test_publishing_still_makes_one_delivery_per_event_and_endpoint_once_replayed(alice, make_endpoint, fast_retries):
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    delivery = deliver(alice, endpoint, key="once")
    Delivery.objects.filter(id=delivery.id).update(status="failed")
    delivery.refresh_from_db()
    services.delivery_replay(delivery=delivery, actor=alice)
    services.delivery_replay(delivery=delivery, actor=alice)  # as often as wanted
    assert services.event_publish(owner=alice, event_type="job.failed", key="once", data={}) is None
    assert Delivery.objects.filter(replay_of__isnull=True).count() == 1 and Delivery.objects.count() == 3


def test_the_api_replays_an_ended_delivery_of_ones_own_endpoint_only(
        alice, make_user, make_endpoint, api_client_for, fast_retries):
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    delivery = deliver(alice, endpoint)
    url = f"/api/webhooks/{endpoint.id}/deliveries/{delivery.id}/replay/"
    client = api_client_for(alice)
    resp = client.post(url)
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_replayable"
    Delivery.objects.filter(id=delivery.id).update(status="failed")
    assert api_client_for(make_user("bob")).post(url).status_code == 404
    resp = client.post(url)
    assert resp.status_code == 202
    body = resp.json()
    assert body["replay_of"] == str(delivery.id) and body["status"] == "pending"
    listed = client.get(f"/api/webhooks/{endpoint.id}/deliveries/").json()["results"]
    assert [d["replay_of"] for d in listed] == [str(delivery.id), None]


def test_the_endpoint_page_replays_and_says_so(alice, make_user, make_endpoint, client, fast_retries):
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    delivery = deliver(alice, endpoint)
    page = f"/notifications/webhooks/{endpoint.id}/"
    client.force_login(alice)
    assert b'class="replay"' not in client.get(page).content  # pending: nothing to replay yet
    resp = client.post(page, {"delivery_id": str(delivery.id)}, follow=True)
    assert b"still pending" in resp.content and Delivery.objects.count() == 1
    Delivery.objects.filter(id=delivery.id).update(status="failed", last_status_code=500, attempts=4)
    assert b'class="replay"' in client.get(page).content
    resp = client.post(page, {"delivery_id": str(delivery.id)}, follow=True)
    assert resp.redirect_chain[-1][0] == page and b"is being delivered again" in resp.content
    assert Delivery.objects.filter(replay_of=delivery).count() == 1
    client.force_login(make_user("bob"))
    assert client.post(page, {"delivery_id": str(delivery.id)}).status_code == 404
    client.force_login(alice)
    assert client.post(page, {"delivery_id": "not-a-uuid"}).status_code == 404
