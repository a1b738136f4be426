"""Staff manage organisations and who is in them from the admin: an
organisation's plan per lane (refused when out of bounds, as a user's
plan), its members, and moving people, from a user's page or many at once
from the users list (asked first, logged); every move goes through
organisations.services.members_move."""
from __future__ import annotations

import pytest
from django.forms import MultiWidget
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

from organisations import Membership, Organisation, members_move, organisation_create

pytestmark = pytest.mark.django_db
ORGS = "/admin/organisations/organisation/"
USERS = "/admin/auth/user/"
PLAN = {"transcode_weight": "3", "transcode_cap": "8", "transcode_rate_per_s": "", "transcode_burst": "10",
        "notify_weight": "1", "notify_cap": "", "notify_rate_per_s": "2.5", "notify_burst": "5"}


def test_staff_make_an_organisation_with_its_plan_on_each_lane(admin_client):
    resp = admin_client.post(f"{ORGS}add/", {"name": "Northwind Studio", **PLAN})
    assert resp.status_code == 302, resp.context["adminform"].form.errors
    org = Organisation.objects.get(name="Northwind Studio")
    assert (org.transcode_weight, org.transcode_cap, org.notify_rate_per_s, org.notify_burst) == (3.0, 8, 2.5, 5)


def test_the_admin_shows_why_an_organisations_plan_is_refused(admin_client):
    resp = admin_client.post(f"{ORGS}add/", {"name": "x", **PLAN, "transcode_weight": "1e-300", "notify_cap": "0"})
    assert resp.status_code == 200
    errors = resp.context["adminform"].form.errors
    assert "greater than or equal to 0.01" in errors["transcode_weight"][0]
    assert "greater than or equal to 1" in errors["notify_cap"][0]
    assert not Organisation.objects.filter(name="x").exists()


def test_the_list_says_how_many_members_and_the_plan(admin_client, make_user):
    studio = organisation_create(name="Northwind Studio", transcode_weight=3.0)
    members_move(user_ids=[make_user(f"u{i}").pk for i in range(3)], organisation=studio)
    resp = admin_client.get(ORGS, {"q": "northwind"})
    rows = resp.context["cl"].result_list
    assert [(o.name, o.members) for o in rows] == [("Northwind Studio", 3)]
    # A member's name finds their organisation too.
    assert "Northwind Studio" in [o.name for o in admin_client.get(ORGS, {"q": "u1"}).context["cl"].result_list]


def test_an_organisations_page_links_to_its_members(admin_client, make_user):
    studio = organisation_create(name="Northwind Studio")
    alice, bob = make_user("alice"), make_user("bob")
    members_move(user_ids=[alice.pk, bob.pk], organisation=studio)
    page = admin_client.get(f"{ORGS}{studio.pk}/change/").content.decode()
    members = f"{USERS}?membership__organisation__id__exact={studio.pk}"
    assert members.replace("&", "&amp;") in page and "2 members" in page
    listed = admin_client.get(members).context["cl"].result_list
    assert sorted(u.username for u in listed) == ["alice", "bob"]


def test_an_organisation_with_members_is_not_deleted(admin_client, make_user):
    org = make_user("alice").membership.organisation
    resp = admin_client.post(f"{ORGS}{org.pk}/delete/", {"post": "yes"})
    assert resp.status_code == 200 and b"protected" in resp.content
    assert Organisation.objects.filter(pk=org.pk).exists()


def test_the_users_list_shows_and_finds_their_organisation(admin_client, make_user):
    studio = organisation_create(name="Northwind Studio")
    members_move(user_ids=[make_user("alice").pk], organisation=studio)
    make_user("bob")
    resp = admin_client.get(USERS, {"q": "northwind"})
    assert [u.username for u in resp.context["cl"].result_list] == ["alice"]
    assert "Northwind Studio" in resp.content.decode()


def _change_form_data(resp) -> dict:
    """What the user's change page would post back unchanged: its form's
    and its inlines' values, with their management forms."""
    data = {}
    form = resp.context["adminform"].form
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if isinstance(field.widget, MultiWidget):  # the date joined: a date and a time
            data.update({f"{name}_{i}": part or "" for i, part in enumerate(field.widget.decompress(value))})
        elif value is not None and value is not False:
            data[name] = value.pk if hasattr(value, "pk") else value
    for inline in resp.context["inline_admin_formsets"]:
        formset = inline.formset
        for key, value in formset.management_form.initial.items():
            data[f"{formset.prefix}-{key}"] = value
        for sub in formset.forms:
            for name, field in sub.fields.items():
                value = sub.initial.get(name, field.initial)
                if value is not None and value is not False:
                    data[sub.add_prefix(name)] = value.pk if hasattr(value, "pk") else value
    return {k: v for k, v in data.items() if k != "password"}


def test_a_users_page_moves_them_to_another_organisation(admin_client, make_user):
    alice = make_user("alice")
    studio = organisation_create(name="Northwind Studio")
    page = admin_client.get(f"{USERS}{alice.pk}/change/")
    assert "alice" in page.content.decode()  # their organisation of one, named after them
    data = _change_form_data(page)
    [field] = [k for k in data if k.endswith("-organisation")]
    data[field] = studio.pk
    resp = admin_client.post(f"{USERS}{alice.pk}/change/", data)
    assert resp.status_code == 302, (resp.context["adminform"].form.errors, [f.formset.errors for f in resp.context["inline_admin_formsets"]])
    assert Membership.objects.get(user=alice).organisation == studio
    assert "Northwind Studio" in LogEntry.objects.filter(object_id=str(alice.pk)).first().change_message


def test_moving_selected_users_asks_where_then_moves_them_and_logs(admin_client, make_user):
    alice, bob = make_user("alice"), make_user("bob")
    studio = organisation_create(name="Northwind Studio")
    ask = admin_client.post(USERS, {"action": "move_to_organisation", "_selected_action": [alice.pk, bob.pk]})
    assert ask.status_code == 200 and b"<h1>Move 2 users to an organisation</h1>" in ask.content
    assert Membership.objects.get(user=alice).organisation.name == "alice"  # nothing yet
    done = admin_client.post(USERS, {"action": "move_to_organisation", "_selected_action": [alice.pk, bob.pk],
                                     "organisation": studio.pk, "confirm": "yes"})
    assert done.status_code == 302
    assert sorted(studio.memberships.values_list("user__username", flat=True)) == ["alice", "bob"]
    assert LogEntry.objects.filter(object_id__in=[str(alice.pk), str(bob.pk)],
                                   change_message__contains="Northwind Studio").count() == 2


def test_moving_needs_the_permission_to_change_memberships(client, make_user):
    staff = make_user("staff", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_user", "change_user"]))
    client.force_login(staff)
    alice = make_user("alice")
    studio = organisation_create(name="Northwind Studio")
    assert b"move_to_organisation" not in client.get(USERS).content
    client.post(USERS, {"action": "move_to_organisation", "_selected_action": [alice.pk],
                        "organisation": studio.pk, "confirm": "yes"})
    assert Membership.objects.get(user=alice).organisation.name == "alice"


def test_a_users_plan_says_its_weight_is_within_the_organisation(admin_client, make_user):
    alice = make_user("alice")
    page = admin_client.get(f"{USERS}{alice.pk}/change/").content.decode()
    assert "Share of the organisation's worker time relative to its other members" in page
