"""No request's cost grows with other users (issue 32), read off the plans
of the queries a user's own reads run: beside another user's 10,000 jobs,
no query of the batch poll, the lists, the moving files, the webhooks and
their delivery log, or the pages reads
more rows than the user has, planned as PostgreSQL plans them once the
tables are large (no whole-table scan where an index serves). A query
asked of a status or a lane alone, not of its owner, has no such plan and
reads every user's rows; this is where it would show. (What PostgreSQL
chooses on a table of this size is asserted where it mattered: the batch
poll's counts, tests/uploads/test_api_lists.py.)"""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from notify.models import Delivery, Endpoint, Event
from tests.backlogs import files_with_jobs
from tests.rows_read import rows_read
from uploads.models import Batch

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's plans")]

OTHERS_JOBS, MINE = 10_000, 200
STATUSES = ["queued", "running", "succeeded", "failed", "canceled"]


def test_a_users_reads_read_no_more_rows_than_the_user_has_beside_another_users_10000_jobs(
        make_user, api_client_for):
    bob = make_user("bob")  # written first: first in every walk of a table
    for _ in range(20):
        files_with_jobs(bob, OTHERS_JOBS // 20, batch=Batch.objects.create(owner=bob).id, statuses=STATUSES,
                        ext=".mp4")
    alice = make_user("alice")
    batch = Batch.objects.create(owner=alice)
    uploads, jobs = files_with_jobs(alice, MINE, batch=batch.id, statuses=STATUSES, ext=".mp4")
    hooks = {user: Endpoint.objects.create(owner=user, url=f"https://{user.username}.example/hook", secret="s")
             for user in (bob, alice)}
    for user, n in ((bob, OTHERS_JOBS), (alice, MINE)):  # an event and its webhook delivery per job
        events = Event.objects.bulk_create(Event(owner=user, type="job.succeeded", key=f"{user.pk}-{i}")
                                           for i in range(n))
        Delivery.objects.bulk_create(Delivery(event=e, channel="webhook", endpoint=hooks[user]) for e in events)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    api, page = api_client_for(alice), Client()
    page.force_login(alice)
    reads = {
        "api": ["/api/batches/", f"/api/batches/{batch.id}/", "/api/jobs/", f"/api/jobs/?batch={batch.id}",
                "/api/jobs/?status=queued", "/api/jobs/moving/", f"/api/jobs/moving/?batch={batch.id}",
                "/api/uploads/", f"/api/uploads/?batch={batch.id}", f"/api/jobs/{jobs[0].id}/",
                f"/api/uploads/{uploads[0].id}/", "/api/webhooks/", f"/api/webhooks/{hooks[alice].id}/",
                f"/api/webhooks/{hooks[alice].id}/deliveries/", "/api/notifications/preferences/"],
        "page": ["/", f"/batches/{batch.id}/", f"/jobs/{jobs[0].id}/", f"/jobs/{jobs[2].id}/", "/notifications/",
                 f"/notifications/webhooks/{hooks[alice].id}/"],
    }
    worst: list[tuple[int, str, str]] = []
    for kind, paths in reads.items():
        for path in paths:
            with CaptureQueriesContext(connection) as queries:
                resp = (api if kind == "api" else page).get(path)
            assert resp.status_code == 200, (path, resp.status_code)
            for query in queries.captured_queries:
                sql = query["sql"]
                if sql.lstrip().upper().startswith("SELECT"):
                    worst.append((rows_read(sql, seqscan=False), path, sql))
    assert len(worst) > 30  # every read above was planned and measured
    # Each of alice's jobs and its upload (or event and delivery), and a few rows of hers besides.
    bound = 2 * MINE + 50
    over = [(n, path, sql[:300]) for n, path, sql in worst if n > bound]
    assert not over, over
