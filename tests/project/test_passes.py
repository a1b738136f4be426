"""Periodic passes read rows in bounded pages and go on where the last pass
stopped (project/passes.py): a reconciler never reads 100,000 rows at once
beside the renewal of its worker's registration."""
from __future__ import annotations

import uuid

import pytest

from project import passes
from uploads.models import Job, Upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(make_user, redis_client) -> list[str]:
    user = make_user("paged")
    upload = Upload.objects.create(owner=user, batch=uuid.uuid4(), filename="a", file="x", size=1)
    made = Job.objects.bulk_create([Job(upload=upload, owner=user, lane="cpu-transcode") for _ in range(25)])
    return sorted(str(j.id) for j in made)


def test_a_pass_reads_pages_of_a_batch_and_resumes_where_it_stopped(jobs):
    rows = Job.objects.values_list("id", flat=True)
    seen = []
    for page in passes.pages("t1", rows, batch=10, budget_s=0):  # one page, then the budget is spent
        seen.append([str(i) for i in page])
    assert seen == [jobs[:10]]
    second = [[str(i) for i in page] for page in passes.pages("t1", rows, batch=10, budget_s=0)]
    assert second == [jobs[10:20]]
    rest = [[str(i) for i in page] for page in passes.pages("t1", rows, batch=10, budget_s=60)]
    assert rest == [jobs[20:]]  # the end: the next pass starts over
    again = [[str(i) for i in page] for page in passes.pages("t1", rows, batch=10, budget_s=60)]
    assert again == [jobs[:10], jobs[10:20], jobs[20:]]


def test_pages_of_models_and_of_values_rows_resume_by_their_primary_key(jobs):
    models = list(passes.pages("t2", Job.objects.all(), batch=7, budget_s=0))
    rows = list(passes.pages("t2", Job.objects.values_list("id", "status"), batch=7, budget_s=0))
    assert [str(j.id) for j in models[0]] == jobs[:7]
    assert [str(r[0]) for r in rows[0]] == jobs[7:14]


def test_groups_page_by_a_key_of_their_own_and_resume(make_user, redis_client):
    """A pass over groups (the notify reconciler's canceled jobs, by the
    cancel that ended them) pages by each group's first id as text:
    every group once, in pages, resumed where the last pass stopped."""
    from django.db.models import CharField, Min
    from django.db.models.functions import Cast

    user = make_user("grouped")
    upload = Upload.objects.create(owner=user, batch=uuid.uuid4(), filename="a", file="x", size=1)
    Job.objects.bulk_create([Job(upload=upload, owner=user, lane="cpu-transcode", progress=group)
                             for group in range(12) for _ in range(3)])
    groups = (Job.objects.values("progress").annotate(first=Min(Cast("id", output_field=CharField())))
              .values_list("first", "progress"))
    first = list(passes.pages("t3", groups, order="first", batch=5, budget_s=0))
    rest = list(passes.pages("t3", groups, order="first", batch=5, budget_s=60))
    assert [len(page) for page in first + rest] == [5, 5, 2]
    assert sorted(progress for page in first + rest for _, progress in page) == list(range(12))
