"""Real Celery worker processes for the tests, one per lane, started the way
the Procfile starts them, against the test database and Redis."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from bench.harness import Worker

if TYPE_CHECKING:
    from uploads.models import Job


def test_database_url() -> str:
    """The URL of the database pytest-django created, for the workers."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{db['NAME']}"))


class Workers:
    """Both lanes' workers; `stop()` shuts them down (warm, then cold)."""

    def __init__(self, log_dir: Path, *, cpu_concurrency: int = 2, io_concurrency: int = 8, env: dict | None = None,
                 suffix: str = "test"):
        """`suffix` names the pool's workers (cpu@<suffix>-<pid>): two pools
        up at once need different ones, or one pool's shutdown (the
        dispatcher records a stopping worker by name) stops the other."""
        env = {"DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1", "LOG_FORMAT": "json", **(env or {})}
        self.procs: dict[str, Worker] = {
            "cpu": Worker("cpu-transcode", pool="prefork", concurrency=cpu_concurrency, name="cpu", log_dir=log_dir,
                          suffix=suffix, loglevel="INFO", env=env, extra_args=()),
            "io": Worker("io-notify", pool="threads", concurrency=io_concurrency, name="io", log_dir=log_dir,
                         suffix=suffix, loglevel="INFO", env=env, extra_args=()),
        }
        self.names = {w.name for w in self.procs.values()}
        RUNNING.append(self)

    def wait_ready(self, timeout: float = 60.0) -> None:
        for worker in self.procs.values():
            worker.wait_ready(timeout)

    def log_tail(self, name: str, lines: int = 40) -> str:
        return self.procs[name].log_tail(lines)

    def stop(self) -> None:
        RUNNING.remove(self)
        for worker in self.procs.values():
            worker.stop()


# The session's worker pools that are up (at most one: the `workers` fixture).
RUNNING: list[Workers] = []


@contextmanager
def worker_name_clash(name: str, lane: str = "cpu-transcode") -> Iterator[tuple[str, str]]:
    """Two live processes registered as worker `name` on `lane`: the first
    holds the name, the second is refused (scheduler.register_worker).
    Yields (holder, refused) tokens; both go at the end. 0 slots, so the
    window of whatever else runs in the session stays as it is."""
    import dispatcher
    from project.lanes import Lane

    sched = dispatcher.scheduler(Lane(lane))
    holder, refused = "111@host-a/1700000000", "222@host-b/1700000001"
    assert sched.register_worker(name, 0, ttl_s=120, token=holder)
    try:
        assert not sched.register_worker(name, 0, ttl_s=120, token=refused)
        yield holder, refused
    finally:
        sched.unregister_worker(name, token=refused)  # its clash record goes
        sched.unregister_worker(name, token=holder)


@contextmanager
def worker_stopped(worker: Worker) -> Iterator[None]:
    """Every process of a lane's worker stopped (SIGSTOP) inside the block:
    its main process first (so it starts nothing new), then its pool and
    their ffmpeg; let go (SIGCONT) at its end, children first. Nothing the
    worker runs or would take moves meanwhile, whatever the machine's speed."""
    import signal

    pids = [worker.proc.pid]
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        pids += worker.children(recursive=True)
        for pid in pids[1:]:
            with suppress(ProcessLookupError):  # an ffmpeg that has just ended
                os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in reversed(pids):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@contextmanager
def lane_paused(lane: str) -> Iterator[None]:
    """No running worker consumes `lane` inside the block: for tests that
    play the worker themselves (call the task's service) while the session's
    real workers are up, and must not race them for the same message."""
    from project.celery import app

    names = [w.name for pool in RUNNING for w in pool.procs.values() if w.lane == lane]
    if names:
        replies = app.control.cancel_consumer(lane, destination=names, reply=True, timeout=5)
        assert len(replies) == len(names), f"workers did not stop consuming {lane}: {replies}"
    try:
        yield
    finally:
        if names:
            app.control.add_consumer(lane, destination=names, reply=True, timeout=5)


def wait_settled(*, timeout_s: float) -> bool:
    """Wait until the workers have nothing under way: no job running, no
    delivery being sent, nothing in flight in a fair lane. False when that
    did not happen within `timeout_s` (the caller goes on: a test may leave
    work on purpose; a scheduled job, say)."""
    import dispatcher
    from notify.models import Delivery
    from project.lanes import FAIR_LANES
    from tests.promise import wait_for
    from uploads.models import Job

    def settled() -> bool:
        return not (Job.objects.filter(status=Job.Status.RUNNING).exists()
                    or Delivery.objects.filter(status=Delivery.Status.SENDING).exists()
                    or any(dispatcher.scheduler(lane).snapshot()["totals"]["in_flight"] for lane in FAIR_LANES))

    try:
        wait_for(settled, timeout_s, "the workers to settle", every=0.2)
    except AssertionError:  # timed out: the caller goes on
        return False
    return True


@contextmanager
def attempt_held(job_id: str) -> Iterator[int]:
    """The worker process running the job's latest attempt stopped
    (SIGSTOP) inside the block, and let go (SIGCONT) at its end: the job
    stays exactly where it was, running, whatever the machine's speed (its
    ffmpeg may finish, but nothing is uploaded or recorded meanwhile).
    Yields the process's pid."""
    import signal

    from uploads.models import JobAttempt

    worker = JobAttempt.objects.filter(job_id=job_id).order_by("-number").values_list("worker", flat=True).first()
    pid = int(worker.rpartition(":")[2])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with suppress(ProcessLookupError):  # killed meanwhile (a host that vanished)
            os.kill(pid, signal.SIGCONT)


@contextmanager
def running_job_held(find: Callable[[], Job | None], timeout_s: float, what: str) -> Iterator[Job]:
    """A job that `find` returns (a running one with an attempt row), held
    by `attempt_held` while the database still says it runs: one that ended
    between being found and being held is let go and another looked for.
    Inside the block the job runs, and stays so, whatever the machine's speed."""
    from tests.promise import wait_for

    deadline = time.monotonic() + timeout_s
    while True:
        job = wait_for(find, max(0.1, deadline - time.monotonic()), what)
        with attempt_held(str(job.id)):
            job.refresh_from_db()
            if job.status == job.Status.RUNNING:
                yield job
                return
