"""io-notify benchmark: webhook deliveries, fair lane versus plain FIFO.
`make bench-notify` (or `python -m bench.notify --heavy 2000` for a quick run).

One heavy user has `--heavy` (10,000) webhook deliveries queued at once; one
second after they are all submitted, 20 light users arrive one every 150 ms
with one delivery each. Everything is real: a private Redis, a scratch
PostgreSQL database (SQLite when PostgreSQL is not there: no connection
count then), one io-notify Celery worker started as the Procfile starts it
(threads pool, `--concurrency`, 64 by default), the notify services and a
local HTTP receiver (tests/notify/receiver.py) that answers after
`--delay-ms` and fails `--fail` of the requests with 503 (retried by the
worker as in production: at once, then with backoff from
`--retry-base-s`). Latency = first 2xx at the receiver - submit, on one
clock. The receiver de-duplicates by webhook-id: a duplicate is a message it
accepted (2xx) more than once. A sampler counts the worker's connections in
pg_stat_activity every 50 ms (peak, and peak active).

Three runs on the same worker settings (production's: DEBUG off, the
Procfile's pool of 16 connections): `fair` (the fair dispatcher), `fifo`
(FAIR_DISPATCH_ENABLED=0, plain Celery FIFO), and `fair-nopool` (fair, but
every thread opens and closes its own connection around each HTTP call, as
without the pool). Writes bench/results/notify.json and notify.png. The
default run takes about 8-10 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.fairness import pct
from bench.harness import BIN, ROOT, Worker
from bench.ports import free_port
from project import plans

RESULTS = ROOT / "bench" / "results"
LIGHT_USERS = 20
LIGHT_GAP_S = 0.15
APP_NAME = "fairlane-bench-io"  # the worker's application_name in pg_stat_activity
ADMIN_DSN = os.environ.get("BENCH_PG_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def scratch_database() -> tuple[str | None, str]:
    """A new PostgreSQL database for the run (None: SQLite, no PostgreSQL here)."""
    import psycopg

    name = f"fairlane_bench_notify_{os.getpid()}"
    try:
        with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=2) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"PostgreSQL not available ({exc.__class__.__name__}); SQLite, no connection count", file=sys.stderr)
        return None, ""
    return name, ADMIN_DSN.rsplit("/", 1)[0] + "/" + name


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Setup:
    """Redis, database and Django for this process, before Django is imported."""

    def __init__(self) -> None:
        from project import embedded_redis

        self.var = Path(tempfile.mkdtemp(prefix="fairlane-bench-notify-"))
        os.environ.update(FAIRLANE_VAR_DIR=str(self.var), DJANGO_SETTINGS_MODULE="project.settings",
                          FAIRLANE_WEBHOOK_ALLOW_LOOPBACK="1", LOG_LEVEL="WARNING")
        port = free_port()
        self.redis_proc = embedded_redis.spawn(self.var / "redis", port, persist=False)
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        self.db_name, url = scratch_database()
        if url:
            os.environ["DATABASE_URL"] = url
        else:
            os.environ.pop("DATABASE_URL", None)
        subprocess.run([str(BIN / "python"), "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
        import django

        django.setup()

    def close(self) -> None:
        from django.db import connections

        connections.close_all()
        self.redis_proc.kill()
        self.redis_proc.wait()
        if self.db_name:
            drop_database(self.db_name)


class ConnectionSampler(threading.Thread):
    """Peak connections of the worker (all, and those running a query)."""

    def __init__(self, db_name: str | None):
        super().__init__(daemon=True)
        self.db_name, self.stop, self.peak, self.peak_active = db_name, threading.Event(), 0, 0

    def run(self) -> None:
        if not self.db_name:
            return
        import psycopg

        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            while not self.stop.wait(0.05):
                total, active = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE state = 'active') FROM pg_stat_activity "
                    "WHERE datname = %s AND application_name = %s", (self.db_name, APP_NAME)).fetchone()
                self.peak, self.peak_active = max(self.peak, total), max(self.peak_active, active)


class Tally:
    """What the receiver saw, per webhook-id."""

    def __init__(self, delay_s: float, fail: float, seed: int = 7):
        self.delay_s, self.fail, self.rand, self.lock = delay_s, fail, random.Random(seed), threading.Lock()
        self.requests: Counter = Counter()
        self.first: dict[str, float] = {}  # the first request, whatever its answer
        self.accepted: dict[str, list[float]] = defaultdict(list)

    def respond(self, request):
        from tests.notify.receiver import Answer

        msg_id = request.headers["webhook-id"]
        with self.lock:
            self.requests[msg_id] += 1
            self.first.setdefault(msg_id, request.at)
            failed = self.rand.random() < self.fail
            if not failed:
                self.accepted[msg_id].append(request.at)
        return Answer(503 if failed else 200, delay_s=self.delay_s)

    def done(self) -> int:
        with self.lock:
            return len(self.accepted)


def make_users():
    from django.contrib.auth import get_user_model

    User = get_user_model()
    heavy = User.objects.create_user("heavy", email="heavy@example.com")
    lights = [User.objects.create_user(f"light{i:02d}", email=f"light{i:02d}@example.com")
              for i in range(LIGHT_USERS)]
    return heavy, lights


def create_deliveries(owner, endpoint, count: int, tag: str) -> list:
    """Events with one webhook delivery each, written in bulk (not timed)."""
    from notify.models import Delivery, Event

    events = [Event(owner=owner, type="job.succeeded", key=f"{tag}-{i}",
                    payload={"type": "job.succeeded", "timestamp": "", "data": {"job": {"id": f"{tag}-{i}"}}})
              for i in range(count)]
    Event.objects.bulk_create(events, batch_size=2000)
    deliveries = [Delivery(event=e, channel="webhook", endpoint=endpoint) for e in events]
    Delivery.objects.bulk_create(deliveries, batch_size=2000)
    return deliveries


def run_mode(mode: str, args, setup: Setup, log_dir: Path) -> dict:
    from django.conf import settings
    from django.db import connection

    from notify import services, signing
    from notify.models import Delivery, Endpoint, Event
    from tests.notify.receiver import Receiver

    fair = mode != "fifo"
    settings.FAIR_DISPATCH_ENABLED = fair  # this process submits the same way the worker runs
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    Event.objects.all().delete()
    from django.contrib.auth import get_user_model

    get_user_model().objects.all().delete()
    heavy, lights = make_users()
    tally = Tally(args.delay_ms / 1000, args.fail)
    db_url = os.environ.get("DATABASE_URL")
    worker_env = {"FAIR_DISPATCH_ENABLED": "1" if fair else "0", "NOTIFY_RETRY_BASE_S": str(args.retry_base_s),
                  "NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES": "1000000", "LOG_LEVEL": "WARNING",
                  "DJANGO_DEBUG": "0",  # as in production: no query log, no debug cursor
                  # The reconciler (the outbox's safety net) would submit deliveries
                  # still waiting for this process's submit loop once they are
                  # RECONCILE_AFTER_S old: measured from their later submit, they
                  # showed negative latencies. This measures the submit path.
                  "FAIR_RECONCILE_S": "3600"}
    if db_url:
        worker_env["DATABASE_URL"] = f"{db_url}?application_name={APP_NAME}"
    if mode == "fair-nopool":  # the same, with one connection per thread opened and closed around each call
        worker_env["DATABASE_POOL_MAX_SIZE"] = "0"
    worker = Worker("io-notify", pool="threads", concurrency=args.concurrency, name=f"io-{mode}", log_dir=log_dir,
                    env=worker_env)
    sampler = ConnectionSampler(setup.db_name)
    try:
        worker.wait_ready()
        with Receiver(tally.respond) as receiver:
            def endpoint_for(user):
                return Endpoint.objects.create(owner=user, url=receiver.url, events=["job.succeeded"],
                                               secret=signing.secret_generate(), rate_per_s=args.rate)

            heavy_deliveries = create_deliveries(heavy, endpoint_for(heavy), args.heavy, f"{mode}-heavy")
            light_deliveries = [create_deliveries(u, endpoint_for(u), 1, f"{mode}-{u.username}")[0] for u in lights]
            connection.close()
            submitted: dict[str, tuple[str, float]] = {}
            sampler.start()
            started = time.time()
            for d in heavy_deliveries:
                submitted[d.event.webhook_id] = ("heavy", time.time())
                services.delivery_enqueue(delivery_id=d.id, seq=0, owner_id=heavy.pk)
            submit_s = time.time() - started
            time.sleep(1.0)
            for user, d in zip(lights, light_deliveries):
                submitted[d.event.webhook_id] = ("light", time.time())
                services.delivery_enqueue(delivery_id=d.id, seq=0, owner_id=user.pk)
                time.sleep(LIGHT_GAP_S)
            total = len(submitted)
            deadline = time.monotonic() + args.timeout
            while tally.done() < total:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{mode}: only {tally.done()}/{total} delivered; see {worker.log}")
                time.sleep(0.1)
            time.sleep(1.0)  # late duplicates would show up now
    finally:
        sampler.stop.set()
        worker.stop()
    sampler.join(2)
    latency = {"heavy": [], "light": []}
    for msg_id, (cls, at) in submitted.items():
        latency[cls].append(tally.accepted[msg_id][0] - at)
    lights = [msg_id for msg_id, (cls, _) in submitted.items() if cls == "light"]
    first_submit = min(at for _, at in submitted.values())
    last_ok = max(times[0] for times in tally.accepted.values())
    statuses = Counter(Delivery.objects.values_list("status", flat=True))

    def summary(values):
        return {"n": len(values), "p50_ms": round(pct(values, 50) * 1000, 1),
                "p99_ms": round(pct(values, 99) * 1000, 1), "max_ms": round(max(values) * 1000, 1)}

    return {
        "mode": mode, "deliveries": total, "submit_heavy_s": round(submit_s, 2),
        "throughput_per_s": round(total / (last_ok - first_submit), 1),
        "latency_heavy": summary(latency["heavy"]), "latency_light": summary(latency["light"]),
        # Submit to the first request at the receiver: the dispatch wait alone,
        # without the backoff of a delivery whose first attempt drew a 503.
        "first_attempt_light": summary([tally.first[m] - submitted[m][1] for m in lights]),
        "light_retried": sum(1 for m in lights if tally.requests[m] > 1),
        "requests": sum(tally.requests.values()), "retries": sum(tally.requests.values()) - len(tally.requests),
        "duplicates_after_dedup": sum(1 for times in tally.accepted.values() if len(times) > 1),
        "peak_db_connections": sampler.peak if setup.db_name else None,
        "peak_db_connections_active": sampler.peak_active if setup.db_name else None,
        "delivery_statuses": dict(statuses), "light_latencies_s": sorted(latency["light"]),
        "heavy_latencies_s": sorted(latency["heavy"])[:: max(1, len(latency["heavy"]) // 2000)],
    }


def evaluate(by_mode: dict[str, dict]) -> dict:
    """Issue 15's io-notify targets, on the fair and fifo runs of this run."""
    targets: dict = {}
    if "fair" in by_mode and "fifo" in by_mode:
        ratio = by_mode["fair"]["throughput_per_s"] / by_mode["fifo"]["throughput_per_s"]
        targets["fair_throughput_ge_095x_fifo"] = {"ratio": round(ratio, 3), "pass": ratio >= 0.95}
    if "fair" in by_mode:
        fair = by_mode["fair"]
        targets["light_p99_under_500ms"] = {
            "p99_ms": fair["latency_light"]["p99_ms"], "pass": fair["latency_light"]["p99_ms"] < 500,
            # not the target's measure; says how much of a miss is retry backoff
            "first_attempt_p99_ms": fair["first_attempt_light"]["p99_ms"], "light_retried": fair["light_retried"]}
    return targets


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), sharey=True)
    for ax, res in zip(axes if len(results) > 1 else [axes], results):
        ax.hist([res["heavy_latencies_s"], res["light_latencies_s"]], bins=40, label=["heavy", "light"],
                density=True, log=True)
        ax.set_title(f"{res['mode']}: light p99 {res['latency_light']['p99_ms']:.0f} ms, "
                     f"{res['throughput_per_s']:.0f}/s")
        ax.set_xlabel("delivery latency (s)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heavy", type=int, default=10_000, help="the heavy user's deliveries")
    parser.add_argument("--delay-ms", type=float, default=20, help="the receiver answers after this")
    parser.add_argument("--fail", type=float, default=0.05, help="fraction of requests answered 503")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("IO_CONCURRENCY", "64")))
    parser.add_argument("--rate", type=float, default=plans.RATE_MAX, help="per-endpoint rate limit (default the "
                        "highest allowed, far above the lane's throughput, which is measured, not the limit)")
    parser.add_argument("--retry-base-s", type=float, default=0.5, help="first retry delay (30 s in production)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--modes", default="fair,fifo,fair-nopool",
                        help="fair: the fair dispatcher (as in production); fifo: plain Celery; fair-nopool: fair "
                        "without the io worker's connection pool")
    parser.add_argument("--out", default=str(RESULTS / "notify.json"))
    args = parser.parse_args()

    setup = Setup()
    log_dir = Path(tempfile.mkdtemp(prefix="fairlane-bench-notify-logs-"))
    try:
        results = []
        for mode in args.modes.split(","):
            res = run_mode(mode, args, setup, log_dir)
            results.append(res)
            print(f"{mode:5} {res['deliveries']} deliveries: {res['throughput_per_s']}/s, heavy p50/p99 "
                  f"{res['latency_heavy']['p50_ms']}/{res['latency_heavy']['p99_ms']} ms, light p50/p99 "
                  f"{res['latency_light']['p50_ms']}/{res['latency_light']['p99_ms']} ms, retries "
                  f"{res['retries']}, duplicates {res['duplicates_after_dedup']}, peak DB connections "
                  f"{res['peak_db_connections']} (active {res['peak_db_connections_active']})", flush=True)
    finally:
        setup.close()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    targets = evaluate({res["mode"]: res for res in results})
    for name, target in targets.items():
        print(f"{name}: {json.dumps(target)}")
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
              "python": platform.python_version(), "params": vars(args), "results": results,
              "targets": targets, "all_targets_met": all(t["pass"] for t in targets.values())}
    out.write_text(json.dumps(report, indent=1))
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
