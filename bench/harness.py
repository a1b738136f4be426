"""What every benchmark needs: a private Redis, a migrated scratch database,
and real Celery workers started the way the Procfile starts them.

Everything runs on this machine and stops by itself; nothing outside the
benchmark's own processes is touched (the Redis and the database are new
and private to the run unless BENCH_REDIS_URL is given).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


class Environment:
    """A Redis and a database for one benchmark run, exported in os.environ
    before Django is imported so that this process and its workers agree."""

    def __init__(self) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="fairlane-bench-"))
        self.redis_proc: subprocess.Popen | None = None
        os.environ["FAIRLANE_VAR_DIR"] = str(self.var)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        os.environ.pop("DATABASE_URL", None)  # a scratch SQLite: the bench tasks never touch it
        if os.environ.get("BENCH_REDIS_URL"):
            os.environ["REDIS_URL"] = os.environ["BENCH_REDIS_URL"]
        else:
            from project import embedded_redis

            port = free_port()
            self.redis_proc = embedded_redis.spawn(self.var / "redis", port, persist=False)
            os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        subprocess.run([str(BIN / "python"), "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)

        import django

        django.setup()

    def close(self) -> None:
        if self.redis_proc is not None:
            self.redis_proc.kill()
            self.redis_proc.wait()


# A worker outlives its test or benchmark when that process is killed (a
# timeout, ^C): it has a session of its own, so that it can be signalled
# as a group. Left running, it would take the next run's jobs from the
# same Redis. SIGTERM when its parent dies (Linux's parent-death signal,
# kept across the exec of any wrapper): a warm shutdown, children included.
DIE_WITH_PARENT: tuple[str, ...] = ("setpriv", "--pdeathsig", "TERM", "--") if shutil.which("setpriv") else ()


def web_command(bind: str, *, workers: int = 1, threads: int = 4, app: str | None = None,
                grace_s: int | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, the environment it needs on top of the caller's) for the web
    process as the Procfile starts it (bin/web: granian serving
    project.asgi), listening on `bind` (host:port)."""
    env = {"WEB_BIND": bind, "WEB_WORKERS": str(workers), "WEB_THREADS": str(threads),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if app:
        env["WEB_APP"] = app
    if grace_s is not None:
        env["WEB_GRACE_S"] = str(grace_s)
    return [str(ROOT / "bin" / "web")], env


def children_of(pid: int, *, recursive: bool = False) -> list[int]:
    """`pid`'s child processes, from /proc; with `recursive` their children
    too, parents before children."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
        if not recursive:
            break
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (gunicorn's workers, Celery's pool and its
    ffmpeg, PostgreSQL's backends). Read by parent, not by field 7 (the
    terminal) for the session: that found the leader alone, 0 CPU for the web."""
    return [pid, *children_of(pid, recursive=True)]


def cpu_ticks(pids: list[int]) -> int:
    """User + system clock ticks of `pids`, with their reaped children's."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])
    return total


def stop_process_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the group `proc` leads (started with start_new_session),
    SIGKILL after `timeout` s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Worker:
    """One Celery worker process on one lane, started the way the Procfile
    starts it (the benchmarks, and the tests in tests/workers.py and
    tests/chaos, which also kill and stop it in every way there is)."""

    # What the Procfile sets for a lane's worker beyond its command line.
    PROCFILE_ENV = {"io-notify": {"DATABASE_POOL_MAX_SIZE": "16"}}

    def __init__(self, lane: str, *, pool: str, concurrency: int, name: str, log_dir: Path,
                 suffix: str = "bench", loglevel: str = "WARNING", env: dict | None = None,
                 extra_args: tuple[str, ...] = ("--without-heartbeat",), wrapper: tuple[str, ...] = (),
                 app: str = "project", include: tuple[str, ...] = ("bench.tasks",), clock_offset_s: int = 0):
        """`wrapper`: a command the worker runs under (e.g. taskset, ip netns).
        `app`: the Celery app (`-A`), the project's unless a benchmark brings
        its own (bench/plain_celery.py); `include`: task modules to import.
        `clock_offset_s`: the worker's wall clock is off by this much, as on a
        host whose clock drifted (bench/skewed_clock.py)."""
        self.name = f"{name}@{suffix}-{os.getpid()}"
        self.lane = lane
        self.log = log_dir / f"{name}.log"
        self.proc = subprocess.Popen(
            [*DIE_WITH_PARENT, *wrapper,
             *((str(BIN / "python"), "-m", "bench.skewed_clock", f"{clock_offset_s:+d}") if clock_offset_s else ()),
             str(BIN / "celery"), "-A", app, "worker", "-Q", lane, "-P", pool,
             "-c", str(concurrency), "-n", self.name, *(["--include", ",".join(include)] if include else []),
             "-l", loglevel, "--without-mingle", "--without-gossip", *extra_args],
            cwd=ROOT, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **self.PROCFILE_ENV.get(lane, {}), **(env or {})},
        )

    def children(self, *, recursive: bool = False) -> list[int]:
        """The pool's child processes (prefork), from /proc; with `recursive`
        their children too (the ffmpeg they run), parents before children."""
        return children_of(self.proc.pid, recursive=recursive)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float = 60.0) -> None:
        from project.celery import app

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited; see {self.log}")
            try:
                replies = app.control.ping(destination=[self.name], timeout=0.5) or []
            except Exception:  # a broker connection from before a Redis restart: the next call reconnects
                time.sleep(0.2)
                continue
            if any(self.name in reply for reply in replies):
                return
        raise RuntimeError(f"worker {self.name} not ready in {timeout}s; see {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def upload_batch(owner, paths: list[Path]) -> list:
    """Store `paths` as one batch of `owner`'s, as the upload request does
    (uploads.services.uploads_create; Django set up): the created uploads."""
    from django.core.files.uploadedfile import UploadedFile

    from uploads import services

    handles = [open(p, "rb") for p in paths]
    try:
        return services.uploads_create(owner=owner, files=[
            UploadedFile(h, name=p.name, size=p.stat().st_size) for h, p in zip(handles, paths)])
    finally:
        for h in handles:
            h.close()
