"""Every user belongs to exactly one organisation: a new one gets an
organisation of one, moving people never leaves anyone without one, and an
organisation's plan per lane is bounded like a user's (project/plans.py),
refused where edited and harmless where used."""
from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from organisations import (Membership, Organisation, lane_plans, members_move, organisation_create,
                           organisation_of_one_ensure, organisations_of)
from project.lanes import Lane
from tests.uploads.test_plans import NAN, INF, create_unchecked

pytestmark = pytest.mark.django_db


def test_a_new_user_gets_an_organisation_of_one_named_after_them(make_user):
    alice = make_user("alice")
    membership = Membership.objects.get(user=alice)
    assert membership.organisation.name == "alice"
    assert list(membership.organisation.memberships.values_list("user__username", flat=True)) == ["alice"]


def test_the_organisation_of_one_is_made_once(make_user):
    alice = make_user("alice")
    first = organisation_of_one_ensure(user=alice)
    assert organisation_of_one_ensure(user=alice) == first
    assert Organisation.objects.count() == 1


def test_a_user_without_a_membership_gets_one_on_demand(make_user):
    """Rows made around the signal (bulk_create, a fixture) can still lack one."""
    alice = make_user("alice")
    Membership.objects.filter(user=alice).delete()
    membership = organisation_of_one_ensure(user=alice)
    assert membership.organisation.name == "alice" and membership.user == alice


def test_moving_members_changes_their_one_organisation(make_user):
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    studio = organisation_create(name="Northwind Studio", transcode_weight=3.0)
    Membership.objects.filter(user=carol).delete()  # made around the signal: gets one by the move
    assert members_move(user_ids=[alice.pk, bob.pk, carol.pk], organisation=studio) == 3
    assert members_move(user_ids=[alice.pk], organisation=studio) == 0  # already there
    assert sorted(studio.memberships.values_list("user__username", flat=True)) == ["alice", "bob", "carol"]
    assert Membership.objects.filter(user__in=[alice, bob, carol]).count() == 3
    # Their organisations of one stay, empty, until staff delete them.
    assert Organisation.objects.filter(name="alice", memberships__isnull=True).exists()


def test_an_organisation_with_members_cannot_be_deleted(make_user):
    alice = make_user("alice")
    with pytest.raises(ProtectedError):
        alice.membership.organisation.delete()


def test_a_users_deletion_takes_only_their_membership(make_user):
    alice = make_user("alice")
    org = alice.membership.organisation
    alice.delete()
    assert Organisation.objects.filter(pk=org.pk).exists() and not org.memberships.exists()


BAD_VALUES = [
    ("transcode_weight", 1e-300), ("transcode_weight", 0.0), ("notify_weight", 1e6), ("notify_weight", NAN),
    ("transcode_weight", INF), ("transcode_cap", 0), ("notify_cap", 0), ("transcode_cap", 10**6),
    ("transcode_rate_per_s", 0.0), ("notify_rate_per_s", -2.0), ("notify_rate_per_s", INF),
    ("transcode_burst", 0), ("notify_burst", 10**6),
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES)
def test_a_bad_plan_value_is_refused_where_plans_are_edited(field, value):
    with pytest.raises(ValidationError) as refused:
        organisation_create(name="x", **{field: value})
    assert list(refused.value.error_dict) == [field]
    assert not Organisation.objects.exists()


@pytest.mark.parametrize(("field", "value"), [v for v in BAD_VALUES if v[1] == v[1]])  # NaN: not storable in SQLite
def test_the_database_refuses_a_bad_plan_value_too(field, value):
    with pytest.raises(IntegrityError), transaction.atomic():
        Organisation.objects.create(name="x", **{field: value})


def test_an_organisations_plan_on_each_lane(make_user, settings):
    settings.NOTIFY_USER_CAP = 16
    alice, bob = make_user("alice"), make_user("bob")
    studio = organisation_create(name="Northwind", transcode_weight=3.0, transcode_cap=8, transcode_rate_per_s=2.0,
                                 transcode_burst=4, notify_weight=0.5, notify_rate_per_s=5.0)
    members_move(user_ids=[alice.pk], organisation=studio)
    cpu = lane_plans(user_ids=[alice.pk, bob.pk], lane=Lane.CPU_TRANSCODE)
    io = lane_plans(user_ids=[alice.pk, bob.pk], lane=Lane.IO_NOTIFY)
    assert (cpu[alice.pk].key, cpu[alice.pk].weight, cpu[alice.pk].cap, cpu[alice.pk].rate) == (
        f"org:{studio.pk}", 3.0, 8, (2.0, 4.0))
    # No cap of its own on io-notify: NOTIFY_USER_CAP, as for a user.
    assert (io[alice.pk].weight, io[alice.pk].cap, io[alice.pk].rate) == (0.5, 16, (5.0, 10.0))
    assert (cpu[bob.pk].key, cpu[bob.pk].weight, cpu[bob.pk].cap, cpu[bob.pk].rate) == (
        f"org:{bob.membership.organisation_id}", 1.0, None, None)


def test_a_stored_bad_organisation_plan_falls_back_to_the_defaults_with_a_warning(make_user, caplog):
    alice = make_user("alice")
    bad = create_unchecked(Organisation, name="bad", transcode_weight=1e-300, transcode_cap=0, notify_burst=0,
                           notify_rate_per_s=3.0)
    members_move(user_ids=[alice.pk], organisation=bad)
    with caplog.at_level(logging.WARNING, logger="organisations.selectors"):
        cpu = lane_plans(user_ids=[alice.pk], lane=Lane.CPU_TRANSCODE)[alice.pk]
        io = lane_plans(user_ids=[alice.pk], lane=Lane.IO_NOTIFY)[alice.pk]
    assert (cpu.weight, cpu.cap) == (1.0, None)
    assert io.rate == (3.0, 10.0)
    assert f"plan of organisation {bad.pk}" in caplog.text


def test_who_is_where_in_one_query(make_user, django_assert_num_queries):
    alice, bob = make_user("alice"), make_user("bob")
    studio = organisation_create(name="Northwind")
    members_move(user_ids=[alice.pk, bob.pk], organisation=studio)
    with django_assert_num_queries(1):
        where = organisations_of(user_ids=[alice.pk, bob.pk, 10**9])
    assert {user_id: (b.name, b.key) for user_id, b in where.items()} == {
        alice.pk: ("Northwind", f"org:{studio.pk}"), bob.pk: ("Northwind", f"org:{studio.pk}")}
    with django_assert_num_queries(1):
        assert set(lane_plans(user_ids=[alice.pk, bob.pk], lane=Lane.CPU_TRANSCODE)) == {alice.pk, bob.pk}
