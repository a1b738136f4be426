"""Isolation benchmark: `python -m bench.isolation` (`make bench-isolation`).
Whatever one user does within its bounds costs the others nothing (issue
32). Writes bench/results/isolation.json and .png and prints a table.

One system as `make run` starts it (the Procfile's bin/web, 2 x 4 threads;
a prefork transcode worker, one slot per core; a 64-thread notify worker),
on a private PostgreSQL, Redis and SeaweedFS (object storage, as in
production), all started here and stopped at the end.

1. Light users. 20 users each upload one picture through the API as the
   upload page does (create a direct upload, PUT it to the store, claim),
   one user every 2 s, for ROUNDS rounds: submit-to-done is the time
   from the create request to the job's end as the database records it.
   (a) on a quiet system, (b) while one hostile user does everything at
   once, within its bounds:
   - 1,000 open upload pages: each polls GET /api/batches/ as the page
     does (every 2 s while a batch moves, 10 s after anything else, a 429
     included);
   - cancels and retries its batch of 5,000 jobs, again and again, one
     request after the other;
   - holds its maximum of jobs: 5,000 scheduled for 2100 beside the 5,000;
   - its maximum of webhook endpoints (10), at a receiver that answers
     after RECEIVER_DELAY_S;
   - slow uploads: SLOW_UPLOADS uploads sending their parts to the store
     at a trickle.
   The hostile clients run at idle priority, in processes of their own (its
   pollers in one, its other clients in another, its receiver in a
   third), each in a session whose autogroup is niced 19 (else the kernel
   gives their session an equal turn with each of the system's: see
   `_as_another_machine`; BENCH_ISOLATION_HOSTILE_CLIENTS=idle, SCHED_IDLE
   alone, as before 2026-11-30): they stand for other machines, and do not
   share the light users' clients' process (its GIL); the results give
   the CPU they took (`cpu_s_per_phase_s`, "hostile's clients"). The light users' client threads stand
   for machines of their own too, the other way: at SCHED_FIFO 1 they run
   as soon as they are woken, so what they wait for is the system, not the
   core they share with it (BENCH_ISOLATION_LIGHT_CLIENTS=normal: ordinary
   threads, as before 2026-11-29). Quiet and hostile phases alternate (a, b, a, b) so the
   machine's drift falls on both; a quiet phase after a hostile one starts
   once the system is idle again (`_settle`), so that what the hostile
   user left running is not counted as quiet. The results give the
   ratio of the two phases' p99 and, since a p99 of 120 uploads is about
   their second slowest, how far it can be trusted (`p99_ratio_spread`,
   over bootstrap resamples: `ratio_spread`) and the steadier p90 ratio.
   BENCH_ISOLATION_HOSTS=2 runs the same on two hosts as deploy/ does,
   each with a core of its own (CPU affinity; this machine has two): the
   web host (the web, PostgreSQL, Redis, SeaweedFS, the notify lane, and
   the clients, which stand for other machines) on CPU 0, the transcode
   host (the transcode lane, one slot) on CPU 1; results to
   isolation-2hosts.json and .png. BENCH_ISOLATION_WEB_SERVER=gunicorn (or
   granian, uwsgi) serves Django's WSGI app alone with that server, without
   bin/web's front door, as bench/web_server.py runs it (results named
   with it).
2. A batch poll's Redis CPU (the sum of INFO commandstats' usec over a
   round of polls, divided by the polls; the median of POLL_ROUNDS rounds,
   after a round not measured) with 10, 1,000, 10,000 and 100,000 users
   holding work in the transcode lane (submitted straight to the
   dispatcher, workers stopped; BENCH_ISOLATION_POLL_USERS for others),
   each size in a Redis database of its own, swapped in for its rounds:
   the sizes take turns, so the machine's drift falls on all alike. Against the
   lane snapshot a poll ran before (the baseline: what `lane_share_basis`
   called until a268300). And the staff fairness page's data at each size
   (signed in as a browser is).
3. A 5,000-job cancel's Redis CPU in a 10,000-job backlog, against the
   LREMs the cancel did before 355e832 (replayed on the same lists), by
   command and by the scheduler's function (the slow log, every command).

BENCH_ISOLATION_ENV="NAME=value ..." sets the system's settings (its
environment) for an experiment, e.g. FAIRLANE_WEB_THREADS_PER_CLIENT=1
or FAIRLANE_API_SECONDS_PER_MIN=10; the results say which (`settings`).

BENCH_ISOLATION_PG_STATEMENTS=1 adds, per light phase, PostgreSQL's
statements that took the most time (pg_stat_statements), and logs the plans
of those over 1 s (auto_explain): where the hostile user's database time goes
(the top 15; BENCH_ISOLATION_PG_TOP=N for more). The web's slow-request lines
(where a request's time went: the front door, CPU, the database) are kept in
the JSON (`light.slow_requests`); BENCH_ISOLATION_ENV="FAIRLANE_SLOW_REQUEST_MS=100"
lowers their threshold from 2 s.

Targets (issue 32): light users' p99 submit-to-done in (b) at most 1.25x
(a); Redis CPU per batch poll flat within 1.2x from 10 to 100,000 users; a
5,000-job cancel under 0.5 s of Redis CPU; the hostile user's refusals are
429 or another 4xx, never a 5xx.
"""
from __future__ import annotations

import asyncio
import http.client
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from bench.harness import cpu_ticks, process_tree, stop_process_group
from bench.ports import free_port, free_ports

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
LIGHT_USERS = 20
LIGHT_SPACING_S = float(os.environ.get("BENCH_ISOLATION_SPACING_S", "2.0"))  # between two light uploads
ROUNDS = int(os.environ.get("BENCH_ISOLATION_ROUNDS", "3"))  # per phase; two phases of each kind
# 0: only the Redis costs (parts 2 and 3), without the light users' phases
CYCLES = int(os.environ.get("BENCH_ISOLATION_CYCLES", "2"))
POLLERS = int(os.environ.get("BENCH_ISOLATION_POLLERS", "1000"))
HOSTILE_BATCH = 5000
SLOW_UPLOADS = 20
RECEIVER_DELAY_S = 5.0
POLL_USERS = tuple(int(n) for n in os.environ.get("BENCH_ISOLATION_POLL_USERS", "10,1000,10000,100000").split(","))
POLLS = 100
POLL_ROUNDS = 15  # of POLLS polls at each size, the sizes in turn (poll_cost)
POLL_TIMEOUT_S = 30  # a hostile page's request, then counted as "timeout"
# 1: PostgreSQL keeps pg_stat_statements, and logs the plan of a statement
# over 1 s (auto_explain, in the kept logs' postgres.log): each light phase's
# top statements by time go to the results (`postgres_statements`).
PG_STATEMENTS = os.environ.get("BENCH_ISOLATION_PG_STATEMENTS") == "1"
PG_TOP = int(os.environ.get("BENCH_ISOLATION_PG_TOP", "15"))
# Settings for an experiment, over the system's own: "NAME=value NAME=value".
_PAIRS = os.environ.get("BENCH_ISOLATION_ENV", "").split()
if not all(pair.find("=") > 0 for pair in _PAIRS):
    raise SystemExit("BENCH_ISOLATION_ENV is NAME=value pairs, separated by spaces")
SETTINGS = dict(pair.split("=", 1) for pair in _PAIRS)
HOSTS = int(os.environ.get("BENCH_ISOLATION_HOSTS", "1"))
if HOSTS not in (1, 2):
    raise SystemExit("BENCH_ISOLATION_HOSTS is 1 (one host, as make run) or 2 (web and transcode hosts)")
# With two hosts, each host's CPUs (the transcode host's is the machine's last).
WEB_CPUS = {0} if HOSTS == 2 else None
TRANSCODE_CPUS = {(os.cpu_count() or 2) - 1} if HOSTS == 2 else None
# The web's server: the Procfile's bin/web, or (to measure what another
# would change) gunicorn, granian or uWSGI serving the WSGI app alone, as
# bench/web_server.py runs them.
WEB_SERVER = os.environ.get("BENCH_ISOLATION_WEB_SERVER", "bin/web")
RESULT_NAME = "-".join(["isolation", *(["2hosts"] if HOSTS == 2 else []),
                        *([WEB_SERVER] if WEB_SERVER != "bin/web" else [])])


# --- the system --------------------------------------------------------------------------------


def _pin(pid: int, cpus: set[int] | None) -> None:
    """`pid`, its descendants and all their threads on `cpus` (what they
    start later inherits it). Nothing with one host."""
    if cpus is None:
        return
    for process in process_tree(pid):
        for task in Path(f"/proc/{process}/task").glob("*"):
            try:
                os.sched_setaffinity(int(task.name), cpus)
            except (OSError, ValueError):  # ended meanwhile
                continue


class System:
    """Services, web and workers, with each part's CPU time readable."""

    def __init__(self, work: Path) -> None:
        from bench.private_services import PrivatePostgres
        from project import embedded_redis, embedded_seaweedfs

        self.work = work
        self.procs: dict[str, subprocess.Popen] = {}
        self.pg = PrivatePostgres(settings=(
            "shared_preload_libraries=pg_stat_statements,auto_explain", "auto_explain.log_min_duration=1000",
            "auto_explain.log_analyze=on") if PG_STATEMENTS else ())
        ports = dict(zip(embedded_seaweedfs.PORT_FLAGS, free_ports(len(embedded_seaweedfs.PORT_FLAGS))))
        self.s3, self.procs["s3"] = embedded_seaweedfs.spawn(work / "s3", ports)
        redis_port = free_port()
        self.procs["redis"] = embedded_redis.spawn(work / "redis", redis_port, persist=False)
        _pin(os.getpid(), WEB_CPUS)  # the clients, and the spawned pollers after them
        for pid in (self.pg.proc.pid, self.procs["s3"].pid, self.procs["redis"].pid):
            _pin(pid, WEB_CPUS)
        self.receiver = Receiver()
        self.hostile_clients: list[int] = []  # pids: _HostileLoad.start
        self.web_port = free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("FAIRLANE_", "FAIR_", "DATABASE_URL"))},
            **self.s3.env(), "DATABASE_URL": self.pg.url, "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "FAIRLANE_VAR_DIR": str(work / "var"), "FAIRLANE_BASE_URL": self.web_url, "DJANGO_DEBUG": "0",
            "LOG_LEVEL": "WARNING", "FAIRLANE_WEBHOOK_ALLOW_LOOPBACK": "1",
            "NOTIFY_WEBHOOK_ALLOWED_PORTS": f"80,443,{self.receiver.port}",
            "DJANGO_SETTINGS_MODULE": "project.settings", **SETTINGS,
        }
        os.environ.update(self.env)
        for argv in (["migrate", "--noinput", "-v0"], ["storage_setup"]):
            subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=self.env, check=True,
                           capture_output=True)
        import django

        django.setup()
        self.short_slices()
        self.logs = work / "logs"
        self.logs.mkdir()
        from bench import web_server

        if WEB_SERVER in ("granian", "uwsgi"):
            web_server.install_tools()
        self._spawn("web", web_server.server_argv(WEB_SERVER, self.web_port, "project.wsgi:application", ROOT,
                                                  workers=2, threads=4),
                    {"PYTHONPATH": os.pathsep.join([str(ROOT), str(web_server.TOOLS)])})
        self.start_workers()
        deadline = time.monotonic() + 60
        while True:
            try:
                http.client.HTTPConnection("127.0.0.1", self.web_port, timeout=5).request("GET", "/healthz?scope=web")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def short_slices(self) -> None:
        """PostgreSQL, Redis and the store at the request-serving processes'
        short CPU slice, as docs/operations.md has a deployment run them
        (`make run`'s Redis and SeaweedFS inherit it; the web asks for it
        itself): every thread of their process trees, and what they start
        later inherits it. FAIRLANE_CPU_SLICE_US=0 (BENCH_ISOLATION_ENV)
        leaves all of them at the kernel's own."""
        from django.conf import settings

        from project.cpu_slices import ask_for_short_slices

        for root in (self.pg.proc.pid, self.procs["redis"].pid, self.procs["s3"].pid):
            for pid in process_tree(root):
                ask_for_short_slices(settings.FAIRLANE_CPU_SLICE_US, pid)

    def _spawn(self, name: str, argv: list[str], extra: dict | None = None, cpus: set[int] | None = None) -> None:
        cpus = cpus or WEB_CPUS
        if cpus is not None:
            argv = ["taskset", "-c", ",".join(map(str, sorted(cpus))), *argv]
        self.procs[name] = subprocess.Popen(argv, cwd=ROOT, env={**self.env, **(extra or {})},
                                            stdout=open(self.logs / f"{name}.log", "ab"), stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def start_workers(self) -> None:
        from bench.harness import DIE_WITH_PARENT

        celery = [*DIE_WITH_PARENT, str(BIN / "celery"), "-A", "project", "worker", "-l", "WARNING"]
        slots = len(TRANSCODE_CPUS) if TRANSCODE_CPUS else os.cpu_count()
        self._spawn("cpu", [*celery, "-Q", "cpu-transcode", "-n", "cpu@bench", "-P", "prefork",
                            "-c", str(slots)], cpus=TRANSCODE_CPUS)
        self._spawn("io", [*celery, "-Q", "io-notify", "-n", "io@bench", "-P", "threads", "-c", "64"],
                    {"DATABASE_POOL_MAX_SIZE": "16"})
        from project.celery import app

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            replies = app.control.ping(timeout=1) or []
            if {"cpu@bench", "io@bench"} <= {name for reply in replies for name in reply}:
                return
        raise RuntimeError(f"workers not ready; see {self.logs}")

    def stop_workers(self) -> None:
        for name in ("cpu", "io"):
            proc = self.procs.pop(name, None)
            if proc and proc.poll() is None:
                stop_process_group(proc, 60)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of each part (its processes and their children)."""
        ticks = os.sysconf("SC_CLK_TCK")
        parts = {name: cpu_ticks(process_tree(proc.pid)) for name, proc in self.procs.items() if proc.poll() is None}
        parts["postgres"] = cpu_ticks(process_tree(self.pg.proc.pid))
        # Not the system's: the hostile user's machines (its webhook receiver,
        # and its clients' processes while a hostile phase runs), to see what
        # they took of the web host's core.
        parts["hostile's clients"] = cpu_ticks([self.receiver.proc.pid, *self.hostile_clients])
        return {name: t / ticks for name, t in parts.items()}

    def close(self) -> None:
        self.stop_workers()
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:  # Redis and SeaweedFS lead no group of their own
                    proc.kill()
                proc.wait()
        self.receiver.close()
        self.pg.stop()


# How the hostile user's clients (its pollers, its other clients, its
# webhook receiver) stay out of the system's way: "idle-group" (the
# default: a session of their own whose autogroup is niced 19, then
# SCHED_IDLE, below) or "idle" (SCHED_IDLE alone, as before 2026-11-30).
HOSTILE_CLIENTS = os.environ.get("BENCH_ISOLATION_HOSTILE_CLIENTS", "idle-group")
if HOSTILE_CLIENTS not in ("idle-group", "idle"):
    raise SystemExit("BENCH_ISOLATION_HOSTILE_CLIENTS is idle-group or idle")


def _as_another_machine() -> None:
    """This process stands for a machine of its own: it runs only when the
    CPU would otherwise be idle (SCHED_IDLE). Niced (19), as it was before
    2026-11-29, it still took turns with the system: a woken server thread
    could wait a nice-19 process's slice (a few ms) at each of a request's
    many wake-ups; a SCHED_IDLE one is preempted at once. Where the policy
    is refused, nice 19.

    But a policy or a nice value orders threads only within their task
    group, and with the kernel's autogroups (sched(7); on wherever
    /proc/sys/kernel/sched_autogroup_enabled is 1) every session is one:
    the system's processes each lead a session, and this process shared
    the bench's, so whenever it had work its group took an equal turn with
    the web's, PostgreSQL's and the store's on the web host's core (two
    spinning processes in two sessions, one SCHED_IDLE: 50/50 of a core;
    with the idle one's autogroup niced 19: 99/1). So it first starts a
    session of its own and nices that group 19 (lowering is allowed to
    anyone); where the kernel has no autogroups that is a no-op."""
    if HOSTILE_CLIENTS == "idle-group":
        os.setsid()
        try:
            Path("/proc/self/autogroup").write_text("19")
        except OSError:  # no autogroups (a kernel without them, or a cgroup of its own)
            pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


# How the light users' clients run: "realtime" (the default: each client
# thread at SCHED_FIFO 1, below) or "normal" (as before 2026-11-29, an
# ordinary thread on the web host's core).
LIGHT_CLIENTS = os.environ.get("BENCH_ISOLATION_LIGHT_CLIENTS", "realtime")
if LIGHT_CLIENTS not in ("realtime", "normal"):
    raise SystemExit("BENCH_ISOLATION_LIGHT_CLIENTS is realtime or normal")
LIGHT_POLICIES: set[str] = set()  # what the light clients' threads got (the results say)


def _as_a_light_users_machine() -> str:
    """This thread, a light user's client, stands for a machine of its own
    too: what it waits for is the system, never the CPU it shares with it.
    An ordinary thread on the web host's core waited for that core at each
    of its wake-ups (the answer read, the next request sent): beside the
    hostile user 40-70 ms of a light request were outside Django, where
    quiet the whole request took 8-15 ms (one-cycle runs of 2026-11-29,
    with FAIRLANE_SLOW_REQUEST_MS=1). At SCHED_FIFO 1 it runs as soon as
    it is woken; it uses a few ms of CPU an upload, and the quiet phase's
    clients run so too. Returns the policy it got (normal where refused:
    not root)."""
    if LIGHT_CLIENTS == "normal":
        return "normal"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, OSError):
        return "normal"
    return "realtime"


class Receiver:
    """A webhook receiver that answers 200 after RECEIVER_DELAY_S, in a
    process of its own (at idle priority): the hostile user's machine, not a thread
    of the light users' clients, whose GIL it would share."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._count = context.Value("i", 0)
        self.port = free_port()
        self.proc = context.Process(target=_receiver_main, args=(self.port, self._count), daemon=True)
        self.proc.start()
        from bench.private_services import wait_port

        wait_port("127.0.0.1", self.port, "the webhook receiver", timeout=30)

    @property
    def count(self) -> int:
        return self._count.value

    def close(self) -> None:
        self.proc.terminate()
        self.proc.join(10)


def _receiver_main(port: int, count) -> None:
    _as_another_machine()

    class Slow(BaseHTTPRequestHandler):
        def do_POST(handler) -> None:  # noqa: N805
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
            with count.get_lock():
                count.value += 1
            time.sleep(RECEIVER_DELAY_S)
            handler.send_response(200)
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        def log_message(handler, *args) -> None:  # noqa: N805
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Slow)
    server.daemon_threads = True
    server.serve_forever()


# --- clients ---------------------------------------------------------------------------------


class Client:
    """One user's API client (a connection per call: many threads use it)."""

    def __init__(self, port: int, token: str = "", *, session: str = "") -> None:
        """Signed in by an API token, or by a session cookie (the admin's pages)."""
        self.port, self.token = port, token
        self.auth = {"Cookie": f"{settings_session_cookie()}={session}"} if session else {
            "Authorization": f"Token {token}"}

    def call(self, method: str, path: str, payload=None, timeout: float = 600) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, None if payload is None else json.dumps(payload).encode(),
                         {**self.auth, "Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"raw": raw[:200].decode(errors="replace")}
        return resp.status, body

    def ok(self, method: str, path: str, payload=None) -> dict:
        """A request that must pass: a `throttled` answer (the user's rates
        or web-time budget spent, as the hostile user's always are when its
        phase ends) is sent again after its Retry-After, as a client should."""
        while True:
            status, body = self.call(method, path, payload)
            if status == 429 and body.get("error", {}).get("code") == "throttled":
                time.sleep(body["error"]["retry_after"])
                continue
            if status >= 300:
                raise RuntimeError(f"{method} {path} -> {status} {body}")
            return body


def settings_session_cookie() -> str:
    from django.conf import settings

    return settings.SESSION_COOKIE_NAME


def session_for(user) -> str:
    """A signed-in session of `user` in the system's session store, as a
    browser that logged in holds it."""
    from django.test import Client as DjangoClient

    browser = DjangoClient()
    browser.force_login(user)
    return browser.cookies[settings_session_cookie()].value


def put_part(url: str, headers: dict, body: bytes, *, chunk_s: float = 0.0) -> int:
    """PUT one part to the store; with chunk_s, 1 KB every chunk_s seconds."""
    target = urlsplit(url)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=600)
    try:
        conn.putrequest("PUT", url[len(f"{target.scheme}://{target.netloc}"):], skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        if "Content-Length" not in headers:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        step = 1024 if chunk_s else len(body)
        for start in range(0, len(body), step):
            conn.send(body[start:start + step])
            if chunk_s:
                time.sleep(chunk_s)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def direct_create(client: Client, files: list[tuple[str, bytes]]) -> list[dict]:
    created = []
    for start in range(0, len(files), 500):
        chunk = files[start:start + 500]
        created += client.ok("POST", "/api/uploads/direct/", _direct_body(chunk))["uploads"]
    return created


def _direct_body(files: list[tuple[str, bytes]]) -> dict:
    """POST /api/uploads/direct/'s body for `files` (PNG pictures)."""
    return {"files": [{"filename": name, "size": len(body), "content_type": "image/png"} for name, body in files]}


def direct_upload(client: Client, files: list[tuple[str, bytes]], *, threads: int = 8, steps: dict | None = None,
                  **claim) -> dict:
    """Create, PUT every (single-part) file, claim as one batch; each step's
    seconds into `steps` (create_s, put_s, claim_s) if given."""
    steps = {} if steps is None else steps
    t0 = time.monotonic()
    created = direct_create(client, files)
    steps["create_s"] = round(time.monotonic() - t0, 3)

    def put(pair) -> None:
        upload, (_, body) = pair
        url = upload["urls"][0]
        status = put_part(url["url"], url["headers"], body)
        if status != 200:
            raise RuntimeError(f"PUT -> {status}")

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, zip(created, files)))
    steps["put_s"] = round(time.monotonic() - t0, 3)
    t0 = time.monotonic()
    answer = client.ok("POST", "/api/uploads/", {"direct": [u["id"] for u in created], **claim})
    steps["claim_s"] = round(time.monotonic() - t0, 3)
    return answer


def picture(seed: int, size: tuple[int, int], fmt: str) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    w, h = size
    image = Image.linear_gradient("L").resize(size).convert("RGB")
    noise = Image.frombytes("RGB", size, rng.randbytes(w * h * 3))
    out = io.BytesIO()
    Image.blend(image, noise, 0.25).save(out, fmt, quality=85) if fmt == "JPEG" else \
        Image.blend(image, noise, 0.25).save(out, fmt)
    return out.getvalue()


# --- the light users -------------------------------------------------------------------------


# A light upload's steps: its requests (upload_s: create, PUT to the store,
# claim), its wait for a worker, its processing.
STEPS = ("upload_s", "create_s", "put_s", "claim_s", "wait_s", "process_s")


def light_round(clients: list[Client], photo: bytes, round_no: int) -> list[dict]:
    """Each light user uploads one picture, one user every LIGHT_SPACING_S; returns
    {user, seconds, status} per upload once every job has ended."""
    from uploads.models import Job

    started: dict[str, tuple[int, float]] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        LIGHT_POLICIES.add(_as_a_light_users_machine())
        t0, steps = time.time(), {}
        answer = direct_upload(clients[i], [(f"light-{round_no}-{i}.jpg", photo)], threads=1, steps=steps)
        with lock:
            started[answer["uploads"][0]["job"]["id"]] = (i, t0, time.time(), steps)

    threads = []
    for i in range(len(clients)):
        thread = threading.Thread(target=one, args=(i,))
        thread.start()
        threads.append(thread)
        time.sleep(LIGHT_SPACING_S)
    for thread in threads:
        thread.join()
    done: dict[str, dict] = {}
    deadline = time.monotonic() + 900
    while len(done) < len(started):
        if time.monotonic() > deadline:
            raise RuntimeError(f"light jobs not done in 15 min: {set(started) - set(done)}")
        for job_id, status, finished, began in Job.objects.filter(
                id__in=[j for j in started if j not in done]).exclude(
                status__in=[Job.Status.QUEUED, Job.Status.RUNNING]).values_list(
                "id", "status", "finished_at", "started_at"):
            user, t0, claimed, steps = started[str(job_id)]
            # Where the time went: the upload's requests (create, PUT, claim),
            # the wait for a worker (claimed to started), the processing.
            done[str(job_id)] = {"user": user, "status": status, "seconds": round(finished.timestamp() - t0, 3),
                                 "t0": round(t0, 3),
                                 "upload_s": round(claimed - t0, 3), **steps,
                                 "wait_s": round(began.timestamp() - claimed, 3) if began else None,
                                 "process_s": round(finished.timestamp() - began.timestamp(), 3) if began else None}
        time.sleep(0.2)
    bad = [d for d in done.values() if d["status"] != Job.Status.SUCCEEDED]
    if bad:
        raise RuntimeError(f"light jobs did not succeed: {bad}")
    return list(done.values())


# --- the hostile user -------------------------------------------------------------------------


def _pollers_main(port: int, token: str, clients: int, stop, out) -> None:
    """A process of POLLERS upload pages (asyncio), at idle priority: other machines."""
    _as_another_machine()
    statuses: Counter = Counter()

    request = (f"GET /api/batches/?page_size=10 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}"
               f"\r\nConnection: close\r\n\r\n").encode()

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            await writer.drain()
            return await reader.read()
        finally:
            writer.close()

    async def page(delay: float) -> None:
        await asyncio.sleep(delay)
        while not stop.is_set():
            moving = False
            try:
                raw = await asyncio.wait_for(exchange(), POLL_TIMEOUT_S)
                status = int(raw.split(b" ", 2)[1])
                statuses[status] += 1
                moving = status == 200 and b'"finished":false' in raw
            except TimeoutError:  # a browser gives up too; and the phase must be able to end
                statuses["timeout"] += 1
            except (OSError, ValueError, IndexError):
                statuses["error"] += 1
            for _ in range(4 if moving else 20):  # 2 s, or 10 s, and stop within 0.5 s
                if stop.is_set():
                    return
                await asyncio.sleep(0.5)

    async def run() -> None:
        await asyncio.gather(*(page(2.0 * i / clients) for i in range(clients)))

    asyncio.run(run())
    out.put({"by_call": {"poll": dict(statuses)}})


def _hostile_clients_main(port: int, token: str, batch: str, spare: str, tiny: bytes, stop, out) -> None:
    """The hostile user's other clients in a process of their own, at idle priority, as
    its pollers are: other machines. Threads of the light users' clients'
    process, they would share its GIL, and a low-priority thread that holds it
    while the core is elsewhere holds the light users' clients up."""
    _as_another_machine()
    load = _HostileLoad(Client(port, token), batch, spare, tiny, stop)
    threads = [threading.Thread(target=load.cancel_retry)]
    threads += [threading.Thread(target=load.slow_upload, args=(i,)) for i in range(SLOW_UPLOADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put({"by_call": {call: dict(n) for call, n in load.by_call.items()}, "cancel_s": load.cancel_s,
             "retry_s": load.retry_s, "spare": load.spare})


def _spare(client: Client, tiny: bytes, *, wait: bool = False) -> tuple[int, str | None]:
    """A direct upload sent whole and not claimed: the file the hostile user
    claims past its maximum. The create's status, and the upload's id if
    it was created; `wait`: a throttled create is sent again after its
    Retry-After (setting up, the 10,000 files before it can spend the
    user's web-time budget on a slower machine)."""
    while True:
        status, body = client.call("POST", "/api/uploads/direct/", _direct_body([("spare.png", tiny)]))
        if not (wait and status == 429 and body.get("error", {}).get("code") == "throttled"):
            break
        time.sleep(body["error"]["retry_after"])
    if status != 201:
        return status, None
    spare = body["uploads"][0]
    put_part(spare["urls"][0]["url"], spare["urls"][0]["headers"], tiny)
    return status, spare["id"]


class _HostileLoad:
    """Its batch canceled and retried in a loop, and its slow uploads."""

    def __init__(self, client: Client, batch: str, spare: str, tiny: bytes, stop) -> None:
        self.client, self.batch, self.spare, self.tiny, self.stop = client, batch, spare, tiny, stop
        self.by_call: defaultdict[str, Counter] = defaultdict(Counter)  # statuses by call
        self.cancel_s: list[float] = []
        self.retry_s: list[float] = []
        self.lock = threading.Lock()

    def record(self, status: int, call: str) -> None:
        with self.lock:
            self.by_call[call][status] += 1

    def cancel_retry(self) -> None:
        while not self.stop.is_set():
            for action, times in (("cancel", self.cancel_s), ("retry", self.retry_s)):
                t0 = time.monotonic()
                status, _ = self.client.call("POST", f"/api/batches/{self.batch}/{action}/")
                times.append(time.monotonic() - t0)
                self.record(status, f"batch {action}")
            # One more file while its jobs are at their maximum: refused whole.
            # Accepted when its retry was refused (its jobs below the
            # maximum); then a claim of it again would be a 400 (an upload
            # already claimed), so another is sent for the next time. That
            # one can be refused too (its uploads in progress at their
            # maximum, with its slow uploads): then the next round tries
            # again, and the loop goes on (it once ended there, the rest of
            # the phase with neither cancel nor retry).
            if self.spare is not None:
                status = self.client.call("POST", "/api/uploads/", {"direct": [self.spare]})[0]
                self.record(status, "claim past the maximum")
                if status == 202:
                    self.spare = None
            if self.spare is None:
                status, self.spare = _spare(self.client, self.tiny)
                self.record(status, "claim past the maximum: its file's create")

    def slow_upload(self, i: int) -> None:
        """Parts of 1 MB at 1 KB per 50 ms (~20 KB/s), given up once sent."""
        body = random.Random(i).randbytes(1024 * 1024)
        while not self.stop.is_set():
            status, answer = self.client.call("POST", "/api/uploads/direct/", {"files": [
                {"filename": f"slow-{i}.mov", "size": len(body)}]})
            self.record(status, "slow upload: create")
            if status != 201:
                self.stop.wait(5)
                continue
            upload = answer["uploads"][0]
            url = upload["urls"][0]
            try:
                self.record(put_part(url["url"], url["headers"], body[:url["size"]], chunk_s=0.05),
                            "slow upload: PUT to the store")
            except OSError:
                pass
            status, _ = self.client.call("DELETE", f"/api/uploads/direct/{upload['id']}/")
            self.record(status, "slow upload: give up")
            if self.stop.is_set():
                return


class Hostile:
    """The hostile user's load, started and stopped around a hostile phase."""

    def __init__(self, system: System, client: Client, tiny: bytes) -> None:
        self.system, self.client, self.tiny = system, client, tiny
        self.by_call: defaultdict[str, Counter] = defaultdict(Counter)  # statuses by call
        self.cancel_s: list[float] = []
        self.retry_s: list[float] = []
        # Spawned, not forked: a fork of this many-threaded process can
        # start with a lock another thread held (the second hostile phase's
        # pollers of two runs never answered).
        self.context = multiprocessing.get_context("spawn")
        self.procs: list[multiprocessing.Process] = []
        self.stop = self.context.Event()
        self.results = self.context.Queue()

    def record(self, status: int, call: str) -> None:
        self.by_call[call][status] += 1

    @property
    def statuses(self) -> Counter:
        return sum(self.by_call.values(), Counter())

    def prepare(self) -> None:
        """What it holds throughout: its maximum of jobs, 5,000 of them
        scheduled for 2100 and a batch of 5,000 (canceled until a hostile
        phase retries it)."""
        from uploads import limits

        self.limits = limits.limits_for(user_id=self.user_id())
        scheduled = self.limits.queued_jobs - HOSTILE_BATCH
        files = [(f"later-{i}.png", self.tiny) for i in range(scheduled)]
        direct_upload(self.client, files, scheduled_for="2100-01-01T00:00:00Z", batch_name="later")
        self.batch = direct_upload(self.client, [(f"flood-{i}.png", self.tiny) for i in range(HOSTILE_BATCH)],
                                   batch_name="flood")["batch"]
        self.client.ok("POST", f"/api/batches/{self.batch}/cancel/")
        status, self.spare = _spare(self.client, self.tiny, wait=True)
        if self.spare is None:
            raise RuntimeError(f"the hostile user's spare upload was refused ({status})")

    def user_id(self) -> int:
        from rest_framework.authtoken.models import Token

        return Token.objects.get(key=self.client.token).user_id

    def start(self) -> None:
        """Its endpoints (each finished job is a delivery to each), then its
        load: its pollers' process and its other clients' process."""
        from notify.events import SUBSCRIBABLE

        endpoint = lambda name: {"url": f"http://127.0.0.1:{self.system.receiver.port}/{name}",  # noqa: E731
                                 "events": [str(e) for e in SUBSCRIBABLE]}
        self.endpoints = [self.client.ok("POST", "/api/webhooks/", endpoint(f"h{i}"))["id"]
                          for i in range(self.limits.webhook_endpoints)]
        self.record(self.client.call("POST", "/api/webhooks/", endpoint("more"))[0],  # one more: refused
                    "endpoint past the maximum")
        self.stop.clear()
        port, token = self.system.web_port, self.client.token
        self.procs = [
            self.context.Process(target=_pollers_main, args=(port, token, POLLERS, self.stop, self.results),
                                 daemon=True),
            self.context.Process(target=_hostile_clients_main,
                                 args=(port, token, self.batch, self.spare, self.tiny, self.stop, self.results),
                                 daemon=True)]
        for proc in self.procs:
            proc.start()
        self.system.hostile_clients = [proc.pid for proc in self.procs]

    def finish(self) -> None:
        """Its load stops, its batch is canceled and its endpoints go (so
        that no delivery of its runs on into a quiet phase)."""
        self.stop.set()
        for _ in self.procs:
            result = self.results.get(timeout=120)
            for call, statuses in result["by_call"].items():
                self.by_call[call].update(statuses)
            self.spare = result.get("spare", self.spare)  # the one its last claim did not take
            self.cancel_s += result.get("cancel_s", [])
            self.retry_s += result.get("retry_s", [])
        for proc in self.procs:
            proc.join()
        self.client.ok("POST", f"/api/batches/{self.batch}/cancel/")
        for endpoint in self.endpoints:
            self.client.ok("DELETE", f"/api/webhooks/{endpoint}/")


# --- Redis CPU per poll, and per cancel ----------------------------------------------------------------


def _redis_usec(client) -> int:
    return sum(_redis_stats_by_command(client).values())


def _redis_stats_by_command(client, field: str = "usec") -> dict[str, int]:
    """Redis CPU (microseconds; or, `field` "calls", the commands run) by
    command since the last CONFIG RESETSTAT, the largest first."""
    stats = {k.removeprefix("cmdstat_"): int(v[field]) for k, v in client.info("commandstats").items()
             if k.startswith("cmdstat_")}
    return dict(sorted(stats.items(), key=lambda kv: -kv[1]))


@contextmanager
def _functions_timed(client) -> Iterator[Counter]:
    """Redis CPU (microseconds) by the scheduler's function (FCALL's first
    argument), of the calls inside the block, filled in at its end: every
    command goes to the slow log meanwhile."""
    saved = client.config_get("slowlog-*")
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()
    by_function: Counter = Counter()
    try:
        yield by_function
        for entry in client.slowlog_get(1_000_000):
            words = entry["command"].split()
            if len(words) > 1 and words[0].upper() == b"FCALL":
                by_function[words[1].decode().split("_", 2)[-1]] += entry["duration"]  # fairlane_<digest>_<op>
    finally:
        client.config_set("slowlog-log-slower-than", saved["slowlog-log-slower-than"])
        client.config_set("slowlog-max-len", saved["slowlog-max-len"])
        client.slowlog_reset()


def poll_cost(system: System, poller: Client, staff: Client) -> list[dict]:
    """Redis CPU per batch poll (and the fairness page's data) at each number
    of users with work; the lane's snapshot as the poll read it before.

    Each size has a Redis database of its own: the system's keys as they are
    (copied), and that many users' work. A size is measured by swapping its
    database in as the one the system uses (SWAPDB, O(1): the web's
    connections see it at their next command) and back, the sizes in turn,
    POLL_ROUNDS times over. Measured one after the other, sizes fell on
    different minutes of a shared machine: the same GET cost 4.1 us a call
    at one size and 8.9 at another in one run. In turn, a slower minute
    falls on every size alike."""
    import dispatcher
    import redis
    from django.conf import settings

    from project.lanes import Lane

    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    client = sched.client
    base = client.connection_pool.connection_kwargs.get("db", 0)
    dbs = {target: db for target, db in zip(POLL_USERS, (d for d in range(16) if d != base))}
    existing = list(client.scan_iter(count=1000))

    def database(db: int, **options) -> redis.Redis:
        return redis.Redis.from_url(urlsplit(settings.FAIR_REDIS_URL)._replace(path=f"/{db}").geturl(), **options)

    for target, db in dbs.items():
        other = database(db)
        other.flushdb()
        for key in existing:
            client.copy(key, key, destination_db=db, replace=True)
        loader = dispatcher.FairScheduler(other, Lane.CPU_TRANSCODE.value, queue=sched.queue)
        with other.pipeline(transaction=False) as pipe:
            for i in range(target):
                loader.submit(f"bench-poll-{i}", f"bench-user-{i}", cost=10.0, payload="m", client=pipe)
                if i % 5000 == 4999:
                    pipe.execute()
            pipe.execute()
    _lua_heap_settled(sched)

    @contextmanager
    def swapped_in(target: int) -> Iterator[None]:
        client.swapdb(base, dbs[target])
        try:
            yield
        finally:
            client.swapdb(base, dbs[target])

    def polls() -> None:
        for _ in range(POLLS):
            status, _ = poller.call("GET", "/api/batches/?page_size=10")
            assert status == 200, status

    # Unmeasured polls first: Redis grows its tables step by step on the
    # commands after a bulk load (incremental rehashing), which a lane at a
    # steady number of users does not pay on every poll.
    for target in POLL_USERS:
        with swapped_in(target):
            polls()
    rounds: dict[int, list[dict[str, int]]] = defaultdict(list)
    calls: dict[int, float] = {}
    for r in range(POLL_ROUNDS):
        for target in POLL_USERS[r % len(POLL_USERS):] + POLL_USERS[:r % len(POLL_USERS)]:
            with swapped_in(target):
                client.config_resetstat()
                polls()
                rounds[target].append(_redis_stats_by_command(client))
                # The same work at every size? The commands a poll runs (the INFO above taken out).
                calls[target] = (sum(_redis_stats_by_command(client, "calls").values()) - 1) / POLLS
    # The baseline's snapshot reads every user: over the lane client's 10 s
    # read timeout at 100,000 users, so it runs on a client without one
    # (redis-py 8 reads with a 5 s timeout unless told None).
    patient = dispatcher.FairScheduler(database(base, socket_timeout=None),
                                       Lane.CPU_TRANSCODE.value, queue=sched.queue)
    rows = []
    for target in POLL_USERS:
        with swapped_in(target):
            by_round = sorted(rounds[target], key=lambda r: sum(r.values()))
            poll_commands = by_round[len(by_round) // 2]
            per_poll = sum(poll_commands.values()) / POLLS
            with _functions_timed(client) as poll_functions:
                polls()
            client.config_resetstat()
            n = max(1, min(POLLS, 1_000_000 // target))
            for _ in range(n):
                patient.snapshot()
            per_snapshot = _redis_usec(client) / n
            _lua_heap_settled(sched)
            client.config_resetstat()
            t0 = time.monotonic()
            status, page = staff.call("GET", "/admin/fairness/data/")
            page_s = time.monotonic() - t0
            assert status == 200 and "lanes" in page, (status, str(page)[:200])
            fairness_usec = _redis_usec(client)
        rows.append({"users": target, "poll_redis_usec": round(per_poll, 1),
                     "poll_redis_usec_rounds": [round(sum(r.values()) / POLLS, 1) for r in rounds[target]],
                     "snapshot_redis_usec": round(per_snapshot, 1), "fairness_page_s": round(page_s, 3),
                     "fairness_page_redis_usec": fairness_usec, "fairness_page_status": status,
                     "poll_redis_calls": round(calls[target], 2),
                     "poll_fcall_usec_by_function": {f: round(u / POLLS, 1) for f, u in poll_functions.items()},
                     "poll_redis_stats_by_command": {c: round(u / POLLS, 1)
                                                     for c, u in list(poll_commands.items())[:6]}})
        print(f"  {target:>7,} users: poll {per_poll:8.1f} us of Redis (rounds: "
              f"{rows[-1]['poll_redis_usec_rounds']}), snapshot {per_snapshot:10.1f} us, "
              f"fairness page {page_s:.2f} s; {calls[target]:.2f} commands a poll, by command (us): "
              f"{rows[-1]['poll_redis_stats_by_command']}; "
              f"FCALL by function: {rows[-1]['poll_fcall_usec_by_function']}",
              flush=True)
    for db in dbs.values():
        database(db).flushdb()
    sched.clear()
    return rows


def _lua_heap_settled(sched, *, below: int = 8 << 20, most: int = 100_000) -> None:
    """Cheap calls (the lane's summary) until the functions' Lua heap is back
    under `below` bytes. The baseline's snapshot builds a table of every
    user (290 MB of Lua heap at 100,000), which Lua collects step by step
    on the calls after it: measured alone, the next 1,000 summary and
    share calls cost 13x what they cost before it and after. A lane that
    never runs that snapshot does not pay it, so the next measurement
    (a poll at the next size, the cancel) waits for the collection."""
    client = sched.client
    for _ in range(0, most, 100):
        if int(client.info("memory").get("used_memory_vm_functions", 0)) < below:
            return
        for _ in range(100):
            sched.summary()


def cancel_cost(system: System, client: Client) -> dict:
    """A 5,000-job cancel through the API in a 10,000-job backlog, workers
    stopped; then the LREMs cancel.lua did before, on the same lists."""
    import dispatcher
    from project.lanes import Lane

    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    redis_client = sched.client
    tiny = picture(7, (64, 64), "PNG")
    first = direct_upload(client, [(f"keep-{i}.png", tiny) for i in range(HOSTILE_BATCH)])["batch"]
    second = direct_upload(client, [(f"cancel-{i}.png", tiny) for i in range(HOSTILE_BATCH)])["batch"]
    backlog = [k for k in redis_client.scan_iter(sched.prefix + "q:*")]
    assert len(backlog) == 1, backlog
    length = redis_client.llen(backlog[0])
    redis_client.config_resetstat()
    with _functions_timed(redis_client) as by_function:
        t0 = time.monotonic()
        answer = client.ok("POST", f"/api/batches/{second}/cancel/")
        wall = time.monotonic() - t0
        by_command = _redis_stats_by_command(redis_client)
    usec = sum(by_command.values())
    # Before 355e832: an LREM per job, newest first, over the key's list.
    entries = [e for e in redis_client.lrange(backlog[0], 0, -1)]
    copy = sched.prefix + "bench-lrem-copy"
    redis_client.rpush(copy, *entries)
    redis_client.config_resetstat()
    for entry in reversed(entries[-HOSTILE_BATCH:]):
        redis_client.lrem(copy, 1, entry)
    lrem_usec = _redis_usec(redis_client)
    redis_client.delete(copy)
    client.ok("POST", f"/api/batches/{first}/cancel/")
    return {"backlog": length, "canceled": answer.get("canceled", HOSTILE_BATCH), "redis_cpu_s": usec / 1e6,
            "wall_s": round(wall, 3), "before_lrem_redis_cpu_s": lrem_usec / 1e6,
            "redis_usec_by_command": dict(list(by_command.items())[:8]),
            "fcall_usec_by_function": dict(by_function.most_common())}


# --- a run -------------------------------------------------------------------------------------


def _pg(sql: str, params: tuple = ()) -> list[tuple]:
    """A statement on the benchmark's PostgreSQL; its rows, if any."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _pg_statements_top(n: int) -> list[dict]:
    """The `n` statements that took the most time since the last reset,
    every process's (the web's, the workers', this one's)."""
    rows = _pg("SELECT left(query, 300), calls, total_exec_time, mean_exec_time FROM pg_stat_statements "
               "ORDER BY total_exec_time DESC LIMIT %s", (n,))
    return [{"query": query, "calls": calls, "total_ms": round(total, 1), "mean_ms": round(mean, 2)}
            for query, calls, total, mean in rows]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ratio_spread(quiet: list[float], hostile: list[float], q: float = 0.99, resamples: int = 2000,
                 seed: int = 0) -> dict[str, float]:
    """How much one run's ratio (the hostile phase's q-quantile over the
    quiet one's) can be trusted: its 5th, 50th and 95th percentiles over
    bootstrap resamples of each phase's own uploads. Seeded, so the same
    samples give the same answer. A p99 of 120 uploads is about their
    second slowest, and three full runs of the same code gave 1.09x, 1.63x
    and 1.81x (2026-11-30): a change is a gain when it moves this range,
    not one run's ratio."""
    rng = random.Random(seed)
    ratios = [percentile(rng.choices(hostile, k=len(hostile)), q) / percentile(rng.choices(quiet, k=len(quiet)), q)
              for _ in range(resamples)]
    return {f"p{p}": round(percentile(ratios, p / 100), 3) for p in (5, 50, 95)}


def _windows(system: System, wait) -> Iterator[dict[str, float]]:
    """Each part's CPU (cores) over one window after another; `wait()`
    ends a window (False: no more windows)."""
    before, t0 = system.cpu_s(), time.monotonic()
    while wait():
        after, t1 = system.cpu_s(), time.monotonic()
        yield {name: (after[name] - before.get(name, 0.0)) / (t1 - t0) for name in after}
        before, t0 = after, t1


def _settle(system: System, *, idle_cores: float = 0.25, window_s: float = 3.0, limit_s: float = 300.0) -> float:
    """Wait until the system is idle again: all its parts together under
    `idle_cores` for two windows in a row (the hostile user's leftovers,
    its canceled batch and its deliveries, ran on into the next quiet phase
    and made that baseline slow). Returns the seconds it took; gives up at
    `limit_s`, saying so."""
    start, calm = time.monotonic(), 0
    for cores in _windows(system, lambda: time.sleep(window_s) or True):
        calm = calm + 1 if sum(cores.values()) < idle_cores else 0
        if calm == 2:
            break
        if time.monotonic() - start > limit_s:
            print(f"not idle after {limit_s:.0f} s: the next phase starts anyway", flush=True)
            break
    return round(time.monotonic() - start, 1)


def _sample_cpu(system: System, timeline: list[dict], stop: threading.Event, every_s: float = 5.0) -> None:
    """Each part's CPU (cores) over every `every_s` until `stop`, with the
    interval's end (epoch), to set beside the light uploads' `t0`."""
    for cores in _windows(system, lambda: not stop.wait(every_s)):
        timeline.append({"t": round(time.time(), 1), **{name: round(c, 3) for name, c in cores.items()}})


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    system = None
    try:
        system = System(work)
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        users = get_user_model().objects
        token = lambda name, **kw: Token.objects.create(user=users.create_user(name, **kw)).key  # noqa: E731
        light = [Client(system.web_port, token(f"light-{i:02d}")) for i in range(LIGHT_USERS)]
        light_ids = set(users.filter(username__startswith="light-").values_list("pk", flat=True))
        hostile = Client(system.web_port, token("hostile"))
        # Part 2's poller measures Redis per poll, 500 polls a size in a few
        # seconds on a fast machine: more than a plan's default reads a
        # minute (1,200), so its plan allows the most (project/plans.py).
        poller = Client(system.web_port, token("poller"))
        from project import plans
        from uploads.models import Profile

        Profile.objects.create(user=users.get(username="poller"), api_reads_per_min=plans.API_RATE_MAX,
                               api_seconds_per_min=plans.API_SECONDS_MAX)
        staff = Client(system.web_port, session=session_for(users.create_user("staff", is_staff=True,
                                                                              is_superuser=True)))
        photo = picture(1, (1024, 768), "JPEG")
        tiny = picture(2, (64, 64), "PNG")
        # One upload each to warm every process (imports, connections): not measured.
        light_round(light[:2], photo, -1)

        phases: dict[str, list[dict]] = {"quiet": [], "hostile": []}
        cpu: dict[str, dict[str, float]] = {"quiet": Counter(), "hostile": Counter()}
        wall: Counter = Counter()
        settled: dict[str, float] = {}
        statements: dict[str, list[dict]] = {}
        if PG_STATEMENTS:
            _pg("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        attacker = Hostile(system, hostile, tiny)
        if CYCLES:
            attacker.prepare()
        timeline: list[dict] = []
        sampling = threading.Event()
        sampler = threading.Thread(target=_sample_cpu, args=(system, timeline, sampling), daemon=True)
        sampler.start()
        for cycle in range(CYCLES):
            for phase in ("quiet", "hostile"):
                if phase == "hostile":
                    attacker.start()
                    time.sleep(15)  # its load in full swing
                if PG_STATEMENTS:
                    _pg("SELECT pg_stat_statements_reset()")
                before, t0 = system.cpu_s(), time.monotonic()
                for r in range(ROUNDS):
                    phases[phase] += light_round(light, photo, cycle * 100 + r + (50 if phase == "hostile" else 0))
                after = system.cpu_s()
                if PG_STATEMENTS:
                    statements[f"{phase} {cycle + 1}"] = _pg_statements_top(PG_TOP)
                wall[phase] += time.monotonic() - t0
                for name in after:
                    cpu[phase][name] += after[name] - before.get(name, 0.0)
                if phase == "hostile":
                    attacker.finish()
                    settled[f"after hostile {cycle + 1}"] = _settle(system)
                steps = {step: statistics.median(s[step] for s in phases[phase] if s[step] is not None)
                         for step in STEPS}
                print(f"{phase} {cycle + 1}: p50 {statistics.median(s['seconds'] for s in phases[phase]):.2f} s, "
                      f"p99 {percentile([s['seconds'] for s in phases[phase]], 0.99):.2f} s so far; medians of its "
                      f"steps: {steps}", flush=True)

        sampling.set()
        sampler.join()
        for name, top in statements.items():
            print(f"PostgreSQL's top statements, {name} (ms total / calls):", flush=True)
            for row in top[:5]:
                print(f"  {row['total_ms']:>9.1f} / {row['calls']:>6}  {' '.join(row['query'].split())[:100]}")
        quiet = [s["seconds"] for s in phases["quiet"]]
        loud = [s["seconds"] for s in phases["hostile"]]
        light_result = None if not CYCLES else {
            **{phase: {"p50_s": statistics.median(times), "p99_s": percentile(times, 0.99), "n": len(times),
                       **{f"p{q}_{step}": percentile([x[step] for x in phases[phase] if x[step] is not None], q / 100)
                          for step in STEPS for q in (50, 90)}}
               for phase, times in (("quiet", quiet), ("hostile", loud))},
            "samples": phases,
            "p99_ratio_spread": ratio_spread(quiet, loud),
            "p90_ratio": round(percentile(loud, 0.9) / percentile(quiet, 0.9), 3),
            "cpu_s_per_phase_s": {phase: {k: round(v / wall[phase], 3) for k, v in cpu[phase].items()}
                                  for phase in cpu},
            "hostile_statuses": {str(k): v for k, v in sorted(attacker.statuses.items(), key=str)},
            "hostile_statuses_by_call": {call: {str(k): v for k, v in sorted(n.items(), key=str)}
                                         for call, n in sorted(attacker.by_call.items())},
            "hostile_cancel_s": {"n": len(attacker.cancel_s), "median": statistics.median(attacker.cancel_s or [0])},
            "hostile_retry_s": {"n": len(attacker.retry_s), "median": statistics.median(attacker.retry_s or [0])},
            "receiver_requests": system.receiver.count,
            "cpu_timeline": timeline, "settled_s": settled,
            **({"postgres_statements": statements} if PG_STATEMENTS else {}),
        }
        system.stop_workers()
        # The poller has a batch that waits (no worker takes it): its poll asks for an estimate.
        direct_upload(poller, [("waiting.jpg", photo)])
        print("Redis CPU per batch poll:", flush=True)
        polls = poll_cost(system, poller, staff)
        cancel = cancel_cost(system, light[1])
        print(f"5,000-job cancel: {cancel['redis_cpu_s']:.3f} s of Redis CPU (before: "
              f"{cancel['before_lrem_redis_cpu_s']:.2f} s); by command (us): {cancel['redis_usec_by_command']}; "
              f"FCALL by function (us): {cancel['fcall_usec_by_function']}",
              flush=True)
    except BaseException:
        if system is not None:
            system.close()
        print(f"failed: the system's logs are kept in {work / 'logs'}", flush=True)
        for data in ("s3", "redis", "var"):  # not the logs: the data is what is big
            shutil.rmtree(work / data, ignore_errors=True)
        raise
    system.close()
    if light_result is not None:
        light_result["slow_requests"] = _slow_requests(work / "logs", light_ids)
    shutil.rmtree(work, ignore_errors=True)
    report(light_result, polls, cancel)


def _slow_requests(logs: Path, light_ids: set[int], most: int = 2000) -> list[str]:
    """The web's "slow request" lines (project/request_timing.py), in the
    order each process wrote them: FAIRLANE_SLOW_REQUEST_MS (2 s unless
    BENCH_ISOLATION_ENV sets it) decides which. Every light user's line is
    kept, and the others' up to `most` in all (with every request logged,
    the first 2,000 lines held only half of the light users')."""
    lines = [line.strip() for path in sorted(logs.glob("*.log"))
             for line in path.read_text(errors="replace").splitlines() if "slow request:" in line]
    tags = {f" user {pk}:" for pk in light_ids}
    light = [any(tag in line for tag in tags) for line in lines]
    room, kept = most - sum(light), []
    for line, mine in zip(lines, light):
        if mine or room > 0:
            kept.append(line)
            room -= not mine
    return kept


def report(light: dict | None, polls: list[dict], cancel: dict) -> None:
    from django.conf import settings

    poll_usec = [row["poll_redis_usec"] for row in polls]
    flat = max(poll_usec) / min(poll_usec)
    targets = {
        f"Redis CPU per batch poll flat within 1.2x, 10 to 100,000 users ({flat:.2f}x)": flat <= 1.2,
        f"a 5,000-job cancel under 0.5 s of Redis CPU ({cancel['redis_cpu_s']:.3f} s)": cancel["redis_cpu_s"] < 0.5,
    }
    if light is not None:  # BENCH_ISOLATION_CYCLES=0 measures only the Redis costs
        ratio = light["hostile"]["p99_s"] / light["quiet"]["p99_s"]
        statuses = light["hostile_statuses"]
        server_errors = sum(n for s, n in statuses.items() if s.isdigit() and int(s) >= 500)
        refusals = sum(n for s, n in statuses.items() if s.isdigit() and 400 <= int(s) < 500)
        targets[f"light users' p99 under a hostile user within 1.25x quiet ({ratio:.2f}x)"] = ratio <= 1.25
        targets[f"the hostile user's refusals 4xx, never 5xx ({refusals:,} refused, {server_errors} 5xx)"] = (
            server_errors == 0 and refusals > 0)
    out = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "hosts": HOSTS, "web_server": WEB_SERVER,
           "settings": SETTINGS, "light_clients": {"asked": LIGHT_CLIENTS, "got": sorted(LIGHT_POLICIES)},
           "hostile_clients": HOSTILE_CLIENTS, "cpu_slice_us": settings.FAIRLANE_CPU_SLICE_US,
           "cpus": None if HOSTS == 1 else {"web": sorted(WEB_CPUS), "transcode": sorted(TRANSCODE_CPUS)},
           "light": light, "polls": polls,
           "cancel": cancel, "targets": targets, "load": os.getloadavg()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{RESULT_NAME}.json").write_text(json.dumps(out, indent=2) + "\n")
    if light is not None:
        print(f"light users, submit to done: quiet p50 {light['quiet']['p50_s']:.2f} s p99 "
              f"{light['quiet']['p99_s']:.2f} s; hostile p50 {light['hostile']['p50_s']:.2f} s p99 "
              f"{light['hostile']['p99_s']:.2f} s")
        spread = light["p99_ratio_spread"]
        print(f"  p99 ratio over resamples of this run's uploads: {spread['p5']:.2f}x-{spread['p95']:.2f}x "
              f"(5-95 %); p90 ratio {light['p90_ratio']:.2f}x")
        print(f"hostile statuses: {light['hostile_statuses']}")
        print(f"  by call: {light['hostile_statuses_by_call']}")
    for row in polls:
        print(f"{row['users']:>7,} users: poll {row['poll_redis_usec']:.1f} us Redis (snapshot, before: "
              f"{row['snapshot_redis_usec']:.1f} us); fairness page {row['fairness_page_s']:.2f} s")
    for target, met in targets.items():
        print(f"{'met' if met else 'MISSED'}: {target}")
    _plot(light, polls, cancel)


def _plot(light: dict, polls: list[dict], cancel: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3 if light else 2, figsize=(14 if light else 10, 4.2))
    if light:
        ax = axes[0]
        data = [[s["seconds"] for s in light["samples"][p]] for p in ("quiet", "hostile")]
        ax.boxplot(data, tick_labels=["quiet", "hostile user"], whis=(1, 99))
        ax.set_ylabel("submit to done (s)")
        ax.set_title("20 light users, one picture each")
    ax = axes[-2]
    users = [row["users"] for row in polls]
    ax.loglog(users, [row["poll_redis_usec"] for row in polls], "o-", label="batch poll (summary)")
    ax.loglog(users, [row["snapshot_redis_usec"] for row in polls], "s--", label="lane snapshot (before)")
    ax.set_xlabel("users with work")
    ax.set_ylabel("Redis CPU (us)")
    ax.set_title("Redis CPU per batch poll")
    ax.legend()
    ax = axes[-1]
    ax.bar(["cancel now", "LREMs (before)"], [cancel["redis_cpu_s"], cancel["before_lrem_redis_cpu_s"]],
           color=["#417690", "#e07a2f"])
    ax.axhline(0.5, color="grey", linestyle=":", label="target: under 0.5 s")
    ax.legend()
    ax.set_ylabel("Redis CPU (s)")
    ax.set_title(f"cancel {cancel['canceled']:,} of {cancel['backlog']:,} held jobs")
    fig.suptitle("Isolation (bench/isolation.py)" + ("" if HOSTS == 1 else
                 ": two hosts, web on CPU 0, transcode on CPU 1") + ("" if WEB_SERVER == "bin/web" else
                 f"; web served by {WEB_SERVER}"))
    fig.tight_layout()
    fig.savefig(RESULTS / f"{RESULT_NAME}.png", dpi=110)


if __name__ == "__main__":
    main()
