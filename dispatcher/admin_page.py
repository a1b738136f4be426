"""The staff page of the fair dispatcher: per lane, who is waiting, how much
is in flight, and each user's weight, straight from the scheduler's state;
and charts of each user's share of worker time and wait p99 over the last
hour. The page (`fairness_page`) renders once and then refreshes itself
from `fairness_data` every few seconds."""
from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.module_loading import import_string

from dispatcher.health import lane_health
from dispatcher.service import scheduler
from project.lanes import FAIR_LANES, Lane

# The scheduler's states, as the page says them.
STATES = {
    "active": "waiting, takes its turn",
    "capped": "at its cap, the rest waits",
    "throttled": "waiting for its rate limit",
    "in_flight_only": "running, nothing waiting",
    "idle": "idle",
}


def _provided(mapping: dict[str, str], lane: str, **kwargs):
    path = mapping.get(lane)
    return import_string(path)(**kwargs) if path else None


def _idle_policies(keys: list[str], lane: Lane) -> dict[str, tuple[float, int | None]]:
    """(weight, cap) of users the scheduler holds nothing for: their plan's."""
    ids = [int(k) for k in keys if k.isdigit()]
    if not ids:
        return {}
    policies = import_string(settings.FAIR_POLICY_PROVIDER)(user_ids=ids, lane=lane)
    return {str(i): (p.weight, p.cap) for i, p in policies.items()}


def stale_entries(lane: Lane) -> list[dict]:
    """Jobs in flight that look stuck: released but in no queue and held by
    no live worker (lost-message recovery puts them back within seconds;
    one that stays says recovery is off or failing), or whose lease has run
    out and that no reap has put back yet."""
    entries = scheduler(lane).inflight(ttl_s=settings.FAIR_WORKER_TTL_S)
    return [{**e, "lease_s": round(e["lease_s"], 1), "missing_s": round(e["missing_s"], 1)} for e in entries
            if e["lease_s"] < 0 or (e["state"] == "released" and not e["queued"] and not e["holder"])]


def lanes_snapshot() -> list[dict]:
    """Every fair lane's live state joined with its recent usage per user:
    who waits (backlog), who runs (in flight), and who got the workers lately
    (share of worker time, wait p50/p99)."""
    lanes = []
    for lane in sorted(FAIR_LANES):
        snap = scheduler(lane).snapshot()
        usage = _provided(settings.FAIR_USAGE_PROVIDERS, lane.value, minutes=settings.FAIR_USAGE_MINUTES) or {}
        keys = set(snap["keys"]) | set(usage)
        names = dict(get_user_model().objects.filter(id__in=[int(k) for k in keys if k.isdigit()])
                     .values_list("id", "username"))
        idle = _idle_policies([k for k in keys if k not in snap["keys"]], lane)
        rows = []
        for key in keys:
            live = snap["keys"].get(key)
            weight, cap = (live["weight"], live["cap"] or None) if live else idle.get(key, (None, None))
            row = {"key": key, "user": names.get(int(key)) if key.isdigit() else None,
                   "backlog": live["backlog"] if live else 0, "in_flight": live["in_flight"] if live else 0,
                   "state": STATES.get(live["state"] if live else "idle", live and live["state"]),
                   "weight": weight, "cap": cap,
                   **usage.get(key, {"share": 0.0, "wait_p50_ms": None, "wait_p99_ms": None})}
            row["share_pct"] = round(100 * row["share"], 1)
            rows.append(row)
        rows.sort(key=lambda k: (-k["backlog"], -k["in_flight"], -k["share"], k["key"]))
        # Two live processes started with one node name: the second's slots
        # do not count (scheduler.register_worker), which operators must see.
        clashes = [{"name": name, **clash} for name, clash in sorted(snap["worker_clashes"].items())]
        health = lane_health(lane)
        stale = stale_entries(lane)
        for entry in stale:
            entry["user"] = names.get(int(entry["key"])) if entry["key"].isdigit() else None
        lanes.append({"lane": lane.value, "totals": snap["totals"], "keys": rows, "worker_clashes": clashes,
                      "has_usage": lane.value in settings.FAIR_USAGE_PROVIDERS,
                      "health": {"stalled": health.stalled, "idle_s": health.idle_s, "stall_s": settings.FAIR_STALL_S},
                      "stale": stale})
    return lanes


def lanes_history() -> dict[str, dict]:
    """Per lane with a history provider: its per-minute series, user ids
    replaced by names."""
    history = {}
    for lane in sorted(FAIR_LANES):
        series = _provided(settings.FAIR_HISTORY_PROVIDERS, lane.value, minutes=settings.FAIR_HISTORY_MINUTES)
        if series is None:
            continue
        ids = [int(k) for k in series["users"] if k.isdigit()]
        names = dict(get_user_model().objects.filter(id__in=ids).values_list("id", "username"))
        series["users"] = {names.get(int(k), k) if k.isdigit() else k: v for k, v in series["users"].items()}
        history[lane.value] = series
    return history


@staff_member_required
def fairness_page(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Fair dispatch", "lanes": lanes_snapshot(),
               "minutes": settings.FAIR_USAGE_MINUTES, "history_minutes": settings.FAIR_HISTORY_MINUTES}
    return render(request, "dispatcher/fairness.html", context)


@staff_member_required
def fairness_data(request: HttpRequest) -> JsonResponse:
    """What the page refreshes itself with: the tables and the charts."""
    return JsonResponse({"lanes": lanes_snapshot(), "history": lanes_history()})
