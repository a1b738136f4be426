"""Pytest plugin (loaded with `-p tests.services_plugin`): real services, set up
before Django reads its settings.

Settings read `REDIS_URL` at import, and pytest-django imports them while
loading conftests, so a fixture is too late. When `REDIS_URL` is not set (the
zero-setup path), this starts an embedded valkey-server on a free port for the
whole run and exports its URL. It also gives the run a private var/ folder.
"""
from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path

import pytest

from bench.ports import free_port, free_ports


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    # Media, mail and the SQLite test database of this run, shared with the
    # worker processes the tests start (they inherit the environment).
    os.environ["FAIRLANE_VAR_DIR"] = tempfile.mkdtemp(prefix="fairlane-test-var-")
    os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
    # Webhook tests deliver to a receiver on 127.0.0.1 (never allowed in production).
    os.environ.setdefault("FAIRLANE_WEBHOOK_ALLOW_LOOPBACK", "1")
    # Worker scratch folders of this run (the workers inherit it).
    os.environ["FAIRLANE_SCRATCH_DIR"] = str(Path(os.environ["FAIRLANE_VAR_DIR"]) / "scratch")
    if os.environ.get("FAIRLANE_MULTIHOST") == "1":
        # The multi-host suite: PostgreSQL, Redis and SeaweedFS of its own on a
        # bridge that simulated hosts reach (tests/multihost/cluster.py).
        from tests.multihost.cluster import start_shared

        os.environ.update(start_shared())
    if os.environ.get("FAIRLANE_TEST_PRIVATE_POSTGRES") == "1":
        # The fault-injection suite restarts PostgreSQL: a private server of
        # this run, never the machine's own (needs root and Debian's binaries).
        from bench.private_services import PrivatePostgres

        PRIVATE_POSTGRES["server"] = server = PrivatePostgres()
        atexit.register(server.stop)
        os.environ["DATABASE_URL"] = server.url
    if os.environ.get("FAIRLANE_STORAGE") == "s3" and not os.environ.get("FAIRLANE_S3_ENDPOINT"):
        # The object-storage run: every process of the run (this one, the
        # workers, the web) uses one private SeaweedFS.
        os.environ.update(seaweedfs_server().env())
    _start_redis()


def _start_redis() -> None:
    if os.environ.get("REDIS_URL"):
        return
    from project import embedded_redis

    # The fault-injection suite restarts this Redis: it then persists (AOF,
    # as `make run` and production do) so that the restart is a real one.
    persist = os.environ.get("FAIRLANE_TEST_REDIS_PERSIST") == "1"
    data_dir = Path(tempfile.mkdtemp(prefix="fairlane-redis-"))
    port = free_port()
    EMBEDDED_REDIS.update(proc=embedded_redis.spawn(data_dir, port, persist=persist), data_dir=data_dir, port=port,
                          persist=persist)
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    atexit.register(lambda: EMBEDDED_REDIS["proc"].kill())


# The private PostgreSQL of this run, if one was started: {server}.
PRIVATE_POSTGRES: dict = {}

# The embedded Redis of this run, if one was started: {proc, data_dir, port, persist}.
EMBEDDED_REDIS: dict = {}


def embedded_redis_restart(*, down_for_s: float = 0.0) -> None:
    """Kill the run's embedded Redis (SIGKILL: a crash, not a polite
    shutdown) and start it again on the same port and data."""
    import time

    from project import embedded_redis

    EMBEDDED_REDIS["proc"].kill()
    EMBEDDED_REDIS["proc"].wait()
    time.sleep(down_for_s)
    EMBEDDED_REDIS["proc"] = embedded_redis.spawn(EMBEDDED_REDIS["data_dir"], EMBEDDED_REDIS["port"],
                                                  persist=EMBEDDED_REDIS["persist"])


# The run's private SeaweedFS, started on first use: at load time for an
# object-storage run (FAIRLANE_STORAGE=s3), else by the tests of the S3
# backend itself (the `s3_storage` fixture), so every run exercises it.
SEAWEEDFS: dict = {}


def seaweedfs_server():
    """A private SeaweedFS for this run: free ports, data in a temporary
    folder, killed at exit."""
    if "server" not in SEAWEEDFS:
        from project import embedded_seaweedfs

        data_dir = Path(tempfile.mkdtemp(prefix="fairlane-s3-"))
        ports = dict(zip(embedded_seaweedfs.PORT_FLAGS, free_ports(len(embedded_seaweedfs.PORT_FLAGS))))
        server, proc = embedded_seaweedfs.spawn(data_dir, ports)
        SEAWEEDFS.update(server=server, proc=proc)
        atexit.register(lambda: (proc.kill(), proc.wait()))
    return SEAWEEDFS["server"]
