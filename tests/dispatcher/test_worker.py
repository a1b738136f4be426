"""dispatcher/worker.py: a worker's registration of its slots when another
live process has the same node name, against the real Redis."""
from __future__ import annotations

import logging
import subprocess
import threading

import pytest

import dispatcher
from dispatcher import worker
from project.lanes import Lane

NAME = "cpu@name-clash-test"


@pytest.fixture
def sched(redis_client, monkeypatch):
    """This process plays a worker named NAME with 2 slots in the cpu lane."""
    monkeypatch.setattr(worker, "_worker_lanes", [(NAME, Lane.CPU_TRANSCODE, 2)])
    monkeypatch.setattr(worker, "_refused", set())
    monkeypatch.setattr(worker, "_stop", threading.Event())  # set by the shutdown handler
    return dispatcher.scheduler(Lane.CPU_TRANSCODE)


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.django_db  # the drain closes the database connections it may have used
def test_a_worker_whose_name_another_live_process_holds_logs_it_and_neither_counts_nor_drains_it(sched, caplog):
    other = "4242@another-host/1700000000"
    assert sched.register_worker(NAME, 6, ttl_s=60, token=other)
    with caplog.at_level(logging.INFO, logger="dispatcher.worker"):
        worker._register_workers()
        worker._register_workers()  # a renewal: still refused, not logged again
    [error] = errors(caplog)
    assert NAME in error and other in error and worker._instance() in error
    assert sched.live_workers()[NAME][0] == 6  # the other's slots, not 2 more nor 2 instead
    assert sched.snapshot()["worker_clashes"] == {NAME: {"registered": other, "refused": worker._instance()}}
    # Its shutdown (SIGTERM) neither drains nor unregisters the other process.
    worker._drain()
    worker._on_worker_shutdown()
    assert not dispatcher.is_draining(NAME)
    assert sched.worker_token(NAME) == other and NAME in sched.live_workers()


def test_the_name_is_this_worker_s_once_the_other_process_has_gone(sched, caplog):
    other = "4242@another-host/1700000000"
    assert sched.register_worker(NAME, 6, ttl_s=60, token=other)
    worker._register_workers()
    # The other process stops: it marks the name as draining and unregisters.
    dispatcher.set_draining(NAME, True)
    assert sched.unregister_worker(NAME, token=other)
    with caplog.at_level(logging.INFO, logger="dispatcher.worker"):
        worker._register_workers()
    assert sched.live_workers()[NAME][0] == 2 and sched.worker_token(NAME) == worker._instance()
    assert not dispatcher.is_draining(NAME)  # the other's flag would have stopped this worker's jobs
    assert sched.snapshot()["worker_clashes"] == {}


def test_a_worker_restarted_after_a_crash_takes_over_its_predecessor_s_name_at_once(sched, caplog, settings):
    crashed = subprocess.Popen(["true"])
    crashed.wait()  # a process of this host that is gone
    predecessor = f"{crashed.pid}@{settings.FAIRLANE_HOST_ID}/1700000000"
    assert sched.register_worker(NAME, 2, ttl_s=60, token=predecessor)
    with caplog.at_level(logging.INFO, logger="dispatcher.worker"):
        worker._register_workers()
    assert not errors(caplog)
    assert sched.worker_token(NAME) == worker._instance() and sched.live_workers()[NAME][0] == 2


def test_a_job_s_finish_names_the_fairness_key_its_message_carries(sched, monkeypatch):
    """The worker reads the key from the released message's headers (as
    Celery's worker makes them the task's request) and names it when it
    reports the finish (a Redis command less: scheduler.finish)."""
    import json

    import bench.tasks  # noqa: F401 (registers bench.cpu.noop, a task of the cpu lane)
    from dispatcher import service

    monkeypatch.setattr(worker, "_ensure_threads", lambda: None)  # no lease thread in the test process
    built = service._message(sched, "bench.cpu.noop", ["j-1", "user-42"], "j-1", "user-42", None)
    assert sched.submit("j-1", "user-42", payload=built.body)
    assert [job for job, _ in sched.release()] == ["j-1"]
    headers = json.loads(built.body)["headers"]
    task = service.celery_app().tasks["bench.cpu.noop"]
    task.push_request(**headers)
    try:
        worker._on_prerun(task_id=headers["id"], task=task)
        assert worker._running["j-1"].key == "user-42"
        worker._on_postrun(task_id=headers["id"], task=task, retval=None)
    finally:
        task.pop_request()
    assert "j-1" not in worker._running
    assert sched.known("j-1") is None
