"""Scale-in protection kept by a real Celery worker (prefork, as the
Procfile starts it) against a local stand-in of the ECS agent's
task-protection endpoint (tests/protection_servers.py): protected from the
moment it can take work, while a job runs and between jobs, unprotected
once idle for FAIRLANE_IDLE_UNPROTECT_S, and never protected again once
SIGTERM arrived, including when SIGTERM crosses the protect request of a
job just fetched. Jobs are held by the test (tests/dispatcher/hold_tasks.py),
so nothing here depends on the machine's speed."""
from __future__ import annotations

import signal
import time
import uuid

import pytest
import redis as redis_lib
from django.conf import settings

import dispatcher
from bench.harness import Worker
from project.lanes import Lane
from tests.dispatcher.hold_tasks import flag
from tests.protection_servers import FakeEcsAgent
from tests.workers import lane_paused
from tests.workers import test_database_url as workers_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IDLE_S = 2.0


@pytest.fixture
def agent():
    server = FakeEcsAgent()
    yield server
    server.close()


@pytest.fixture
def worker(agent, tmp_path):
    with lane_paused("cpu-transcode"):  # the session's workers (when up) leave the lane to this one
        proc = Worker("cpu-transcode", pool="prefork", concurrency=1, name="protected", log_dir=tmp_path,
                      suffix=f"protection-{uuid.uuid4().hex[:6]}", loglevel="INFO", extra_args=(),
                      include=("bench.tasks", "tests.dispatcher.hold_tasks"),
                      env={"DATABASE_URL": workers_database_url(), "FAIRLANE_SCALE_PROTECTION": "ecs",
                           "ECS_AGENT_URI": agent.uri, "FAIRLANE_IDLE_UNPROTECT_S": str(IDLE_S),
                           "FAIRLANE_SHUTDOWN_GRACE_S": "120", "PYTHONUNBUFFERED": "1"})
        try:
            proc.wait_ready()
            yield proc
        finally:
            proc.stop()


def submit_held() -> str:
    job_id = f"held-{uuid.uuid4().hex[:8]}"
    assert dispatcher.enqueue("bench.cpu.hold", [job_id], task_id=job_id, fair_key="protection-test", cost=1.0)
    return job_id


def wait_flag(client, job_id: str, what: str, worker: Worker, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not client.exists(flag(job_id, what)):
        assert worker.proc.poll() is None or what == "done", worker.log_tail()
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not {what} in {timeout}s:\n{worker.log_tail()}")
        time.sleep(0.05)


def test_a_worker_is_protected_while_it_works_and_between_jobs_and_unprotected_once_idle(agent, worker):
    client = redis_lib.Redis.from_url(settings.FAIR_REDIS_URL)
    agent.wait_for(lambda: agent.protections()[:1] == [True], 60, "protection at start")
    agent.wait_for(lambda: agent.protections()[-1:] == [False], 60, "unprotection once idle")
    assert agent.protections() == [True, False]
    assert agent.calls[0].body == {"ProtectionEnabled": True, "ExpiresInMinutes": 30}

    first = submit_held()
    agent.wait_for(lambda: agent.protections() == [True, False, True], 60, "protection for a fetched job")
    wait_flag(client, first, "started", worker)
    time.sleep(3 * IDLE_S)  # far longer than idle_s: a running job keeps the host protected
    assert agent.protections() == [True, False, True]
    second = submit_held()  # queued behind the first: fetched when the first ends
    client.set(flag(first, "go"), 1)
    wait_flag(client, second, "started", worker)
    client.set(flag(second, "go"), 1)
    wait_flag(client, second, "done", worker)
    agent.wait_for(lambda: agent.protections()[-1:] == [False], 60, "unprotection once idle again")
    # Between the two jobs the host stayed protected: one protect, one unprotect for the pair.
    assert agent.protections() == [True, False, True, False]


def test_sigterm_crossing_the_protect_request_of_a_job_just_fetched_ends_unprotected_and_loses_nothing(
        agent, worker):
    """The race: the host is idle and unprotected; a job is fetched, the
    worker sends its protect request, and SIGTERM arrives before the agent
    answers. The worker drains (the job runs to its end within the grace
    period), says its last word, an unprotect, and asks for protection no
    more, though a job runs: the host is leaving."""
    client = redis_lib.Redis.from_url(settings.FAIR_REDIS_URL)
    agent.wait_for(lambda: agent.protections() == [True, False], 60, "protected at start, then idle")
    release = agent.hold_next_protect()
    job_id = submit_held()
    assert agent.held.wait(60), worker.log_tail()  # the protect request is in, its answer held
    worker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while not dispatcher.is_draining(worker.name):  # the worker has seen the SIGTERM
        assert time.monotonic() < deadline, worker.log_tail()
        time.sleep(0.05)
    release.set()
    agent.wait_for(lambda: agent.protections()[-1:] == [False], 60, "the last word: an unprotect")
    wait_flag(client, job_id, "started", worker)
    time.sleep(3 * IDLE_S)  # the job runs on during the drain: still no protect request
    assert agent.protections() == [True, False, True, False]
    client.set(flag(job_id, "go"), 1)
    worker.proc.wait(120)
    assert client.exists(flag(job_id, "done"))  # ran to its end: not lost
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    assert sched.known(job_id) is None  # finished, not handed back nor held
    assert agent.protections() == [True, False, True, False]
