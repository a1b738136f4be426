"""The fairness page groups users under their organisations: per lane, a
table of organisations (their members' share of worker time together, how
many worked, the slowest member's waits), each user's organisation in the
users table, and charts per organisation beside the charts per user."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from organisations import members_move, organisation_create
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db


def _worked(owner, *, process_ms: int, wait_ms: int, at) -> None:
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="succeeded", wait_ms=wait_ms,
                       process_ms=process_ms, started_at=at, finished_at=at)


@pytest.fixture
def northwind(make_user):
    """Northwind's alice and bob worked 3 s and 1 s; carol, alone, 4 s."""
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    members_move(user_ids=[alice.pk, bob.pk], organisation=organisation_create(name="Northwind"))
    # In the middle of the last whole minute: one minute of the charts.
    at = timezone.now().replace(second=0, microsecond=0) - timedelta(seconds=30)
    _worked(alice, process_ms=3000, wait_ms=200, at=at)
    _worked(bob, process_ms=1000, wait_ms=900, at=at)
    _worked(carol, process_ms=4000, wait_ms=50, at=at)
    return alice, bob, carol


def _cpu(lanes: list[dict]) -> dict:
    return next(lane for lane in lanes if lane["lane"] == "cpu-transcode")


def test_the_page_shows_each_organisations_share_and_its_slowest_members_wait(northwind, admin_client, redis_client):
    cpu = _cpu(admin_client.get("/admin/fairness/").context["lanes"])
    orgs = {o["name"]: o for o in cpu["organisations"]}
    assert set(orgs) == {"Northwind", "carol"}
    assert (orgs["Northwind"]["share_pct"], orgs["Northwind"]["members"], orgs["Northwind"]["wait_p99_ms"]) == (
        50.0, 2, 900)
    assert (orgs["carol"]["share_pct"], orgs["carol"]["members"]) == (50.0, 1)
    rows = {row["user"]: row for row in cpu["keys"]}
    assert (rows["alice"]["organisation"], rows["bob"]["organisation"], rows["carol"]["organisation"]) == (
        "Northwind", "Northwind", "carol")


def test_the_charts_have_a_series_per_organisation(northwind, admin_client, redis_client):
    history = admin_client.get("/admin/fairness/data/").json()["history"]["cpu-transcode"]
    assert set(history["organisations"]) == {"Northwind", "carol"}
    minute = next(i for i, v in enumerate(history["organisations"]["Northwind"]["share_pct"]) if v is not None)
    assert history["organisations"]["Northwind"]["share_pct"][minute] == pytest.approx(50.0)
    assert history["organisations"]["Northwind"]["wait_p99_ms"][minute] == 900
    assert set(history["users"]) == {"alice", "bob", "carol"}
