"""/healthz is cheap for anyone: it reads the worker registrations the
dispatcher keeps (no broadcast to the workers, no waiting for replies), and
tells the workers' names only to staff or the metrics token."""
from __future__ import annotations

import pytest
import redis

import dispatcher
from project import health
from project.lanes import Lane

pytestmark = pytest.mark.django_db
CPU_WORKER, IO_WORKER = "cpu@host-a.internal", "io@host-b.internal"


@pytest.fixture
def registered(redis_client):
    """Both lanes have a worker registered, as a live worker's ticker keeps it."""
    dispatcher.scheduler(Lane.CPU_TRANSCODE).register_worker(CPU_WORKER, 2)
    dispatcher.scheduler(Lane.IO_NOTIFY).register_worker(IO_WORKER, 64)


def test_anyone_learns_whether_it_is_up_but_not_the_workers_names(client, registered):
    resp = client.get("/healthz")
    body = resp.json()
    assert resp.status_code == 200 and body["ok"] is True
    assert body["database"] == {"ok": True} and body["redis"] == {"ok": True}
    assert body["workers"]["ok"] is True
    assert body["workers"]["lanes"]["cpu-transcode"] is True and body["workers"]["lanes"]["io-notify"] is True
    assert b"host-a" not in resp.content and b"host-b" not in resp.content
    assert resp["Cache-Control"].startswith("max-age=0")


def test_staff_and_the_metrics_token_see_each_lanes_workers(client, admin_client, registered, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    for resp in (admin_client.get("/healthz"),
                 client.get("/healthz", HTTP_AUTHORIZATION="Bearer s3cret-token")):
        lanes = resp.json()["workers"]["lanes"]
        assert CPU_WORKER in lanes["cpu-transcode"]["workers"] and IO_WORKER in lanes["io-notify"]["workers"]
        assert lanes["io-notify"]["workers"][IO_WORKER]["slots"] == 64
    assert b"host-a" not in client.get("/healthz", HTTP_AUTHORIZATION="Bearer wrong").content


def test_a_health_check_broadcasts_nothing_to_the_workers(client, registered, redis_url):
    """Celery's control ping publishes on the pidbox fanout and waits a second
    for replies: a few requests a second filled gunicorn's threads."""
    server = redis.Redis.from_url(redis_url)
    db = server.connection_pool.connection_kwargs.get("db", 0)
    listener = server.pubsub()
    # Pub/sub spans the server's databases; kombu prefixes its fanout
    # channels with this run's: "/<db>.celery.pidbox".
    listener.psubscribe(f"/{db}.*pidbox*", "healthz-test-sentinel")
    listener.get_message(timeout=5)  # the subscription confirmations
    listener.get_message(timeout=5)
    client.get("/healthz")
    # Redis delivers a subscriber's messages in publish order: anything the
    # request published arrives before this sentinel.
    server.publish("healthz-test-sentinel", "end")
    seen = []
    while (message := listener.get_message(timeout=5)) is not None:
        if message["type"] != "pmessage":
            continue
        seen.append(message["channel"])
        if message["channel"] == b"healthz-test-sentinel":
            break
    listener.close()
    assert seen == [b"healthz-test-sentinel"]


@pytest.mark.parametrize(("live", "ok"), [
    ({Lane.CPU_TRANSCODE: {"cpu@a": (2, 0.0)}, Lane.IO_NOTIFY: {"io@a": (64, 0.0)}}, True),
    ({Lane.CPU_TRANSCODE: {"cpu@a": (2, 0.0)}, Lane.IO_NOTIFY: {}}, False),
    ({Lane.CPU_TRANSCODE: {}, Lane.IO_NOTIFY: {}}, False),
])
def test_every_lane_needs_a_live_worker(live, ok):
    assert health.workers_check(live, detailed=False)["ok"] is ok


def stuck_jobs(lane: Lane, n: int, *, idle_for_s: float, **fields) -> dispatcher.FairScheduler:
    """`n` jobs released on `lane` `idle_for_s` ago (Redis's clock), their
    messages still in the queue (the lane's workers, if any, are paused),
    and nothing started or finished since."""
    import json

    from dispatcher.message import RELEASE_TAG

    sched = dispatcher.scheduler(lane)
    then = sched.time() - idle_for_s
    for i in range(n):
        job_id = f"stuck-{i}"
        assert sched.submit(job_id, "42", payload=json.dumps({"headers": {"id": f"{job_id}@{RELEASE_TAG}"}}),
                            now=then, **fields)
    sched.release(now=then)
    return sched


def test_a_lane_that_holds_work_and_moves_nothing_is_reported_stalled(client, admin_client, registered,
                                                                      cpu_lane_paused, settings):
    """Live workers and a reachable Redis, and still nothing moves: the
    issue's restart left every slot of the window to released jobs nobody
    will run, and /healthz said ok for 14 minutes."""
    stuck_jobs(Lane.CPU_TRANSCODE, 2, idle_for_s=settings.FAIR_STALL_S + 30)
    resp = client.get("/healthz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["ok"] is False and body["workers"]["ok"] is True and body["redis"] == {"ok": True}
    assert body["lanes"] == {"ok": False, "lanes": {"cpu-transcode": False, "io-notify": True}}
    detail = admin_client.get("/healthz").json()["lanes"]["lanes"]["cpu-transcode"]
    assert detail["state"] == "stalled" and detail["in_flight"] == 2 and detail["window"] == 2
    assert detail["idle_s"] > settings.FAIR_STALL_S
    # What a load balancer asks: this web process answers
    assert client.get("/healthz?scope=web").status_code == 200


def test_a_lane_that_moved_within_the_bound_or_only_waits_for_limits_is_not_stalled(client, registered,
                                                                                    cpu_lane_paused, settings):
    sched = stuck_jobs(Lane.CPU_TRANSCODE, 2, idle_for_s=settings.FAIR_STALL_S - 30)
    assert client.get("/healthz").status_code == 200
    # a user whose rate limit holds the rest back: nothing the lane should move now
    for job_id in ("stuck-0", "stuck-1"):
        sched.finish(job_id, now=sched.time() - settings.FAIR_STALL_S - 30)
    stuck_jobs(Lane.CPU_TRANSCODE, 2, idle_for_s=settings.FAIR_STALL_S + 60, rate=(0.001, 1))
    sched.finish("stuck-0", now=sched.time() - settings.FAIR_STALL_S - 50)
    assert sched.snapshot()["totals"]["throttled_keys"] == 1 and sched.snapshot()["totals"]["in_flight"] == 0
    assert client.get("/healthz").status_code == 200
