"""The promise every job accepted with a 202 is owed, checked against real
processes: it ends in exactly one terminal state, succeeded (or failed with
the expected code), its outputs published once from the one attempt that
won, nothing of a replaced attempt left in storage, and one notification per
event. Shared by the fault-injection suite (tests/chaos) and the multi-host
suite (tests/multihost), with the helpers that submit batches and wait.
"""
from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.db import OperationalError, connection

import media as media_store
from uploads.models import Job, JobAttempt, Output

TERMINAL = ("succeeded", "failed", "canceled")



def post(client, paths: list[Path]) -> list[str]:
    handles = [open(p, "rb") for p in paths]
    try:
        resp = client.post("/api/uploads/", {"file": handles}, format="multipart")
    finally:
        for h in handles:
            h.close()
    assert resp.status_code == 202, resp.content
    return [u["job"]["id"] for u in resp.json()["uploads"]]



def submit_batch(make_user, api_client_for, media, *, videos: int = 4, images: int = 2, extra: tuple = ()):
    """The heavy user's videos (plus `extra` files) and the light user's images."""
    heavy, light = make_user(f"heavy-{uuid.uuid4().hex[:6]}"), make_user(f"light-{uuid.uuid4().hex[:6]}")
    heavy_jobs = post(api_client_for(heavy), [media["video"]] * videos + list(extra))
    light_jobs = post(api_client_for(light), [media["image"]] * images)
    return heavy_jobs, light_jobs



def db_retrying(fn, timeout: float = 30.0):
    """Run an ORM read, reconnecting while the database restarts."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except OperationalError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def wait_for(predicate, timeout: float, what, every: float = 0.1, *,
             ignoring: tuple[type[BaseException], ...] = ()):
    """Poll `predicate` every `every` seconds until it returns something true
    (and return that); the suite's one polling loop, so that no test keeps a
    deadline of its own. `what` names what is awaited in the failure, or is
    a function that describes the state at that moment. Exceptions of the
    `ignoring` types mean "not yet" (a server that does not listen yet); any
    other, an AssertionError of the predicate's own say (a process that
    died), ends the wait at once. The predicate is tried once more when the
    time is up, so a slow last sleep does not fail a wait that succeeded."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = db_retrying(predicate)
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(every)


def wait_for_lock_wait(query_like: str, what: str, timeout: float = 60.0) -> None:
    """Until another PostgreSQL session whose statement matches `query_like`
    (ILIKE) waits for a lock: the moment a concurrency test lets the holder go."""
    from django.db import connection

    def waiting() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND query ILIKE %s AND pid <> pg_backend_pid()", [query_like])
            return cursor.fetchone()[0] > 0

    wait_for(waiting, timeout, what, every=0.02)


def running_job(job_ids: list[str], *, min_progress: int = 1) -> Job | None:
    return Job.objects.filter(id__in=job_ids, status="running", progress__gte=min_progress).first()



def attempt_pid(job: Job) -> int:
    worker = JobAttempt.objects.get(job=job, number=job.attempts).worker
    return int(worker.rsplit(":", 1)[1])


def wait_all_terminal(job_ids: list[str], timeout: float = 120.0) -> float:
    wait_for(lambda: Job.objects.filter(id__in=job_ids, status__in=TERMINAL).count() == len(job_ids),
             timeout, f"{len(job_ids)} jobs to finish")
    return time.monotonic()


def promise_kept(job_ids: list[str], *, expect_failed: dict[str, str] | None = None) -> dict:
    """Every job terminal; succeeded (or failed with the expected code); its
    outputs published once, from the one attempt that succeeded; nothing of
    a replaced attempt left behind; one notification per job at most."""
    expect_failed = expect_failed or {}
    jobs = {str(j.id): j for j in Job.objects.filter(id__in=job_ids)}
    lost = [i for i in job_ids if jobs[i].status not in TERMINAL]
    duplicates = 0
    for job_id, job in jobs.items():
        if job_id in expect_failed:
            assert (job.status, job.error_code) == ("failed", expect_failed[job_id]), (job.status, job.error)
            continue
        assert job.status == "succeeded", (job_id, job.status, job.error, list(job.attempt_log.values()))
        outputs = list(Output.objects.filter(job=job))
        assert outputs
        folders = {Path(o.file.name).parts[:3] for o in outputs}  # outputs/<job>/<attempt>/...
        published = stored_attempts(job_id)
        # one publishing attempt (its own prefix), and that is the job's last attempt
        duplicates += len(published) - 1 + len(folders) - 1
        assert published == [str(job.attempts)]
        assert [o.name for o in outputs] == sorted({o.name for o in outputs})
    duplicates += duplicate_notifications(job_ids)
    assert not lost and duplicates == 0
    return {"jobs": len(job_ids), "completed": sum(j.status in TERMINAL for j in jobs.values()),
            "failed": sum(j.status == "failed" for j in jobs.values()), "duplicates": duplicates, "lost": len(lost)}


def duplicate_notifications(job_ids: list[str]) -> int:
    """Every batch's summary email arrives (by default email gets only the
    summaries), and no event is mailed twice: waits for one summary per
    batch, gives a late duplicate a moment, then counts the messages beyond
    the first of each event (X-Fairlane-Event-Id, the receiver's idempotency
    key)."""
    from notify.models import Event

    batches = set(Job.objects.filter(id__in=job_ids, upload__isnull=False).values_list("upload__batch", flat=True))

    def mailed() -> list[str]:
        return [event_id for mail in Path(settings.EMAIL_FILE_PATH).glob("*")
                for event_id in re.findall(r"^X-Fairlane-Event-Id: (\S+)$", mail.read_text(errors="replace"), re.M)]

    def every_summary_mailed() -> bool:
        summaries = {e.webhook_id for e in Event.objects.filter(type="batch.completed", batch__in=batches)}
        return len(summaries) == len(batches) and summaries <= set(mailed())

    wait_for(every_summary_mailed, 30, f"one summary email for each of {len(batches)} batches")
    time.sleep(1.0)  # a duplicate would arrive now
    ids = mailed()
    return len(ids) - len(set(ids))



def stored_attempts(job_id: str) -> list[str]:
    """The attempts that have objects under the job's outputs prefix, through
    the storage seam (either backend)."""
    keys = media_store.list_prefix(media_store.job_prefix(job_id=job_id))
    return sorted({key.split("/")[2] for key in keys}, key=int)




def lease_held(job_id: str, t_fault: float, lease_s: float) -> float:
    """The lease the attempt held when its worker was cut off (nobody renews
    it any more), checked against its length. Detection is bounded from
    there: what comes before it is how long ago the last renewal was, which
    the test does not control."""
    expiry = Job.objects.get(id=job_id).lease_expires_at.timestamp()
    assert expiry - t_fault <= lease_s + 0.5
    return expiry


def assert_swept_within_one_turn(job_id: str, lease_expiry: float, sweep_s: float) -> None:
    """The job was handed back by the first sweep after its lease ran out:
    the sweep's turn (sweep_s, on a tick of FAIR_TICK_S) plus its own run
    time on a loaded machine."""
    lost_at = JobAttempt.objects.get(job_id=job_id, number=1).finished_at.timestamp()
    assert lease_expiry <= lost_at + 0.01 < lease_expiry + sweep_s + float(settings.FAIR_TICK_S) + 3
