"""`make run` itself, for the fault-injection suite: bin/run with its
Procfile processes (the web, both workers, beat, Flower, the sweeper), its
embedded Redis and, with object storage, its embedded SeaweedFS, in a var/
folder and on ports of its own; stopped every way a person stops it.

The test process never shares the run's database, Redis or storage: it
talks to the web process over HTTP as a client does, and asks the run's own
database whether the promise was kept by running `python -m
tests.chaos.promise_probe <job ids>` with the run's environment.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.ports import free_port, free_port_range
from tests.promise import wait_for

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(Path(sys.executable))
# The test process's own services and folders: never the run's.
_NOT_INHERITED = ("DATABASE_URL", "REDIS_URL", "FAIR_REDIS_URL", "EMAIL_BACKEND", "EMAIL_FILE_PATH")


def upload_request(url: str, token: str, paths: list[Path]) -> urllib.request.Request:
    """POST /api/uploads/ to a real web process, as a client sends it."""
    boundary = uuid.uuid4().hex
    body = b"".join(
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{p.name}\"\r\n"
        f"Content-Type: application/octet-stream\r\n\r\n".encode() + p.read_bytes() + b"\r\n" for p in paths
    ) + f"--{boundary}--\r\n".encode()
    return urllib.request.Request(url + "/api/uploads/", data=body, method="POST", headers={
        "Authorization": f"Token {token}", "Content-Type": f"multipart/form-data; boundary={boundary}"})


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (by parent pid, across sessions), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class MakeRun:
    """One installation of `make run`: the same var/ folder (database,
    Redis's AOF, media) across every start, as on a laptop or a host."""

    var: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.var.mkdir(parents=True, exist_ok=True)
        self.web_port, self.flower_port, self.redis_port = free_port(), free_port(), free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.seaweedfs_base = free_port_range(10)

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items()
                if not (k.startswith(("FAIRLANE_", "FAIR_")) or k in _NOT_INHERITED)}
        return {**base, "FAIRLANE_VAR_DIR": str(self.var), "WEB_BIND": f"127.0.0.1:{self.web_port}",
                "FLOWER_PORT": str(self.flower_port), "FAIRLANE_REDIS_PORT": str(self.redis_port),
                "FAIRLANE_SEAWEEDFS_PORT": str(self.seaweedfs_base), "CPU_CONCURRENCY": "2",
                # every notification kept where the promise check reads them
                "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
                "EMAIL_FILE_PATH": str(self.var / "mail"), "PYTHONUNBUFFERED": "1", **self.extra_env}

    # --- starting and stopping ------------------------------------------------------

    def start(self, timeout: float = 240.0) -> float:
        """bin/run, as `make run` runs it (a session of its own, as a shell
        gives a command); returns when /healthz answers 200 (monotonic)."""
        self.starts += 1
        log = open(self.var / f"make-run-{self.starts}.log", "wb")
        # A shell's foreground command gets Ctrl-C: SIGINT at its default,
        # whatever this process inherited (a run started in the background,
        # as CI may start it, ignores SIGINT, and a shell cannot trap a
        # signal ignored when it started).
        self.proc = subprocess.Popen([str(ROOT / "bin" / "run")], cwd=ROOT, env=self.env(), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        return wait_for(self._healthy, timeout, lambda: "/healthz to answer 200: " + self.log_tail(), every=0.25)

    def _healthy(self) -> float | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"make run exited with {self.proc.returncode}: {self.log_tail()}")
        try:
            with urllib.request.urlopen(self.web_url + "/healthz", timeout=5) as resp:
                return time.monotonic() if resp.status == 200 else None
        except (urllib.error.URLError, OSError):  # not up yet, or 503: not healthy yet
            return None

    def log_tail(self, chars: int = 4000) -> str:
        logs = sorted(self.var.glob("make-run-*.log"))
        return logs[-1].read_text(errors="replace")[-chars:] if logs else ""

    def ctrl_c(self, timeout: float = 90.0) -> None:
        """What a terminal does: SIGINT to the foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        self.proc.wait(timeout)

    def make_stop_then_sigterm(self, timeout: float = 120.0) -> None:
        """`make stop` from another shell, then SIGTERM to what is left of
        make run's process group (nothing, when make stop did its job)."""
        result = subprocess.run(["make", "stop"], cwd=ROOT, env=self.env(), capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, result.stdout + result.stderr
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout)

    def power_loss(self) -> None:
        """Every process of make run and its embedded servers stops at once:
        all frozen first (none sees another die), then killed."""
        pids = [self.proc.pid, *_descendants(self.proc.pid), *self._servers()]
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        self.proc.wait(30)

    def _servers(self) -> list[int]:
        """The embedded Redis and SeaweedFS: daemons, not make run's children."""
        pids = []
        redis_pid = self.var / "redis" / "redis.pid"
        if redis_pid.exists():
            pids.append(int(redis_pid.read_text()))
        owner = self.var / "seaweedfs" / "owner.json"
        if owner.exists():
            pids.append(json.loads(owner.read_text())["pid"])
        return pids

    def stop(self) -> None:
        """The end of the test, whatever state it left: make stop, then kill
        anything still there."""
        if self.proc is None:
            return
        try:
            subprocess.run(["make", "stop"], cwd=ROOT, env=self.env(), capture_output=True, timeout=120)
        finally:
            left = [*_descendants(self.proc.pid), *self._servers()]
            for pid in [self.proc.pid, *left]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # --- talking to it -----------------------------------------------------------------

    def manage(self, *args: str) -> str:
        result = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=self._client_env(), capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def _client_env(self) -> dict[str, str]:
        """The run's environment as its processes have it, storage included
        (the embedded SeaweedFS's address and keys, as bin/run exports them)."""
        env = self.env()
        if env.get("FAIRLANE_STORAGE") == "s3":
            out = subprocess.run([PYTHON, "-m", "project.embedded_seaweedfs", "start", str(self.var / "seaweedfs"),
                                  str(self.seaweedfs_base)], cwd=ROOT, env=env, capture_output=True, text=True,
                                 check=True).stdout
            env.update(line.split("=", 1) for line in out.splitlines() if "=" in line)
        env["REDIS_URL"] = f"redis://127.0.0.1:{self.redis_port}/0"
        return env

    def user_token(self, username: str) -> str:
        return self.manage("create_api_user", username).strip().splitlines()[-1]

    def upload(self, token: str, paths: list[Path]) -> tuple[str, list[str]]:
        """(batch id, job ids) of an accepted upload."""
        with urllib.request.urlopen(upload_request(self.web_url, token, paths), timeout=60) as resp:
            assert resp.status == 202
            body = json.loads(resp.read())
        return body["batch"], [u["job"]["id"] for u in body["uploads"]]

    def batch(self, token: str, batch_id: str) -> dict:
        request = urllib.request.Request(f"{self.web_url}/api/batches/{batch_id}/",
                                         headers={"Authorization": f"Token {token}"})
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read())

    def promise_kept(self, job_ids: list[str]) -> dict:
        """tests.promise.promise_kept in the run's own database and storage."""
        result = subprocess.run([PYTHON, "-m", "tests.chaos.promise_probe", *job_ids], cwd=ROOT,
                                env={**self._client_env(), "DJANGO_SETTINGS_MODULE": "project.settings"},
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])
