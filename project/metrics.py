"""Prometheus metrics at /metrics, for every process on every host.

Jobs end in prefork children and worker threads on many hosts, so
observations are recorded in Redis (one pipelined round trip per job, or
per group of jobs that ended together) and turned into Prometheus families
when /metrics is scraped; prometheus_client's
own multiprocess mode would only see one host. Gauges (backlog, in flight,
active users, worker heartbeat age) are read from the fair dispatcher at
scrape time.

The autoscaling signal is each lane's work in worker-seconds and the hosts
suggested for it (`fairlane_suggested_hosts`, dispatcher/autoscale.py):
docs/scale-out.md, "Scaling".

Per organisation, its share of a lane's worker time lately
(`fairlane_organisation_share`), for the FAIRLANE_METRICS_ORGANISATIONS
largest and one "other": bounded, whatever the number of customers.
"""
from __future__ import annotations

import hmac
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import NamedTuple

import redis
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

import dispatcher
import organisations
from project.lanes import FAIR_LANES

# Seconds. Waits span sub-second (idle lane) to an hour (a big backlog);
# processing spans a thumbnail to a long video.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
HISTOGRAMS = {
    "wait": ("fairlane_job_wait_seconds", "Time from queued (or due) to started, per lane and kind."),
    "processing": ("fairlane_job_processing_seconds", "Time from started to finished, per lane and kind."),
}
KEY = "metrics:{name}"
_clients: dict[int, redis.Redis] = {}


def _client() -> redis.Redis:
    pid = os.getpid()
    if pid not in _clients:
        _clients[pid] = redis.Redis.from_url(settings.FAIR_REDIS_URL, socket_timeout=2)
    return _clients[pid]


def _bucket(value: float) -> str:
    return next((repr(b) for b in BUCKETS if value <= b), "+Inf")


class JobEnded(NamedTuple):
    """One finished job, as the metrics count it."""

    lane: str
    kind: str
    outcome: str
    wait_s: float | None
    process_s: float | None


def observe_job(*, lane: str, kind: str, outcome: str, wait_s: float | None, process_s: float | None) -> None:
    """Count one finished job and its times. Never raises: metrics must not
    fail a job."""
    observe_jobs([JobEnded(lane, kind, outcome, wait_s, process_s)])


def observe_jobs(ended: Iterable[JobEnded]) -> None:
    """Count jobs that ended together (a cancel's 5,000) in one round trip
    of one command per distinct field: a round trip per job was 5,000 of
    them on the web's thread, and on the Redis every user shares. Never
    raises."""
    counts: Counter[tuple[str, str]] = Counter()
    sums: defaultdict[tuple[str, str], float] = defaultdict(float)
    for job in ended:
        for name, value in (("wait", job.wait_s), ("processing", job.process_s)):
            if value is None:
                continue
            key = KEY.format(name=name)
            counts[key, f"{job.lane}|{job.kind}|{_bucket(value)}"] += 1
            sums[key, f"{job.lane}|{job.kind}|sum"] += value
        counts[KEY.format(name="jobs"), f"{job.lane}|{job.kind}|{job.outcome}"] += 1
    if not counts:
        return
    try:
        pipe = _client().pipeline(transaction=False)
        for (key, field), n in counts.items():
            pipe.hincrby(key, field, n)
        for (key, field), total in sums.items():
            pipe.hincrbyfloat(key, field, total)
        pipe.execute()
    except redis.RedisError:
        pass


def count_event(*, lane: str, event: str) -> None:
    """Count a reliability event (a duplicate delivery dropped, a retry, a
    lost worker, an interrupted attempt). Never raises."""
    try:
        _client().hincrby(KEY.format(name="events"), f"{lane}|{event}", 1)
    except redis.RedisError:
        pass


def _histograms(client: redis.Redis):
    for name, (metric, doc) in HISTOGRAMS.items():
        family = HistogramMetricFamily(metric, doc, labels=["lane", "kind"])
        series: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        for field, value in client.hgetall(KEY.format(name=name)).items():
            lane, kind, le = field.decode().split("|")
            series[(lane, kind)][le] = float(value)
        for (lane, kind), counts in sorted(series.items()):
            cumulative, buckets = 0.0, []
            for le in [*map(repr, BUCKETS), "+Inf"]:
                cumulative += counts.get(le, 0.0)
                buckets.append((le, cumulative))
            family.add_metric([lane, kind], buckets, counts.get("sum", 0.0))
        yield family


def _counters(client: redis.Redis):
    family = CounterMetricFamily("fairlane_jobs", "Jobs that ended, by lane, kind and outcome.",
                                 labels=["lane", "kind", "outcome"])
    for field, value in sorted(client.hgetall(KEY.format(name="jobs")).items()):
        family.add_metric(field.decode().split("|"), float(value))
    yield family
    events = CounterMetricFamily("fairlane_attempt_events", "Attempts that did not end normally: duplicate "
                                 "deliveries dropped, retries, lost workers, interruptions.", labels=["lane", "event"])
    for field, value in sorted(client.hgetall(KEY.format(name="events")).items()):
        events.add_metric(field.decode().split("|"), float(value))
    yield events


def _gauges(now: float):
    backlog = GaugeMetricFamily("fairlane_backlog_jobs", "Accepted jobs held by the fair dispatcher, not yet "
                                "released (autoscaling signal).", labels=["lane"])
    in_flight = GaugeMetricFamily("fairlane_in_flight_jobs", "Jobs released to the lane's queue or running.",
                                  labels=["lane"])
    delayed = GaugeMetricFamily("fairlane_delayed_jobs", "Jobs scheduled for later.", labels=["lane"])
    active = GaugeMetricFamily("fairlane_active_users", "Users with a backlog on the lane.", labels=["lane"])
    window = GaugeMetricFamily("fairlane_window_jobs", "Live worker slots plus headroom.", labels=["lane"])
    age = GaugeMetricFamily("fairlane_worker_heartbeat_age_seconds", "Seconds since each worker last "
                            "renewed its registration (every third of FAIR_WORKER_TTL_S).", labels=["lane", "worker"])
    stalled = GaugeMetricFamily("fairlane_lane_stalled", "1 when the lane has work to move and has released, "
                                "started, renewed or finished nothing for FAIR_STALL_S (dispatcher/health.py).",
                                labels=["lane"])
    idle = GaugeMetricFamily("fairlane_lane_idle_seconds", "Seconds since the lane last released, started, "
                             "renewed or finished a job.", labels=["lane"])
    lost = GaugeMetricFamily("fairlane_lost_messages_pending", "Released jobs found in no queue and held by no "
                             "worker, to be offered again within seconds.", labels=["lane"])
    work = _work_families()
    for lane in sorted(FAIR_LANES):
        sched = dispatcher.scheduler(lane)
        summary = sched.summary(now=now)  # O(1): a scrape costs the same with 10 users or 100,000
        backlog.add_metric([lane.value], summary["waiting"])
        in_flight.add_metric([lane.value], summary["in_flight"])
        delayed.add_metric([lane.value], summary["delayed"])
        active.add_metric([lane.value], summary["waiting_keys"])
        window.add_metric([lane.value], summary["window"])
        live = sched.live_workers(now=now)
        for name, (_, expires_at) in sorted(live.items()):
            age.add_metric([lane.value, name], max(0.0, now - (expires_at - settings.FAIR_WORKER_TTL_S)))
        health = dispatcher.lane_health(lane)
        stalled.add_metric([lane.value], float(health.stalled))
        idle.add_metric([lane.value], health.idle_s)
        lost.add_metric([lane.value], health.lost_pending)
        _add_work(work, lane.value, summary, [slots for slots, _ in live.values()])
    yield from (backlog, in_flight, delayed, active, window, age, stalled, idle, lost, *work.values())


# The autoscaling series, per lane (dispatcher/autoscale.py): key, family, name, help.
WORK_SERIES = (
    ("backlog", GaugeMetricFamily, "fairlane_backlog_work_seconds",
     "Estimated worker-seconds of the jobs waiting, corrected by the measured / estimated ratio."),
    ("in_flight", GaugeMetricFamily, "fairlane_in_flight_work_seconds",
     "Estimated worker-seconds of the jobs released or running (whole), corrected likewise."),
    ("served", CounterMetricFamily, "fairlane_served_work_seconds",
     "Measured worker-seconds of every attempt that ended; its rate is the lane's service rate."),
    ("ratio", GaugeMetricFamily, "fairlane_cost_ratio", "Measured / estimated cost of the jobs finished lately "
     "(1 before any)."),
    ("hosts", GaugeMetricFamily, "fairlane_worker_hosts", "Worker hosts registered on the lane (one worker each)."),
    ("suggested", GaugeMetricFamily, "fairlane_suggested_hosts", "Worker hosts that clear the lane's work within "
     "FAIRLANE_SCALE_TARGET_S (autoscaling signal; 0: no work)."),
)


def _work_families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    return {key: family(name, doc, labels=["lane"]) for key, family, name, doc in WORK_SERIES}


def _add_work(families: dict, lane: str, summary: dict, live_slots: list[int]) -> None:
    """The lane's work and suggested hosts (dispatcher/autoscale.py)."""
    work = dispatcher.lane_work(summary)
    per_host = dispatcher.slots_per_host(live_slots, configured=settings.FAIRLANE_SCALE_HOST_SLOTS)
    families["backlog"].add_metric([lane], work.waiting_work_s)
    families["in_flight"].add_metric([lane], work.in_flight_work_s)
    families["served"].add_metric([lane], work.served_s)
    families["ratio"].add_metric([lane], work.cost_ratio)
    families["hosts"].add_metric([lane], len(live_slots))
    families["suggested"].add_metric([lane], dispatcher.suggested_hosts(
        work_s=work.work_s, jobs=work.jobs, target_s=settings.FAIRLANE_SCALE_TARGET_S, slots_per_host=per_host))


def _organisation_shares():
    """Each organisation's share of each lane's worker time over the last
    FAIR_USAGE_MINUTES (the fairness page's per-user usage, FAIR_USAGE_PROVIDERS,
    summed by organisation: the users who worked lately, and one query for
    their memberships), the FAIRLANE_METRICS_ORGANISATIONS largest by name
    and id ("org:<id>": two may share a name), the rest as "other". A user
    in no organisation counts as one of their own (id "user:<id>")."""
    family = GaugeMetricFamily("fairlane_organisation_share", "Share of the lane's worker time over the last "
                               "FAIR_USAGE_MINUTES, per organisation: the FAIRLANE_METRICS_ORGANISATIONS largest, "
                               "the rest as organisation=\"other\".", labels=["lane", "organisation", "id"])
    top = settings.FAIRLANE_METRICS_ORGANISATIONS
    for lane, provider in sorted(settings.FAIR_USAGE_PROVIDERS.items()):
        usage = import_string(provider)(minutes=settings.FAIR_USAGE_MINUTES)
        where = organisations.organisations_of(user_ids=[int(key) for key in usage if key.isdigit()])
        shares: dict[tuple[str, str], float] = defaultdict(float)
        for key, row in usage.items():
            belonging = where.get(int(key)) if key.isdigit() else None
            shares[(belonging.name, belonging.key) if belonging else (key, f"user:{key}")] += row["share"]
        ranked = sorted(shares.items(), key=lambda item: (-item[1], item[0]))
        for (name, key), share in ranked[:top]:
            family.add_metric([lane, name, key], share)
        if len(ranked) > top:
            family.add_metric([lane, "other", ""], sum(share for _, share in ranked[top:]))
    yield family


class _Collector:
    def collect(self):
        client = _client()
        yield from _histograms(client)
        yield from _counters(client)
        yield from _organisation_shares()
        # Redis's clock: registrations expire by it (one clock for every host)
        yield from _gauges(dispatcher.scheduler(sorted(FAIR_LANES)[0]).time())


def has_metrics_token(request: HttpRequest) -> bool:
    """The request carries `Authorization: Bearer $METRICS_TOKEN` (never, when no token is configured)."""
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Bearer-token protected; without METRICS_TOKEN configured there is no endpoint."""
    if not settings.METRICS_TOKEN:
        raise Http404
    if not has_metrics_token(request):
        return HttpResponse("unauthorized\n", status=401, headers={"WWW-Authenticate": "Bearer"})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
