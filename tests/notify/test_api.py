"""The webhooks and preferences API: shapes, the secret shown once, ownership."""
from __future__ import annotations

import pytest

from notify.models import Delivery, Endpoint, Event

pytestmark = pytest.mark.django_db


def test_registering_returns_the_secret_once_and_listing_never_shows_it(make_user, api_client_for, receiver):
    client = api_client_for(make_user("alice"))
    resp = client.post("/api/webhooks/", {"url": receiver.url, "events": ["job.failed", "batch.completed"]},
                       format="json")
    assert resp.status_code == 201
    body = resp.json()
    assert set(body) >= {"id", "url", "events", "secret"}
    assert body["url"] == receiver.url and body["events"] == ["job.failed", "batch.completed"]
    assert body["secret"].startswith("whsec_") and len(body["secret"]) > 40
    listed = client.get("/api/webhooks/").json()["results"]
    assert [e["id"] for e in listed] == [body["id"]]
    assert "secret" not in listed[0] and "secret" not in client.get(f"/api/webhooks/{body['id']}/").json()


@pytest.mark.parametrize(("payload", "code"), [
    ({"url": "http://127.0.0.1:9/h", "events": []}, "invalid_events"),
    ({"url": "http://127.0.0.1:9/h", "events": ["job.exploded"]}, "invalid_events"),
    ({"url": "http://127.0.0.1:9/h", "events": "job.failed"}, "invalid_events"),
    ({"url": "gopher://127.0.0.1:9/h", "events": ["job.failed"]}, "url_scheme"),
    ({"events": ["job.failed"]}, "invalid"),
])
def test_bad_registrations_are_400s_with_a_code(payload, code, make_user, api_client_for):
    resp = api_client_for(make_user("alice")).post("/api/webhooks/", payload, format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == code


def test_another_users_endpoint_is_not_found_for_reading_deleting_or_its_deliveries(
        make_user, api_client_for, make_endpoint):
    alice, bob = make_user("alice"), make_user("bob")
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/h")
    bob_client = api_client_for(bob)
    for resp in (bob_client.get(f"/api/webhooks/{endpoint.id}/"), bob_client.delete(f"/api/webhooks/{endpoint.id}/"),
                 bob_client.get(f"/api/webhooks/{endpoint.id}/deliveries/")):
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    assert bob_client.get("/api/webhooks/").json()["results"] == []
    assert Endpoint.objects.filter(id=endpoint.id).exists()
    assert api_client_for(alice).delete(f"/api/webhooks/{endpoint.id}/").status_code == 204
    assert not Endpoint.objects.filter(id=endpoint.id).exists()


def test_deliveries_list_every_attempt_of_the_owners_endpoint(make_user, api_client_for, make_endpoint):
    from django.utils import timezone

    from notify.models import DeliveryAttempt

    alice = make_user("alice")
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/h")
    event = Event.objects.create(owner=alice, type="job.failed", key="k", payload={"type": "job.failed", "data": {}})
    delivery = Delivery.objects.create(event=event, channel="webhook", endpoint=endpoint, status="pending",
                                       attempts=1, last_status_code=503)
    DeliveryAttempt.objects.create(delivery=delivery, number=1, started_at=timezone.now(), latency_ms=12,
                                   status_code=503, response_prefix="busy", outcome="retry")
    [listed] = api_client_for(alice).get(f"/api/webhooks/{endpoint.id}/deliveries/").json()["results"]
    assert listed["event"] == {"id": event.webhook_id, "type": "job.failed"}
    assert listed["status"] == "pending"
    assert listed["attempt_log"][0] | {"started_at": None} == {
        "number": 1, "started_at": None, "latency_ms": 12, "status_code": 503, "error": "",
        "response_prefix": "busy", "outcome": "retry", "next_attempt_at": None}


def test_preferences_default_to_batch_summaries_by_email_and_can_be_changed(make_user, api_client_for):
    client = api_client_for(make_user("alice"))
    assert client.get("/api/notifications/preferences/").json() == {
        "email": ["batch.completed"], "webhook": ["job.playable", "job.succeeded", "job.failed", "batch.completed"]}
    resp = client.put("/api/notifications/preferences/", {"email": ["job.failed"], "webhook": []}, format="json")
    assert resp.status_code == 200
    assert resp.json() == {"email": ["job.failed"], "webhook": []}
    bad = client.put("/api/notifications/preferences/", {"email": ["nope"]}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_events"


def test_an_unchanged_job_list_is_a_304_and_a_status_change_a_new_200(make_user, api_client_for, make_batch,
                                                                     settings):
    from uploads.models import Job

    # The tag also turns over every half link lifetime (fresh signed links);
    # with a long lifetime no turnover falls inside this test.
    settings.FAIRLANE_URL_MAX_AGE_S = 10**9
    alice = make_user("alice")
    [job] = make_batch(alice, ["running"])
    client = api_client_for(alice)
    first = client.get("/api/jobs/")
    assert first.status_code == 200 and first.json()["results"][0]["status"] == "running"
    etag = first.headers["ETag"]
    idle = client.get("/api/jobs/", HTTP_IF_NONE_MATCH=etag)
    assert idle.status_code == 304 and idle.content == b""
    Job.objects.filter(id=job.id).update(progress=40)
    moved = client.get("/api/jobs/", HTTP_IF_NONE_MATCH=etag)
    assert moved.status_code == 200 and moved.json()["results"][0]["progress"] == 40
    assert moved.headers["ETag"] != etag
    # Another user's tag never matches: it is computed from this user's rows.
    assert api_client_for(make_user("bob")).get("/api/jobs/", HTTP_IF_NONE_MATCH=etag).status_code == 200
