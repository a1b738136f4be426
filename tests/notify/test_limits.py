"""Webhook endpoints per user are bounded by the user's plan
(max_webhook_endpoints; NOTIFY_MAX_WEBHOOK_ENDPOINTS by default): every
event is one delivery per endpoint, held in Redis until sent. A refusal
creates nothing and leaves the user's endpoints, and everyone else's, alone."""
from __future__ import annotations

import pytest

from notify.models import Endpoint
from uploads.models import Profile

pytestmark = pytest.mark.django_db


def register(client, url: str):
    return client.post("/api/webhooks/", {"url": url, "events": ["job.failed"]}, format="json")


def test_endpoints_past_the_plans_limit_are_refused_and_a_deleted_one_frees_its_place(
        make_user, api_client_for, receiver, settings):
    settings.NOTIFY_MAX_WEBHOOK_ENDPOINTS = 1  # bob's, who has no plan of his own
    alice, bob = make_user("alice"), make_user("bob")
    Profile.objects.create(user=alice, max_webhook_endpoints=2)  # alice's own wins
    client = api_client_for(alice)
    first, second = register(client, receiver.url).json(), register(client, receiver.url + "?2").json()
    refused = register(client, receiver.url + "?3")
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert (error["code"], error["limit"], error["count"], error["requested"]) == ("too_many_endpoints", 2, 2, 1)
    assert {str(i) for i in Endpoint.objects.filter(owner=alice).values_list("id", flat=True)} == {
        first["id"], second["id"]}
    bob_client = api_client_for(bob)
    assert register(bob_client, receiver.url).status_code == 201
    assert register(bob_client, receiver.url).json()["error"]["code"] == "too_many_endpoints"
    assert client.delete(f"/api/webhooks/{first['id']}/").status_code == 204
    assert register(client, receiver.url + "?3").status_code == 201
    assert Endpoint.objects.filter(owner=alice).count() == 2 and Endpoint.objects.filter(owner=bob).count() == 1


def test_a_disabled_endpoint_still_counts(make_user, api_client_for, make_endpoint, receiver):
    """It exists and can be enabled again; deleting it frees its place."""
    alice = make_user("alice")
    Profile.objects.create(user=alice, max_webhook_endpoints=1)
    make_endpoint(alice, receiver.url, is_active=False)
    assert register(api_client_for(alice), receiver.url).status_code == 429


def test_the_notifications_page_says_why_an_endpoint_was_refused(client, make_user, make_endpoint, receiver):
    alice = make_user("alice")
    Profile.objects.create(user=alice, max_webhook_endpoints=1)
    make_endpoint(alice, receiver.url)
    client.force_login(alice)
    resp = client.post("/notifications/", {"action": "register", "url": receiver.url, "events": ["job.failed"]})
    assert resp.status_code == 400
    assert "Your plan&#x27;s limit on webhook endpoints is 1 and you have 1" in resp.content.decode()
    assert Endpoint.objects.filter(owner=alice).count() == 1
