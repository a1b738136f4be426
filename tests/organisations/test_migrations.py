"""Organisations arrive without changing anyone's share: migration 0002
gives every existing user an organisation of one whose plan is a copy of
theirs (weight on both lanes, caps, the io rate), so the two-level
dispatcher shares the lanes between them as the flat one did."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.uploads.test_plan_migrations import migrate

pytestmark = pytest.mark.django_db(transaction=True)


def every_app_but_organisations_at(name: str) -> list[tuple[str, str]]:
    """Every app at its latest, organisations at `name` (the models of
    every app are then there to be used, as in a deploy)."""
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    return [node for node in leaves if node[0] != "organisations"] + [("organisations", name)]


def test_every_existing_user_gets_an_organisation_of_one_with_their_plan():
    apps = migrate(every_app_but_organisations_at("0001_initial"))
    try:
        User, Profile = apps.get_model("auth", "User"), apps.get_model("uploads", "Profile")
        Organisation, Membership = apps.get_model("organisations", "Organisation"), \
            apps.get_model("organisations", "Membership")
        planned = User.objects.create(username="planned")
        Profile.objects.create(user=planned, weight=2.5, transcode_cap=3, notify_cap=6, notify_rate_per_s=4.0,
                               notify_burst=5)
        plain = User.objects.create(username="plain")  # no plan: the defaults
        placed = User.objects.create(username="placed")  # already in one (made by the signal while migrating)
        studio = Organisation.objects.create(name="Studio", transcode_weight=7.0)
        Membership.objects.create(user=placed, organisation=studio)
        # More than one page of users.
        many = User.objects.bulk_create([User(username=f"u{i:04}") for i in range(1, 1_203)])

        apps = migrate(every_app_but_organisations_at("0002_organisations_of_one"))
        Organisation, Membership = apps.get_model("organisations", "Organisation"), \
            apps.get_model("organisations", "Membership")
        fields = ("name", "transcode_weight", "transcode_cap", "transcode_rate_per_s", "notify_weight", "notify_cap",
                  "notify_rate_per_s", "notify_burst")
        plan_of = {m.user.username: tuple(getattr(m.organisation, f) for f in fields)
                   for m in Membership.objects.select_related("user", "organisation")}
        assert plan_of["planned"] == ("planned", 2.5, 3, None, 2.5, 6, 4.0, 5)
        assert plan_of["plain"] == ("plain", 1.0, None, None, 1.0, None, None, 10)
        assert plan_of["placed"] == ("Studio", 7.0, None, None, 1.0, None, None, 10)
        assert len(plan_of) == 3 + len(many)
        assert Membership.objects.filter(organisation__name="u1202").get().user.username == "u1202"
        # One organisation per user it made, each with one member.
        assert Organisation.objects.count() == 1 + 2 + len(many)
        assert not Organisation.objects.exclude(name="Studio").exclude(memberships__isnull=False).exists()
    finally:
        migrate()
