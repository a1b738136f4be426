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
