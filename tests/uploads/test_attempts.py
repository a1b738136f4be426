"""One attempt at a job against the real database and the real fair
scheduler in Redis: fencing, retries with backoff, lost workers, expired
leases and stopping workers. The fault-injection suite (tests/chaos) does the
same with real worker processes being killed."""
from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.db import OperationalError
from django.utils import timezone

import dispatcher
from project.lanes import Lane
from uploads import attempts, services
from uploads.errors import JobError, TransientError
from uploads.models import Job, JobAttempt, Upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def sched(redis_client, cpu_lane_paused):
    """The cpu lane's scheduler on an empty Redis database, with no worker
    consuming the lane (these tests play the worker)."""
    return dispatcher.scheduler(Lane.CPU_TRANSCODE)


@pytest.fixture
def job(make_user, sched, django_capture_on_commit_callbacks) -> Job:
    """A queued job the scheduler has released (in flight), as a worker gets it."""
    owner = make_user("owner")
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", queued_at=timezone.now())
    sched.submit(str(job.id), str(owner.id), payload='{"task": "x", "args": []}')
    sched.release()  # a live worker's ticker may have released it first: either way it is in flight
    assert sched.known(str(job.id)) == "released"
    return job


def run(job: Job, work, **kwargs) -> str | None:
    return attempts.job_attempt_run(job_id=str(job.id), hostname="cpu@test-host", soft_limit_s=kwargs.get("soft"),
                                    work=work)


def raising(exc: BaseException):
    def work(attempt):
        raise exc
    return work


def test_a_replaced_attempt_can_neither_report_progress_nor_publish(job):
    first = services.job_start(job_id=str(job.id))
    # its lease ran out and another worker took the job over
    Job.objects.filter(id=job.id).update(status="queued")
    second = services.job_start(job_id=str(job.id))
    assert (first.attempts, second.attempts) == (1, 2)

    stale = attempts.Attempt(job=first, number=1)
    with pytest.raises(attempts.AttemptLost):
        stale.progress(50)
    assert services.job_succeed(job_id=str(job.id), outputs=[], attempt=1) is False
    assert services.job_fail(job_id=str(job.id), code="x", message="x", attempt=1) is False
    assert services.job_succeed(job_id=str(job.id), outputs=[], attempt=2) is True


def test_a_transient_error_queues_the_job_again_at_the_front_after_a_backoff(job, sched, settings,
                                                                             django_capture_on_commit_callbacks):
    settings.FAIRLANE_RETRY_BASE_DELAY_S = 60
    with django_capture_on_commit_callbacks(execute=True):
        assert run(job, raising(OperationalError("server closed the connection"))) == dispatcher.HANDED_BACK
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 1 and job.lease_expires_at is None
    [attempt] = JobAttempt.objects.filter(job=job)
    assert (attempt.outcome, attempt.error_code) == ("retry", "transient_error")
    # held back for the backoff (base 60 s: between 30 and 60 s), not released meanwhile
    assert sched.known(str(job.id)) == "delayed"
    wakeup = sched.next_wakeup_in()
    assert 25 < wakeup <= 61
    assert sched.release() == []


def test_an_attempt_that_met_a_storage_outage_waits_at_least_the_outage_floor(job, sched, settings,
                                                                           django_capture_on_commit_callbacks):
    """The store's client retries inside each call only while botocore's
    retry quota lasts (about 35 retries per process): once an outage has used
    it up, every call fails at once, and attempts a short backoff apart would
    spend the job's budget within the outage. The job's own retry waits it out."""
    import media

    settings.FAIRLANE_RETRY_BASE_DELAY_S = 0.5
    settings.FAIRLANE_STORAGE_RETRY_MIN_S = 30
    with django_capture_on_commit_callbacks(execute=True):
        outcome = run(job, raising(media.StorageUnavailable("object storage unavailable (EndpointConnectionError)")))
    assert outcome == dispatcher.HANDED_BACK
    assert sched.known(str(job.id)) == "delayed"
    assert 29 < sched.next_wakeup_in() <= 31  # not 0.25 to 0.5 s


def test_transient_errors_fail_the_job_with_the_last_error_after_the_maximum(job, settings,
                                                                           django_capture_on_commit_callbacks):
    settings.FAIRLANE_MAX_ATTEMPTS = 3
    outcomes = []
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            outcomes.append(run(job, raising(TransientError("storage unavailable"))))
    job.refresh_from_db()
    assert outcomes == [dispatcher.HANDED_BACK, dispatcher.HANDED_BACK, None]
    assert job.status == "failed" and job.error_code == "transient_error" and job.attempts == 3
    assert "Gave up after 3 attempts" in job.error_message
    assert list(JobAttempt.objects.filter(job=job).values_list("outcome", flat=True)) == ["retry", "retry", "failed"]


def test_a_retry_by_a_person_starts_a_fresh_attempt_budget(job, make_user, settings,
                                                          django_capture_on_commit_callbacks):
    """Two lost workers, then failed for good; retried from the admin, its
    first transient error is retried, not the end of the budget: the
    retry's attempts count from the retry on. The history stays."""
    settings.FAIRLANE_MAX_ATTEMPTS = 3
    settings.FAIRLANE_RETRY_BASE_DELAY_S = 0
    for _ in range(2):
        services.job_start(job_id=str(job.id))
        with django_capture_on_commit_callbacks(execute=True):
            attempts._abandon(Job.objects.get(id=job.id), "expired")
    with django_capture_on_commit_callbacks(execute=True):
        run(job, raising(TransientError("storage unavailable")))
    job.refresh_from_db()
    assert (job.status, job.error_code, job.attempts) == ("failed", "transient_error", 3)

    with django_capture_on_commit_callbacks(execute=True):
        assert services.jobs_retry(job_ids=[str(job.id)], actor=make_user("operator"))
    with django_capture_on_commit_callbacks(execute=True):
        assert run(job, raising(TransientError("storage unavailable"))) == dispatcher.HANDED_BACK
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("queued", 4)
    assert list(JobAttempt.objects.filter(job=job).values_list("outcome", flat=True)) == [
        "lost", "lost", "failed", "retry"]


def test_a_permanent_error_fails_at_once_without_a_retry(job):
    assert run(job, raising(JobError("not_media", "This is not a media file."))) is None
    job.refresh_from_db()
    assert (job.status, job.error_code, job.attempts) == ("failed", "not_media", 1)


def test_a_delivery_that_fails_the_job_raises_its_code_and_message_and_others_return(job):
    # What Celery stores (and Flower shows) for the task: FAILURE with the job's error.
    def deliver(work, task_id: str) -> str | None:
        return attempts.job_attempt_run(job_id=str(job.id), hostname="cpu@test-host", soft_limit_s=None, work=work,
                                        task_id=task_id)

    with pytest.raises(attempts.JobFailed, match=r"^not_media: This is not a media file\.$"):
        deliver(raising(JobError("not_media", "This is not a media file.")), "message-1")
    # A second delivery of the same message reports the same; another message's finds the job over.
    with pytest.raises(attempts.JobFailed, match=r"^not_media: "):
        deliver(raising(AssertionError("must not run")), "message-1")
    assert deliver(raising(AssertionError("must not run")), "message-2") is None


def test_a_soft_time_limit_fails_unless_the_probe_showed_a_bigger_job(job, settings,
                                                                       django_capture_on_commit_callbacks):
    def bigger_than_thought(attempt):
        Job.objects.filter(id=attempt.job.id).update(cost_estimate=1000)
        raise SoftTimeLimitExceeded()

    with django_capture_on_commit_callbacks(execute=True):
        assert run(job, bigger_than_thought, soft=130) == dispatcher.HANDED_BACK
    job.refresh_from_db()
    assert job.status == "queued"
    assert services.job_time_limits(job)["soft_time_limit"] > 130  # the next attempt gets the bigger limit

    assert run(job, raising(SoftTimeLimitExceeded()), soft=services.job_time_limits(job)["soft_time_limit"]) is None
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", "timeout")


def test_a_worker_child_lost_mid_job_requeues_it_and_the_third_loss_fails_it(job, sched, settings,
                                                                            django_capture_on_commit_callbacks):
    settings.FAIRLANE_MAX_ATTEMPTS = 3
    settings.FAIRLANE_RETRY_BASE_DELAY_S = 0
    for expected in ("queued", "queued", "failed"):
        services.job_start(job_id=str(job.id))
        # the claim recorded this process as the worker; a dead child is a pid that is gone
        JobAttempt.objects.filter(job=job, finished_at__isnull=True).update(
            worker=services.worker_id().rsplit(":", 1)[0] + ":999999999")
        with django_capture_on_commit_callbacks(execute=True):
            attempts.job_worker_lost(job_id=str(job.id), reason="lost")
        job.refresh_from_db()
        assert job.status == expected
    assert job.error_code == "resource_limit"
    assert sched.known(str(job.id)) is None  # the slot is free again


def test_a_lost_worker_that_never_claimed_its_job_hands_it_back_untouched(job, sched,
                                                                          django_capture_on_commit_callbacks):
    attempts.job_worker_lost(job_id=str(job.id), reason="lost")
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("queued", 0)
    assert sched.known(str(job.id)) == "released"  # handed back and released again at once


def test_a_lost_report_about_a_job_another_live_process_runs_changes_nothing(job):
    services.job_start(job_id=str(job.id))  # claimed by this (live) process
    attempts.job_worker_lost(job_id=str(job.id), reason="lost")
    job.refresh_from_db()
    assert job.status == "running"


def test_expired_leases_are_recovered_and_live_ones_left_alone(job, make_user, django_capture_on_commit_callbacks):
    services.job_start(job_id=str(job.id))
    other = Job.objects.create(upload=job.upload, owner=job.owner, lane="cpu-transcode", queued_at=timezone.now())
    services.job_start(job_id=str(other.id))
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=True):
        assert attempts.jobs_recover_expired() == 1
    job.refresh_from_db()
    other.refresh_from_db()
    assert (job.status, other.status) == ("queued", "running")
    assert JobAttempt.objects.get(job=job).outcome == "lost"


def test_a_stopping_worker_hands_back_a_job_it_has_not_started(job, sched, django_capture_on_commit_callbacks):
    dispatcher.set_draining("cpu@test-host", True)
    try:
        assert run(job, raising(AssertionError("must not run"))) == dispatcher.HANDED_BACK
    finally:
        dispatcher.set_draining("cpu@test-host", False)
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("queued", 0)
    # back at the front of its user's backlog with its charge refunded; then released again
    assert sched.known(str(job.id)) in ("held", "released")


def test_an_interrupted_job_is_handed_back_without_counting_as_a_failed_attempt(job,
                                                                               django_capture_on_commit_callbacks):
    services.job_start(job_id=str(job.id))
    with django_capture_on_commit_callbacks(execute=True):
        assert attempts.job_interrupt(job_id=str(job.id)) is True
    job.refresh_from_db()
    assert job.status == "queued"
    assert JobAttempt.objects.get(job=job).outcome == "interrupted"
    assert JobAttempt.objects.filter(job=job, outcome__in=attempts.FAILED_OUTCOMES).count() == 0


def _expire_attempt(job: Job, *, worker: str) -> None:
    """The running attempt's lease ran out; its worker was `worker` (host:pid)."""
    JobAttempt.objects.filter(job=job, finished_at__isnull=True).update(worker=worker)
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_a_crash_noticed_only_by_the_lease_sweep_still_counts_as_a_crash(job, settings,
                                                                        django_capture_on_commit_callbacks):
    """The prefork parent does not always report a child that died at once
    (billiard loses the job when the child dies before its acknowledgement is
    read); the sweep then sees the attempt's process gone from this host."""
    settings.FAIRLANE_MAX_ATTEMPTS = 3
    settings.FAIRLANE_RETRY_BASE_DELAY_S = 0
    this_host = services.worker_id().rsplit(":", 1)[0]
    for _ in range(3):
        services.job_start(job_id=str(job.id))
        _expire_attempt(job, worker=f"{this_host}:999999999")  # no such process
        with django_capture_on_commit_callbacks(execute=True):
            assert attempts.jobs_recover_expired() == 1
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", "resource_limit")
    assert list(JobAttempt.objects.filter(job=job).values_list("error_code", flat=True)) == ["worker_lost"] * 2 + [
        "resource_limit"]


@pytest.mark.parametrize(("the_host_says", "code"), [
    ("its process still runs", "lease_expired"),  # stalled: not the file's fault
    ("its process is gone", "worker_lost"),  # a crash on a live host: counts toward resource_limit
    ("nothing: it is gone", "host_lost"),  # the host's registration expired
])
def test_a_sweep_on_another_host_asks_the_attempt_s_host_what_happened(job, settings, the_host_says, code,
                                                                       django_capture_on_commit_callbacks):
    settings.FAIRLANE_RETRY_BASE_DELAY_S = 0
    services.job_start(job_id=str(job.id))
    if the_host_says != "nothing: it is gone":
        pids = [1, 4242] if the_host_says == "its process still runs" else [1, 777]
        dispatcher.register_host("host-b", "cpu@host-b", pids, ttl_s=30)
    _expire_attempt(job, worker="host-b:4242")  # it ran on another host
    with django_capture_on_commit_callbacks(execute=True):
        assert attempts.jobs_recover_expired() == 1
    attempt = JobAttempt.objects.get(job=job, number=1)
    assert (attempt.outcome, attempt.error_code) == ("lost", code)
    job.refresh_from_db()
    assert job.status == "queued"


@pytest.mark.parametrize(("host_registered", "final_code"), [(True, "resource_limit"), (False, "worker_lost")])
def test_exhausted_attempts_fail_as_resource_limit_only_when_a_host_saw_its_process_crash(
        job, settings, host_registered, final_code, django_capture_on_commit_callbacks):
    """The poison-pill count holds across hosts: three crashes reported by
    live hosts fail the file as resource_limit; three lost hosts are bad
    luck with machines, worker_lost."""
    settings.FAIRLANE_MAX_ATTEMPTS = 3
    settings.FAIRLANE_RETRY_BASE_DELAY_S = 0
    for number in (1, 2, 3):
        services.job_start(job_id=str(job.id))
        if host_registered:  # and it does not list the attempt's process: a crash
            dispatcher.register_host(f"host-{number}", f"cpu@host-{number}", [1], ttl_s=30)
        _expire_attempt(job, worker=f"host-{number}:4242")
        with django_capture_on_commit_callbacks(execute=True):
            attempts.jobs_recover_expired()
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", final_code)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_row_another_transaction_holds_is_given_back_not_waited_for(job, sched, settings):
    """Its owner's cancel holds a queued job's row until it commits (5,000
    jobs: a second or more): the worker's start waits at most
    FAIRLANE_JOB_START_LOCK_WAIT_MS for it, then gives the job back
    untouched, and the slot is free for the next job, anyone's."""
    import threading

    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL (SQLite locks the whole file, and has no lock_timeout)")
    settings.FAIRLANE_JOB_START_LOCK_WAIT_MS = 50
    locked, done = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                list(Job.objects.select_for_update().filter(id=job.id))
                locked.set()
                done.wait(120)  # without the bound, the start below waits all this time, then runs the job
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert locked.wait(30)
        ran = []
        assert run(job, ran.append) == dispatcher.HANDED_BACK and ran == []
    finally:
        done.set()
        thread.join()
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0 and not JobAttempt.objects.filter(job=job).exists()
    # Back in its owner's backlog, offered again a second later (not at once: the
    # holder, a cancel, would still hold the row); meanwhile the slot is free.
    assert sched.known(str(job.id)) == "delayed" and 0 < sched.next_wakeup_in() <= attempts.BUSY_ROW_DELAY_S
    # The lock gone, the job runs on its next delivery.
    assert [released for released, _ in sched.release(now=time.time() + 2)] == [str(job.id)]
    assert run(job, lambda attempt: []) is None
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempts == 1
