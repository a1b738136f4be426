"""The API says whose share of the workers a job runs in: its owner's
organisation, on every job (the list, one job, what is moving), read once
per answer, not once per job."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from organisations import members_move, organisation_create
from tests.uploads.test_api_lists import make_jobs

pytestmark = pytest.mark.django_db


def test_a_job_says_its_organisation(make_user, api_client_for):
    alice = make_user("alice")
    [job] = make_jobs(alice, 1)
    client = api_client_for(alice)
    own = alice.membership.organisation
    assert client.get(f"/api/jobs/{job.id}/").json()["organisation"] == {"id": own.pk, "name": "alice"}
    studio = organisation_create(name="Northwind Studio")
    members_move(user_ids=[alice.pk], organisation=studio)
    assert client.get(f"/api/jobs/{job.id}/").json()["organisation"] == {"id": studio.pk, "name": "Northwind Studio"}
    assert {row["organisation"]["name"] for row in client.get("/api/jobs/").json()["results"]} == {"Northwind Studio"}


def test_a_user_without_a_membership_reads_as_an_organisation_of_none(make_user, api_client_for):
    """Made around the signal (bulk_create): null until they get one."""
    alice = make_user("alice")
    alice.membership.delete()
    [job] = make_jobs(alice, 1)
    assert api_client_for(alice).get(f"/api/jobs/{job.id}/").json()["organisation"] is None


def test_the_job_list_reads_organisations_once_per_page(make_user, api_client_for):
    alice = make_user("alice")
    client = api_client_for(alice)
    make_jobs(alice, 1)
    with CaptureQueriesContext(connection) as one:
        assert client.get("/api/jobs/").status_code == 200
    make_jobs(alice, 20)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/api/jobs/").json()["results"]) == 21
    assert len(many) == len(one)


def test_the_schema_documents_it(client):
    job = client.get("/api/schema/?format=json").json()["components"]["schemas"]["Job"]
    assert "organisation" in job["required"]
    assert job["properties"]["organisation"]["nullable"] is True
