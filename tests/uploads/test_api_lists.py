"""Lists: cursor pages (newest first, stable while rows arrive, O(page)),
the job list's conditional GET, uploads, and batches with their counts,
progress and finish estimate."""
from __future__ import annotations

import base64
import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.ports import free_port
from tests.backlogs import files_with_jobs
from tests.rows_read import rows_read
from uploads.models import Batch, Job, Upload

pytestmark = pytest.mark.django_db


def make_batch(owner, statuses, *, cost: float = 10.0, progress: int = 0, at=None) -> Batch:
    """A batch of one upload per status, created `at` (default now)."""
    at = at or timezone.now()
    batch = Batch.objects.create(owner=owner, created_at=at)
    for i, status in enumerate(statuses):
        upload = Upload.objects.create(owner=owner, batch=batch.id, filename=f"f{i}.mp4", file=f"u/{i}", size=1)
        job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status=status, cost_estimate=cost,
                                 progress=progress if status == Job.Status.RUNNING else 0)
        Job.objects.filter(id=job.id).update(created_at=at + timedelta(milliseconds=i))
    return batch


def make_jobs(owner, n: int) -> list[Job]:
    """n jobs, one millisecond apart, newest last."""
    start = timezone.now() - timedelta(seconds=10)
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    jobs = Job.objects.bulk_create(Job(upload=upload, owner=owner, lane="cpu-transcode") for _ in range(n))
    for i, job in enumerate(jobs):
        Job.objects.filter(id=job.id).update(created_at=start + timedelta(milliseconds=i))
    return jobs


@contextmanager
def redis_commands_sent() -> Iterator[Counter]:
    """Counts, by name, the Redis commands this thread packs for sending
    meanwhile, single or pipelined, whichever serializer redis-py uses."""
    import redis.connection

    counts: Counter = Counter()
    me = threading.get_ident()
    serializers = (redis.connection.HiredisRespSerializer, redis.connection.PythonRespSerializer)
    originals = {cls: cls.pack for cls in serializers}

    def counting(original):
        def pack(self, *args):
            if threading.get_ident() == me:
                name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
                counts[name.upper()] += 1
            return original(self, *args)
        return pack

    for cls, original in originals.items():
        cls.pack = counting(original)
    try:
        yield counts
    finally:
        for cls, original in originals.items():
            cls.pack = original


def walk(client, url: str) -> list[str]:
    ids = []
    while url:
        body = client.get(url).json()
        ids += [row["id"] for row in body["results"]]
        url = body["next"]
    return ids


def test_job_pages_follow_a_cursor_newest_first_and_miss_nothing_when_jobs_arrive(make_user, api_client_for):
    alice = make_user("alice")
    jobs = make_jobs(alice, 7)
    client = api_client_for(alice)
    first = client.get("/api/jobs/?page_size=3").json()
    assert [row["id"] for row in first["results"]] == [str(j.id) for j in reversed(jobs[-3:])]
    assert first["previous"] is None and "cursor=" in first["next"]
    make_jobs(alice, 2)  # new jobs arrive at the head while the client walks on
    rest = walk(client, first["next"])
    assert rest == [str(j.id) for j in reversed(jobs[:4])]


def test_a_deep_page_is_a_keyset_query_not_an_offset(make_user, api_client_for):
    """What makes page 2,000 of 100,000 jobs cost what page 1 costs: the page
    query filters on created_at from the cursor and reads page_size + 1 rows."""
    alice = make_user("alice")
    make_jobs(alice, 5)
    client = api_client_for(alice)
    second_page = client.get("/api/jobs/?page_size=2").json()["next"]
    with CaptureQueriesContext(connection) as queries:
        assert len(client.get(second_page).json()["results"]) == 2
    pages = [q["sql"] for q in queries if 'FROM "uploads_job"' in q["sql"] and "LIMIT 3" in q["sql"]]
    assert pages, [q["sql"] for q in queries]
    for sql in pages:
        assert '"uploads_job"."created_at" <' in sql and "OFFSET" not in sql, sql


@pytest.mark.parametrize("cursor", ["garbage", base64.b64encode(b"p=not-a-time").decode(),
                                    base64.b64encode(b"r=x").decode()])
def test_a_cursor_we_did_not_give_out_is_a_400(cursor, make_user, api_client_for):
    resp = api_client_for(make_user("alice")).get(f"/api/jobs/?cursor={cursor}")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_cursor"


def test_the_job_list_answers_304_while_its_page_is_unchanged(make_user, api_client_for):
    alice = make_user("alice")
    older, newest = make_jobs(alice, 2)
    client = api_client_for(alice)
    first = client.get("/api/jobs/?page_size=1")
    etag = first["ETag"]
    assert client.get("/api/jobs/?page_size=1", HTTP_IF_NONE_MATCH=etag).status_code == 304
    # A change on another page leaves this one's tag alone.
    Job.objects.filter(id=older.id).update(progress=10)
    assert client.get("/api/jobs/?page_size=1", HTTP_IF_NONE_MATCH=etag).status_code == 304
    Job.objects.filter(id=newest.id).update(progress=40)
    moved = client.get("/api/jobs/?page_size=1", HTTP_IF_NONE_MATCH=etag)
    assert moved.status_code == 200 and moved.json()["results"][0]["progress"] == 40
    # The next page has a tag of its own.
    assert client.get(first.json()["next"])["ETag"] != moved["ETag"]


def test_jobs_and_uploads_filter_by_batch(make_user, api_client_for):
    alice = make_user("alice")
    mine, other = make_batch(alice, ["queued", "failed"]), make_batch(alice, ["queued"])
    client = api_client_for(alice)
    jobs = client.get(f"/api/jobs/?batch={mine.id}").json()["results"]
    assert {j["batch"] for j in jobs} == {str(mine.id)} and len(jobs) == 2
    uploads = client.get(f"/api/uploads/?batch={other.id}").json()["results"]
    assert [u["batch"] for u in uploads] == [str(other.id)]
    assert uploads[0]["job"]["status"] == "queued" and uploads[0]["job"]["url"].endswith("/")
    bad = client.get("/api/jobs/?batch=nope")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_batch"


def test_uploads_are_the_owners_only(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    make_batch(alice, ["queued"])
    upload = Upload.objects.get()
    assert api_client_for(alice).get(f"/api/uploads/{upload.id}/").json()["filename"] == "f0.mp4"
    assert api_client_for(bob).get(f"/api/uploads/{upload.id}/").status_code == 404
    assert api_client_for(bob).get("/api/uploads/").json()["results"] == []


def test_batches_list_newest_first_with_counts_and_progress(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    now = timezone.now()
    old = make_batch(alice, ["succeeded", "failed"], at=now - timedelta(minutes=5))
    new = make_batch(alice, ["succeeded", "running", "queued", "queued"], progress=50, at=now)
    make_batch(bob, ["queued"])
    body = api_client_for(alice).get("/api/batches/").json()
    assert [b["id"] for b in body["results"]] == [str(new.id), str(old.id)]
    fresh, done = body["results"]
    assert fresh["files"] == 4 and fresh["finished"] is False
    assert fresh["counts"] == {"queued": 2, "running": 1, "succeeded": 1, "failed": 0, "canceled": 0}
    # Equal costs: one whole job and half of another of four.
    assert fresh["progress"] == int(100 * 1.5 / 4)
    assert done["finished"] is True and done["progress"] == 100
    assert done["estimated_finish_at"] is None and done["estimate"] is None
    assert done["jobs_url"].endswith(f"/api/jobs/?batch={old.id}")


def test_an_unfinished_batch_has_an_estimate_labelled_as_one(make_user, api_client_for, redis_client):
    alice = make_user("alice")
    batch = make_batch(alice, ["queued", "queued"], cost=30.0)
    body = api_client_for(alice).get(f"/api/batches/{batch.id}/").json()
    estimate = body["estimate"]
    assert estimate["kind"] == "estimate" and "basis" in estimate
    # Alone on the lane (no worker registered: its default window of 2 slots),
    # 60 worker seconds over 2 slots.
    assert estimate["remaining_worker_s"] == 60.0 and estimate["slots"] == 2 and estimate["share"] == 1.0
    assert estimate["seconds"] == 30.0
    assert body["estimated_finish_at"] > body["created_at"]
    # Nobody's files of this kind measured yet: the static estimates, and a wide range around them.
    assert [(r["key"], r["source"], r["seconds_per_unit"]) for r in estimate["rates"]] == \
        [("pre:video", "not measured yet", None)]
    assert estimate["uncertainty"] == 1.0
    assert estimate["seconds_low"] < estimate["seconds"] < estimate["seconds_high"]
    assert estimate["finish_low_at"] < body["estimated_finish_at"] < estimate["finish_high_at"]


def test_polls_reuse_the_users_backlog_until_the_polled_batches_change(make_user, api_client_for, redis_client,
                                                                        settings, monkeypatch):
    """A user's many open pages poll the same batches: the grouped aggregate
    over their unfinished jobs (most of a poll's database time at 10,000
    jobs) runs once per FAIRLANE_ESTIMATE_REUSE_S, not once per poll; a job
    of the polled batch that moves is seen by the next poll; with the
    setting at 0 every poll asks."""
    from uploads import selectors

    settings.FAIRLANE_ESTIMATE_REUSE_S = 3600
    alice = make_user("alice")
    batch = make_batch(alice, ["queued", "queued", "queued"])
    client = api_client_for(alice)
    aggregates = []
    real = selectors.backlog_until

    def counted(**kwargs):
        aggregates.append(kwargs["user"].pk)
        return real(**kwargs)

    monkeypatch.setattr(selectors, "backlog_until", counted)

    def remaining() -> float:
        return client.get("/api/batches/").json()["results"][0]["estimate"]["remaining_worker_s"]

    assert remaining() == remaining() == remaining() == 30.0
    assert len(aggregates) == 1
    Job.objects.filter(upload__batch=batch.id).order_by("created_at").first().delete()  # one file less
    assert remaining() == 20.0 and len(aggregates) == 2
    settings.FAIRLANE_ESTIMATE_REUSE_S = 0  # never reused
    assert remaining() == remaining() == 20.0 and len(aggregates) == 4


@pytest.fixture
def progress_asked(monkeypatch) -> list[int]:
    """The owner of each batch poll's counts asked of the database, in order."""
    from uploads import selectors

    asked: list[int] = []
    real = selectors.batches_progress

    def counted(**kwargs):
        asked.append(kwargs["owner_id"])
        return real(**kwargs)

    monkeypatch.setattr(selectors, "batches_progress", counted)
    return asked


def test_a_large_batchs_poll_answer_is_reused_a_small_ones_never_and_a_write_answers_afresh(
        make_user, api_client_for, redis_client, settings, progress_asked):
    """An answer covering FAIRLANE_POLL_REUSE_FILES files or more is reused
    for FAIRLANE_ESTIMATE_REUSE_S whatever moved meanwhile: its counts are
    asked once however many pages poll. A smaller answer is asked every
    time. The user's own write answers from the database, and their next
    polls are answered from it, never from an answer before it."""
    settings.FAIRLANE_ESTIMATE_REUSE_S = 3600
    settings.FAIRLANE_POLL_REUSE_FILES = 3
    alice, bob = make_user("alice"), make_user("bob")
    large, small = make_batch(alice, ["queued"] * 3), make_batch(bob, ["queued"] * 2)
    asked = progress_asked
    clients = {alice: api_client_for(alice), bob: api_client_for(bob)}

    def counts(user, batch) -> dict:
        return clients[user].get(f"/api/batches/{batch.id}/").json()["counts"]

    def one_ends(batch) -> None:
        job = Job.objects.filter(upload__batch=batch.id, status="queued").order_by("created_at").first()
        Job.objects.filter(id=job.id).update(status="succeeded", finished_at=timezone.now())

    assert counts(alice, large)["queued"] == 3
    one_ends(large)
    assert counts(alice, large)["queued"] == 3 and asked == [alice.pk]  # reused: the database was not asked
    assert counts(bob, small)["queued"] == 2
    one_ends(small)
    assert counts(bob, small)["queued"] == 1 and asked == [alice.pk, bob.pk, bob.pk]  # asked each time

    answer = clients[alice].patch(f"/api/batches/{large.id}/", {"name": "renamed"}, format="json")
    assert answer.status_code == 200 and answer.json()["counts"]["queued"] == 2  # the write's answer: fresh
    one_ends(large)
    assert counts(alice, large)["queued"] == 2  # the write's answer is reused, the one before it never again
    assert asked.count(alice.pk) == 2
    settings.FAIRLANE_ESTIMATE_REUSE_S = 0  # never reused
    assert counts(alice, large)["queued"] == counts(alice, large)["queued"] == 1 and asked.count(alice.pk) == 4


def test_once_a_kept_answer_is_old_one_poll_asks_again_and_the_others_meanwhile_get_it(
        make_user, api_client_for, redis_client, settings, monkeypatch, progress_asked):
    """Past the interval, the poll that takes the ":asking" mark asks the
    database; a poll while another holds it gets the kept answer."""
    import time

    from uploads import batch_summary

    settings.FAIRLANE_ESTIMATE_REUSE_S = 3600
    settings.FAIRLANE_POLL_REUSE_FILES = 1
    alice = make_user("alice")
    batch = make_batch(alice, ["queued", "queued"])
    client = api_client_for(alice)
    asked = progress_asked

    def queued() -> int:
        return client.get(f"/api/batches/{batch.id}/").json()["counts"]["queued"]

    assert queued() == 2 and len(asked) == 1
    Job.objects.filter(upload__batch=batch.id).update(status="succeeded", finished_at=timezone.now())
    later = time.time() + 3601  # the kept answer is past its interval
    monkeypatch.setattr(batch_summary, "_clock", lambda: later)
    asking = batch_summary._answer_key(alice.pk, [batch.id]) + ":asking"
    redis_client.set(asking, 1, ex=60)  # another request is asking
    assert queued() == 2 and len(asked) == 1  # the kept answer, not the database
    redis_client.delete(asking)
    assert queued() == 0 and len(asked) == 2  # this one asks
    assert not redis_client.exists(asking)  # and its answer ends the mark


def test_a_kept_answer_is_reused_one_interval_more_per_files_it_covers(
        make_user, api_client_for, redis_client, settings, monkeypatch, progress_asked):
    """Its counts cost the database time in proportion to its files, and so
    does the time it serves: three intervals for three times the files."""
    import time

    from uploads import batch_summary

    settings.FAIRLANE_ESTIMATE_REUSE_S = 10
    settings.FAIRLANE_POLL_REUSE_FILES = 1
    settings.FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL = 2
    alice = make_user("alice")
    batch = make_batch(alice, ["queued"] * 6)
    client = api_client_for(alice)
    now = time.time()
    monkeypatch.setattr(batch_summary, "_clock", lambda: now)

    def queued_at(t: float) -> int:
        monkeypatch.setattr(batch_summary, "_clock", lambda: now + t)
        return client.get(f"/api/batches/{batch.id}/").json()["counts"]["queued"]

    assert queued_at(0) == 6 and len(progress_asked) == 1
    Job.objects.filter(upload__batch=batch.id).update(status="succeeded", finished_at=timezone.now())
    assert queued_at(29) == 6 and len(progress_asked) == 1  # 6 files, 2 an interval: 3 x 10 s
    assert queued_at(31) == 0 and len(progress_asked) == 2
    assert batch_summary.reuse_for(files=1) == batch_summary.reuse_for(files=2) == 10  # never under the interval


def test_a_users_own_job_write_is_never_answered_from_a_poll_kept_before_it(
        make_user, api_client_for, redis_client, settings, progress_asked, cpu_lane_paused):
    """A job's cancel, retry or delete through the API forgets the user's
    kept answers as a batch write does: a kept answer may be reused for
    seconds (more for a large batch), and the user's own change must show
    at their next poll."""
    settings.FAIRLANE_ESTIMATE_REUSE_S = 3600
    settings.FAIRLANE_POLL_REUSE_FILES = 1
    alice = make_user("alice")
    batch = make_batch(alice, ["queued"] * 3)
    client = api_client_for(alice)

    def counts() -> dict:
        return client.get(f"/api/batches/{batch.id}/").json()["counts"]

    jobs = list(Job.objects.filter(upload__batch=batch.id).order_by("created_at"))
    assert counts()["queued"] == 3
    assert client.post(f"/api/jobs/{jobs[0].id}/cancel/").status_code == 200
    assert counts()["queued"] == 2 and counts().get("canceled") == 1
    assert client.post(f"/api/jobs/{jobs[0].id}/retry/").status_code == 202
    assert counts()["queued"] == 3
    assert client.delete(f"/api/jobs/{jobs[1].id}/").status_code == 204
    assert counts()["queued"] == 2
    assert client.delete(f"/api/uploads/{jobs[2].upload_id}/").status_code == 204
    assert counts()["queued"] == 1
    assert len(progress_asked) == 5  # once at first, once after each write: the others were kept


def test_a_large_batchs_poll_asks_the_database_when_redis_is_out_of_reach(make_user, api_client_for, settings):
    """Nothing kept, nothing lost: each poll is answered, from the database."""
    settings.FAIRLANE_ESTIMATE_REUSE_S = 3600
    settings.FAIRLANE_POLL_REUSE_FILES = 1
    alice = make_user("alice")
    batch = make_batch(alice, ["queued", "queued"])
    client = api_client_for(alice)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    assert client.get(f"/api/batches/{batch.id}/").json()["counts"]["queued"] == 2
    Job.objects.filter(upload__batch=batch.id).update(status="succeeded", finished_at=timezone.now())
    assert client.get(f"/api/batches/{batch.id}/").json()["counts"]["queued"] == 0


def test_the_estimate_prices_the_users_files_at_their_measured_rate_with_its_range(make_user, api_client_for,
                                                                                    redis_client):
    """Ten photos waiting behind nothing; the user's last 64 photos took
    0.4 or 0.6 s of a slot each: 10 x 0.5 s over 2 slots, give or take the
    rate's own uncertainty (shared by all ten) and the files' spread
    (averaged over ten)."""
    from uploads import estimates, rates

    alice = make_user("alice")
    batch = Batch.objects.create(owner=alice)
    for i in range(10):
        upload = Upload.objects.create(owner=alice, batch=batch.id, filename=f"IMG_{i}.jpg", file=f"u/{i}", size=1)
        Job.objects.create(upload=upload, owner=alice, lane="cpu-transcode", cost_estimate=3.0)
    for i in range(64):
        rates.rates_record(user_id=alice.pk, seconds=0.4 if i % 2 else 0.6, samples=[("pre:image", 1.0)])
    body = api_client_for(alice).get(f"/api/batches/{batch.id}/").json()
    estimate = body["estimate"]
    (image,) = estimate["rates"]
    assert image["key"] == "pre:image" and image["unit"] == "file" and image["jobs"] == 10 and image["units"] == 10
    assert image["source"] == "yours" and image["samples"] == 64
    assert image["seconds_per_unit"] == pytest.approx(0.5, abs=0.01)
    assert estimate["remaining_worker_s"] == pytest.approx(5.0, abs=0.1) == image["worker_s"]
    assert estimate["seconds"] == pytest.approx(2.5, abs=0.05)
    # cv of one file 0.2; the rate from 64 samples weighted 1/32: as sure as ~63 plain ones
    spread = 0.2 / (estimates.EFFECTIVE_SAMPLES ** 0.5)
    relative = (spread ** 2 + 0.2 ** 2 / 10) ** 0.5
    assert estimate["uncertainty"] == pytest.approx(relative, abs=0.01)
    assert estimate["seconds_high"] == pytest.approx(2.5 * (1 + estimates.RANGE_Z * relative), abs=0.1)
    assert estimate["finish_low_at"] < body["estimated_finish_at"] < estimate["finish_high_at"]


def test_the_batch_poll_reads_the_same_whatever_other_users_have_queued(make_user, api_client_for, redis_client,
                                                                         cpu_lane_paused, settings):
    """The estimate's inputs are the user's own rows, the lane's summary
    and two rate hashes: as many queries and Redis commands with a hundred
    other users waiting as with one. The commands are those this thread
    sends (the server's INFO commandstats would also count whatever else
    talks to the run's Redis meanwhile). Every poll asks for the user's
    backlog (no reuse: whether the last answer is still reused would
    depend on how long the hundred users took to queue)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import dispatcher
    from dispatcher import monitor

    settings.FAIRLANE_ESTIMATE_REUSE_S = 0
    alice = make_user("alice")
    batch = make_batch(alice, ["queued", "queued"])
    client = api_client_for(alice)

    def cost() -> tuple[int, Counter]:
        with CaptureQueriesContext(connection) as queries, redis_commands_sent() as commands:
            assert client.get(f"/api/batches/{batch.id}/").json()["estimate"]
        return len(queries), commands

    def others_queue(names: range) -> None:
        for i in names:
            other = make_user(f"user{i}")
            make_batch(other, ["queued"])
            dispatcher.enqueue("transcoding.job_run", [str(uuid.uuid4())], task_id=str(uuid.uuid4()),
                               fair_key=str(other.pk), cost=10.0)
        monitor.flush()  # their task-sent events leave now, not from a thread during a poll

    others_queue(range(1))
    cost()  # the first poll loads the scripts
    one_other = cost()
    assert one_other[1]["FCALL"] >= 1  # the lane's summary, counted
    others_queue(range(1, 100))
    assert cost() == one_other


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's plans")
def test_a_batch_poll_counts_its_files_without_reading_other_users_jobs(make_user, api_client_for):
    """A batch's counts and progress are grouped over its files' jobs. Asked
    of the batch alone, PostgreSQL joined the batch's uploads to a scan of
    the whole job table, every user's (16 ms a poll beside 40,000 other
    jobs, 6 ms asked of the owner's): a poll's cost grew with everyone
    else's work. Asked of the owner's jobs, it reads the owner's."""
    bob = make_user("bob")  # a big backlog, written first
    files_with_jobs(bob, 10_000)
    alice = make_user("alice")
    batch = Batch.objects.create(owner=alice)
    files_with_jobs(alice, 2000, batch=batch.id)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE uploads_job; ANALYZE uploads_upload")
    with CaptureQueriesContext(connection) as queries:
        answer = api_client_for(alice).get(f"/api/batches/{batch.id}/").json()
    assert (answer["files"], answer["counts"]["queued"]) == (2000, 2000)
    (counts,) = [q["sql"] for q in queries if "GROUP BY" in q["sql"] and '"uploads_upload"."batch"' in q["sql"]]
    # At most each of alice's jobs and its upload: fewer than bob's alone.
    assert rows_read(counts) <= 2 * 2000 + 10, counts


def test_another_users_batch_is_not_found(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    batch = make_batch(alice, ["queued"])
    client = api_client_for(bob)
    for resp in (client.get(f"/api/batches/{batch.id}/"), client.post(f"/api/batches/{batch.id}/cancel/"),
                 client.post(f"/api/batches/{batch.id}/retry/"), client.delete(f"/api/batches/{batch.id}/")):
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    assert Job.objects.get().status == "queued"


def test_jobs_are_searched_by_part_of_the_file_name_in_any_case(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    batch = uuid.uuid4()
    for owner, name in [(alice, "Beach-2026.mp4"), (alice, "party.mov"), (alice, "beach.png"), (bob, "beach.mp4")]:
        upload = Upload.objects.create(owner=owner, batch=batch, filename=name, file="x", size=1)
        Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode")
    client = api_client_for(alice)
    found = client.get("/api/jobs/?search=BEACH").json()["results"]
    assert sorted(j["upload"]["filename"] for j in found) == ["Beach-2026.mp4", "beach.png"]
    assert client.get("/api/jobs/?search=beach&status=failed").json()["results"] == []
    too_long = client.get("/api/jobs/?search=" + "x" * 101)
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "invalid_search"


def test_the_job_list_counts_what_matches_and_a_new_file_changes_the_tag_of_an_older_page(make_user, api_client_for):
    alice = make_user("alice")
    make_jobs(alice, 3)
    make_batch(alice, ["failed"])
    client = api_client_for(alice)
    first = client.get("/api/jobs/?page_size=2")
    assert first.json()["count"] == 4 and len(first.json()["results"]) == 2
    second = client.get(first.json()["next"])
    assert second.json()["count"] == 4
    assert client.get("/api/jobs/?status=failed").json()["count"] == 1
    # The older page's rows are the same, its count is not: not a 304.
    make_jobs(alice, 1)
    again = client.get(first.json()["next"], HTTP_IF_NONE_MATCH=second["ETag"])
    assert again.status_code == 200 and again.json()["count"] == 5


def test_jobs_filter_by_kind(make_user, api_client_for):
    alice = make_user("alice")
    batch = make_batch(alice, ["succeeded"])
    export = Job.objects.create(owner=alice, batch=batch.id, kind=Job.Kind.EXPORT, lane="cpu-transcode")
    client = api_client_for(alice)
    listed = client.get(f"/api/jobs/?batch={batch.id}&kind=export").json()
    assert [j["id"] for j in listed["results"]] == [str(export.id)] and listed["count"] == 1
    bad = client.get("/api/jobs/?kind=hologram")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_kind"


def test_what_is_moving_is_the_running_and_the_just_ended_of_the_user_or_batch(make_user, api_client_for):
    alice, bob = make_user("alice"), make_user("bob")
    flood = make_batch(alice, ["queued"] * 6 + ["running"] * 2 + ["succeeded"] * 3)
    other = make_batch(alice, ["running"])
    make_batch(bob, ["running"])
    now = timezone.now()
    for i, job in enumerate(Job.objects.filter(upload__batch=flood.id, status="running").order_by("created_at")):
        Job.objects.filter(id=job.id).update(started_at=now - timedelta(seconds=10 - i))
    ended = list(Job.objects.filter(upload__batch=flood.id, status="succeeded").order_by("created_at"))
    for i, job in enumerate(ended):
        Job.objects.filter(id=job.id).update(finished_at=now - timedelta(seconds=5 - i))
    Job.objects.filter(id=ended[0].id).update(finished_at=now - timedelta(hours=1))  # long ago: not moving
    client = api_client_for(alice)
    moving = client.get(f"/api/jobs/moving/?batch={flood.id}").json()
    assert moving["counts"] == {"running": 2, "queued": 6}
    assert [j["upload"]["filename"] for j in moving["running"]] == ["f6.mp4", "f7.mp4"]  # first started first
    assert [j["upload"]["filename"] for j in moving["finished"]] == ["f10.mp4", "f9.mp4"]  # last ended first
    everything = client.get("/api/jobs/moving/").json()
    assert everything["counts"] == {"running": 3, "queued": 6}
    assert {j["batch"] for j in everything["running"]} == {str(flood.id), str(other.id)}
    assert client.get("/api/jobs/moving/?batch=nope").status_code == 400
    assert api_client_for(bob).get(f"/api/jobs/moving/?batch={flood.id}").json()["counts"] == {"running": 0,
                                                                                             "queued": 0}


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's planner")
def test_the_backlog_aggregate_over_a_users_10000_jobs_is_planned_cheap_enough_to_run_without_jit(make_user):
    """The batch poll's aggregate over a user's unfinished jobs, for a
    page of 20 batches, at the plan's 10,000 jobs with the table's
    statistics known: its estimated cost stays under PostgreSQL's
    jit_above_cost. A version that priced rows stored without a rate key by
    a correlated subquery was estimated as if it ran for every row (654,006)
    and PostgreSQL spent 16 s compiling it with LLVM on a busy host, in
    bench-isolation; as a plain aggregate it is ~1,000."""
    from uploads import selectors, services

    alice = make_user("alice")
    uploads = services.uploads_record(owner=alice, files=[
        services.StoredFile(key=f"u/{i}", filename=f"tiny-{i}.png", size=100) for i in range(10_000)])
    until = {uploads[0].batch: timezone.now()}
    until.update({uuid.uuid4(): timezone.now() - timedelta(minutes=i) for i in range(19)})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE uploads_job")
        cursor.execute("SELECT current_setting('jit_above_cost')::float")
        (jit_above_cost,) = cursor.fetchone()
    with CaptureQueriesContext(connection) as queries:
        backlog = selectors.backlog_until(user=alice, until=until)
    assert backlog[uploads[0].batch]["pre:image"].jobs == 10_000
    [aggregate] = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + aggregate["sql"])
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    assert plan[0]["Plan"]["Total Cost"] < jit_above_cost / 10
