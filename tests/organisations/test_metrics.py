"""/metrics gives each organisation's share of a lane's worker time over
the last FAIR_USAGE_MINUTES, for the FAIRLANE_METRICS_ORGANISATIONS
largest and one "other" for the rest: as many series with 10 organisations
as with 100,000, so the scrape and Prometheus's storage stay bounded."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from organisations import members_move, organisation_create
from tests.project.test_metrics_work import scrape
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db
SHARE = "fairlane_organisation_share"


def _worked(owner, seconds: float) -> None:
    """A job of `owner` that finished a minute ago after `seconds` of work."""
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    now = timezone.now()
    Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="succeeded",
                       started_at=now - timedelta(minutes=1, seconds=seconds), finished_at=now - timedelta(minutes=1),
                       process_ms=int(seconds * 1000), wait_ms=1000)


def test_the_largest_organisations_and_one_other(client, make_user, settings, redis_client):
    settings.METRICS_TOKEN = "t0ken"
    settings.FAIRLANE_METRICS_ORGANISATIONS = 3
    # Six organisations: Northwind's two members together (40 + 20) outweigh anyone alone.
    northwind = organisation_create(name="Northwind")
    alice, bob = make_user("alice"), make_user("bob")
    members_move(user_ids=[alice.pk, bob.pk], organisation=northwind)
    _worked(alice, 40)
    _worked(bob, 20)
    for name, seconds in (("carol", 50), ("dave", 30), ("erin", 5), ("frank", 3), ("gina", 2)):
        _worked(make_user(name), seconds)
    shares = {dict(labels)["organisation"]: value for (name, labels), value in scrape(client).items()
              if name == SHARE and dict(labels)["lane"] == "cpu-transcode"}
    total = 150.0
    assert shares == pytest.approx({"Northwind": 60 / total, "carol": 50 / total, "dave": 30 / total,
                                    "other": 10 / total})


def test_no_work_no_series_but_the_family(client, settings, redis_client):
    settings.METRICS_TOKEN = "t0ken"
    resp = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken").content.decode()
    assert f"# TYPE {SHARE} gauge" in resp and f"\n{SHARE}{{" not in resp
