"""/metrics: each lane's work in worker-seconds, the served counter and the
suggested host count, read from the real dispatcher (Redis + Lua)."""
from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

import dispatcher
from project.lanes import Lane

LANE = {"lane": "cpu-transcode"}
# /metrics reads the organisations of the users who worked lately (tests/organisations/test_metrics.py).
pytestmark = pytest.mark.django_db


def scrape(client) -> dict[tuple[str, tuple], float]:
    resp = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
    assert resp.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.content.decode()) for s in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted({**LANE, **labels}.items())))]


@pytest.fixture
def sched(redis_client, settings):
    settings.METRICS_TOKEN = "t0ken"
    settings.FAIRLANE_SCALE_TARGET_S = 100.0
    settings.FAIRLANE_SCALE_HOST_SLOTS = 0
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    if "waiting_cost_s" not in sched.summary():
        pytest.skip("the dispatcher's cost counters (FairScheduler.summary: waiting_cost_s, ...) are not there yet")
    return sched


def test_metrics_give_the_work_in_corrected_worker_seconds_and_the_hosts_that_clear_it(client, sched):
    costs = {f"heavy-{i}": 30.0 for i in range(10)} | {"light-0": 1.0}
    for job_id, cost in costs.items():
        sched.submit(job_id, job_id.split("-")[0], cost=cost)
    samples = scrape(client)
    assert value(samples, "fairlane_backlog_work_seconds") == pytest.approx(301.0)
    assert value(samples, "fairlane_in_flight_work_seconds") == 0
    assert value(samples, "fairlane_suggested_hosts") == 4  # no live worker: 1 slot a host, ceil(301 / 100) slots

    for name in ("w1", "w2"):
        sched.register_worker(name, 2, ttl_s=60)
    released = [job_id for job_id, _ in sched.release()]
    assert len(released) == 4
    first = released[0]
    released += [job_id for job_id, _ in sched.finish(first, actual_cost=2 * costs[first])]  # took twice its estimate
    in_flight = set(released) - {first}
    waiting = set(costs) - set(released)
    samples = scrape(client)
    assert value(samples, "fairlane_cost_ratio") == pytest.approx(2.0)
    assert value(samples, "fairlane_backlog_work_seconds") == pytest.approx(2 * sum(costs[j] for j in waiting))
    assert value(samples, "fairlane_in_flight_work_seconds") == pytest.approx(2 * sum(costs[j] for j in in_flight))
    assert value(samples, "fairlane_served_work_seconds_total") == pytest.approx(2 * costs[first])
    assert value(samples, "fairlane_worker_hosts") == 2
    work = 2 * sum(costs[j] for j in waiting | in_flight)
    assert value(samples, "fairlane_suggested_hosts") == math.ceil(min(10, math.ceil(work / 100)) / 2)


def test_an_idle_lane_suggests_no_host(client, sched):
    samples = scrape(client)
    assert value(samples, "fairlane_suggested_hosts") == 0
    assert value(samples, "fairlane_backlog_work_seconds") == 0
