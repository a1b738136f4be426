"""Fixtures of the multi-host suite: worker hosts as network namespaces.

`hosts("cpu-a")` adds a namespace on the bridge and starts a Celery worker
there the way the Procfile does, under its own host name (so its host id
and its attempts' `worker` are its own), against the shared PostgreSQL,
Redis and SeaweedFS on the bridge. Every host of a test is removed at its
end (processes SIGKILLed, namespace and link deleted), whatever happened.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from bench.hosts import HostWorker
from tests.multihost.cluster import SHARED
from tests.workers import test_database_url as workers_database_url


@pytest.fixture
def hosts(tmp_path, live_mail_dir):
    """Start worker hosts: `hosts(name, lane="cpu", concurrency=1, clock_offset_s=0, env=None)`."""
    if "network" not in SHARED:
        pytest.fail("the multi-host suite runs in its own pytest run: FAIRLANE_MULTIHOST=1 pytest -m multihost "
                    "(bin/test does; it needs root for network namespaces)", pytrace=False)
    network = SHARED["network"]
    started: list[str] = []

    def start(name: str, lane: str = "cpu", *, concurrency: int = 1, clock_offset_s: int = 0,
              wait: bool = True, env: dict[str, str] | None = None) -> HostWorker:
        host = network.add_host(name)
        started.append(name)
        worker = HostWorker(host, lane, concurrency=concurrency, log_dir=tmp_path, clock_offset_s=clock_offset_s,
                            database_url=workers_database_url(),
                            scratch_dir=Path(settings.FAIRLANE_SCRATCH_DIR) / name, env=env,
                            include=("bench.tasks", "tests.dispatcher.hold_tasks"))
        if wait:
            worker.wait_ready()
        return worker

    try:
        yield start
    finally:
        for name in started:
            if name in network.hosts:
                network.remove_host(name)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, plus: before it drops the test database, end the
    sessions that vanished hosts left open (a host whose link was cut never
    closes its connections; PostgreSQL would refuse the drop)."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
