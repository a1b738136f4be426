"""Fair-share plans: refused where they are edited (validators, the admin,
database constraints), and harmless where they are used even when a bad one
is stored anyway (uploads.services.fair_policies falls back to defaults)."""
from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from project.lanes import Lane
from uploads.models import Profile
from uploads.services import fair_policies

pytestmark = pytest.mark.django_db
NAN, INF = float("nan"), float("inf")


def create_unchecked(model, **fields):
    """A row as a database without the table's check constraints would keep
    it (rows from before they existed): the constraints are lifted inside
    this test's transaction only, which is rolled back at its end."""
    assert connection.in_atomic_block, "only inside a test transaction"
    table = model._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
                           [table])
            for (name,) in cursor.fetchall():
                cursor.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
            return model.objects.create(**fields)
        cursor.execute("PRAGMA ignore_check_constraints = ON")
        try:
            return model.objects.create(**fields)
        finally:
            cursor.execute("PRAGMA ignore_check_constraints = OFF")


def store_unchecked(user, **plan) -> Profile:
    return create_unchecked(Profile, user=user, **plan)


BAD_VALUES = [
    ("weight", 1e-300), ("weight", 0.0), ("weight", -1.0), ("weight", 1e6), ("weight", NAN), ("weight", INF),
    ("transcode_cap", 0), ("notify_cap", 0), ("transcode_cap", 10**6),
    ("notify_rate_per_s", 0.0), ("notify_rate_per_s", -2.0), ("notify_rate_per_s", NAN), ("notify_rate_per_s", INF),
    ("notify_burst", 0),
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES)
def test_a_bad_plan_value_is_refused_where_plans_are_edited(field, value, make_user):
    profile = Profile(user=make_user("u"), **{field: value})
    with pytest.raises(ValidationError) as refused:
        profile.full_clean()
    assert list(refused.value.error_dict) == [field]


@pytest.mark.parametrize(("field", "value"), [v for v in BAD_VALUES if v[1] == v[1]])  # NaN: not storable in SQLite
def test_the_database_refuses_a_bad_plan_value_too(field, value, make_user):
    user = make_user("u")
    with pytest.raises(IntegrityError), transaction.atomic():
        Profile.objects.create(user=user, **{field: value})


def test_the_admin_shows_why_a_plan_is_refused(admin_client, make_user):
    user = make_user("u")
    resp = admin_client.post("/admin/uploads/profile/add/", {
        "user": user.pk, "weight": "1e-300", "transcode_cap": "0", "notify_burst": "10"})
    assert resp.status_code == 200  # the form again, with its errors
    errors = resp.context["adminform"].form.errors
    assert "greater than or equal to 0.01" in errors["weight"][0]
    assert "greater than or equal to 1" in errors["transcode_cap"][0]
    assert not Profile.objects.filter(user=user).exists()


def test_valid_plans_are_used_as_they_are(make_user, settings):
    user = make_user("u")
    Profile.objects.create(user=user, weight=2.5, transcode_cap=3, notify_rate_per_s=4.0, notify_burst=5,
                           notify_cap=6)
    cpu = fair_policies(user_ids=[user.pk], lane=Lane.CPU_TRANSCODE)[user.pk]
    io = fair_policies(user_ids=[user.pk], lane=Lane.IO_NOTIFY)[user.pk]
    assert (cpu.weight, cpu.cap, cpu.rate) == (2.5, 3, None)
    assert (io.weight, io.cap, io.rate) == (2.5, 6, (4.0, 5.0))


@pytest.mark.parametrize(("plan", "cpu", "io"), [
    ({"weight": 1e-300}, (1.0, None), (1.0, 16, None)),
    ({"weight": 3.0, "transcode_cap": 0, "notify_cap": 0}, (3.0, None), (3.0, 16, None)),
    ({"notify_rate_per_s": -2.0}, (1.0, None), (1.0, 16, None)),
    ({"notify_rate_per_s": 5.0, "notify_burst": 0}, (1.0, None), (1.0, 16, (5.0, 10.0))),
])
def test_a_stored_bad_plan_falls_back_to_the_defaults_with_a_warning(plan, cpu, io, make_user, settings, caplog):
    settings.NOTIFY_USER_CAP = 16
    user = make_user("u")
    store_unchecked(user, **plan)
    with caplog.at_level(logging.WARNING, logger="uploads.services"):
        got_cpu = fair_policies(user_ids=[user.pk], lane=Lane.CPU_TRANSCODE)[user.pk]
        got_io = fair_policies(user_ids=[user.pk], lane=Lane.IO_NOTIFY)[user.pk]
    assert (got_cpu.weight, got_cpu.cap) == cpu
    assert (got_io.weight, got_io.cap, got_io.rate) == io
    assert f"plan of user {user.pk}" in caplog.text


def test_a_user_without_a_plan_gets_the_default_io_cap(make_user, settings):
    """One user's slow endpoints must not hold every io thread: the lane has a
    per-user cap even for users nobody gave a plan."""
    settings.NOTIFY_USER_CAP = 16
    user = make_user("u")
    assert fair_policies(user_ids=[user.pk], lane=Lane.IO_NOTIFY)[user.pk].cap == 16
    assert fair_policies(user_ids=[user.pk], lane=Lane.CPU_TRANSCODE)[user.pk].cap is None  # a user alone gets it all
