"""Operators replay deliveries from the admin: each a new delivery of the
same event through the fair io lane (notify.services.delivery_replay),
permitted, logged; deliveries are records, never edited there."""
from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

import dispatcher
from notify.models import Delivery
from project.lanes import Lane
from tests.notify.test_deliveries import deliver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_io_worker")]
CHANGELIST = "/admin/notify/delivery/"


@pytest.fixture
def alice(make_user):
    return make_user("alice")


def test_replay_makes_a_new_delivery_through_the_fair_lane_and_leaves_pending_ones(admin_client, alice,
                                                                                  make_endpoint):
    endpoint = make_endpoint(alice, "http://127.0.0.1:9/hook")
    ended, pending = deliver(alice, endpoint, key="a"), deliver(alice, endpoint, key="b")
    Delivery.objects.filter(id=ended.id).update(status="failed", attempts=4, last_status_code=500)
    resp = admin_client.post(CHANGELIST, {"action": "replay", "_selected_action": [ended.id, pending.id]},
                             follow=True)
    messages = [str(m) for m in resp.context["messages"]]
    assert "Replaying 1 delivery." in messages
    assert any(m.startswith(f"Left alone ({str(pending.id)[:8]}): The delivery is still pending") for m in messages)
    [replay] = Delivery.objects.filter(replay_of=ended)
    assert (replay.event_id, replay.endpoint_id, replay.status) == (ended.event_id, endpoint.id, "pending")
    assert dispatcher.scheduler(Lane.IO_NOTIFY).known(f"notify-dlv-{replay.id}-0") in ("held", "released")
    assert not Delivery.objects.filter(replay_of=pending).exists()
    assert str(replay.id) in LogEntry.objects.get(object_id=str(ended.id)).change_message


def test_staff_without_the_replay_permission_are_not_offered_it(client, make_user, alice, make_endpoint):
    staff = make_user("staff", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_delivery"))
    client.force_login(staff)
    delivery = deliver(alice, make_endpoint(alice, "http://127.0.0.1:9/hook"))
    Delivery.objects.filter(id=delivery.id).update(status="failed")
    assert b'value="replay"' not in client.get(CHANGELIST).content
    client.post(CHANGELIST, {"action": "replay", "_selected_action": [delivery.id]})
    assert Delivery.objects.count() == 1
    staff.user_permissions.add(Permission.objects.get(codename="replay_delivery"))
    client.force_login(type(staff).objects.get(pk=staff.pk))
    page = client.get(f"{CHANGELIST}{delivery.id}/change/").content.decode()
    assert 'value="replay"' in page and ">Replay</button>" in page  # on the delivery's own page too


def test_a_delivery_is_a_record_nobody_edits(admin_client, alice, make_endpoint):
    delivery = deliver(alice, make_endpoint(alice, "http://127.0.0.1:9/hook"))
    page = admin_client.get(f"{CHANGELIST}{delivery.id}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert b">Replay</button>" not in page.content  # pending: it has tries coming
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    admin_client.post(f"{CHANGELIST}{delivery.id}/change/", {"status": "succeeded"})
    delivery.refresh_from_db()
    assert delivery.status == "pending"
