"""The staff page of the fair dispatcher: per lane, who is waiting, how much
is in flight, and each user's weight, straight from the scheduler's state;
and charts of each user's share of worker time and wait p99 over the last
hour. Users are grouped under their organisations (the dispatcher's
groups, named by FAIR_GROUP_PROVIDER): a table and charts per
organisation, and each user's organisation in the users table. The page
(`fairness_page`) renders once and then refreshes itself from
`fairness_data` every few seconds."""
from __future__ import annotations

import time

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


def groups_of(keys) -> dict[str, tuple[str, str]]:
    """(group key, name) of each user key's organisation, in one query
    (FAIR_GROUP_PROVIDER); a user in none is left out: a group of their own."""
    ids = [int(k) for k in keys if k.isdigit()]
    if not ids or not settings.FAIR_GROUP_PROVIDER:
        return {}
    return {str(i): (g.key, g.name) for i, g in import_string(settings.FAIR_GROUP_PROVIDER)(user_ids=ids).items()}


def _group(key: str, groups: dict, names: dict) -> tuple[str, str]:
    """A user's group, or the user alone (named after them)."""
    return groups.get(key) or (f"user:{key}", names.get(key, key))


def organisations_usage(usage: dict[str, dict], groups: dict, names: dict) -> list[dict]:
    """Per organisation with members who worked lately: their share of
    worker time together, how many, and the slowest member's waits (the
    usage is per user; a p99 of p99s is not a p99, the worst one is a
    bound), largest share first, at most PAGE_ROWS."""
    by: dict[str, dict] = {}
    for key, u in usage.items():
        gkey, name = _group(key, groups, names)
        o = by.setdefault(gkey, {"key": gkey, "name": name, "members": 0, "share": 0.0, "wait_p50_ms": None,
                                 "wait_p99_ms": None})
        o["members"] += 1
        o["share"] += u["share"]
        for field in ("wait_p50_ms", "wait_p99_ms"):
            if u[field] is not None:
                o[field] = max(o[field] or 0, u[field])
    ranked = sorted(by.values(), key=lambda o: (-o["share"], o["name"]))[:PAGE_ROWS]
    for o in ranked:
        o["share_pct"] = round(100 * o["share"], 1)
    return ranked


def stale_entries(lane: Lane) -> list[dict]:
    """Jobs in flight that look stuck: released but in no queue and held by
    no live worker (lost-message recovery puts them back within seconds;
    one that stays says recovery is off or failing), or whose lease has run
    out and that no reap has put back yet."""
    entries = scheduler(lane).inflight(ttl_s=settings.FAIR_WORKER_TTL_S)
    return [{**e, "lease_s": round(e["lease_s"], 1), "missing_s": round(e["missing_s"], 1)} for e in entries
            if e["lease_s"] < 0 or (e["state"] == "released" and not e["queued"] and not e["holder"])]


# Rows per page of the per-user table; the ranking of who has the most work
# is computed at most this often per web process (a SCAN of every key with
# work: about a second at 100,000 users, in steps that never block Redis).
PAGE_ROWS = 50
RANKING_TTL_S = 15.0
_rankings: dict[Lane, tuple[float, list[str]]] = {}


# Below this many users with work the ranking is made for every request (it
# costs less than looking it up), so what the page shows is always now.
RANK_CACHE_FROM = 1000


def ranked_keys(lane: Lane, *, users_with_work: int) -> list[str]:
    """Every key with work on `lane`, most waiting first (then most in flight)."""
    cached = _rankings.get(lane)
    if (users_with_work >= RANK_CACHE_FROM and cached is not None
            and time.monotonic() - cached[0] < RANKING_TTL_S):
        return cached[1]
    found = sorted(scheduler(lane).keys_with_work(), key=lambda k: (-k[1], -k[2], k[0]))
    keys = [k for k, _, _ in found]
    _rankings[lane] = (time.monotonic(), keys)
    return keys


def lanes_snapshot(*, page: int = 1, search: str = "") -> list[dict]:
    """Every fair lane's state: its totals (O(1), the lane's summary), and a
    page of its users, those with the most work first, or those whose name
    contains `search`; each with what they do, their weight and cap, and
    their recent share of worker time and waits. Loads the same at 10
    users with work or at 100,000."""
    lanes = []
    matches = None
    if search:
        matches = [str(i) for i in get_user_model().objects.filter(username__icontains=search)
                   .order_by("username").values_list("id", flat=True)[:PAGE_ROWS]]
    for lane in sorted(FAIR_LANES):
        sched = scheduler(lane)
        summary = sched.summary()
        usage = _provided(settings.FAIR_USAGE_PROVIDERS, lane.value, minutes=settings.FAIR_USAGE_MINUTES) or {}
        if matches is not None:
            keys, pages = matches, 1
        else:
            # Those with work first; then who had the workers lately and has nothing now.
            working = ranked_keys(lane, users_with_work=summary["busy_keys"])
            known = set(working)
            ranked = working + sorted((k for k in usage if k not in known), key=lambda k: (-usage[k]["share"], k))
            pages = max(1, -(-len(ranked) // PAGE_ROWS))
            keys = ranked[(min(page, pages) - 1) * PAGE_ROWS:min(page, pages) * PAGE_ROWS]
        live = sched.keys_info(keys)
        shown = set(keys) | set(usage)
        names = {str(i): n for i, n in get_user_model().objects.filter(
            id__in=[int(k) for k in shown if k.isdigit()]).values_list("id", "username")}
        groups = groups_of(shown)
        idle = _idle_policies([k for k in keys if live.get(k, {}).get("state", "idle") == "idle"], lane)
        rows = []
        for key in keys:
            mine = live.get(key)
            busy = mine is not None and mine["state"] != "idle"
            weight, cap = (mine["weight"], mine["cap"] or None) if busy else idle.get(key, (None, None))
            row = {"key": key, "user": names.get(key), "organisation": _group(key, groups, names)[1],
                   "backlog": mine["backlog"] if mine else 0, "in_flight": mine["in_flight"] if mine else 0,
                   "state": STATES.get(mine["state"] if mine else "idle", mine and mine["state"]),
                   "weight": weight, "cap": cap,
                   **usage.get(key, {"share": 0.0, "wait_p50_ms": None, "wait_p99_ms": None})}
            row["share_pct"] = round(100 * row["share"], 1)
            rows.append(row)
        # Two live processes started with one node name: the second's slots
        # do not count (scheduler.register_worker), which operators must see.
        clashes = [{"name": name, "registered": sched.worker_token(name) or "", "refused": clash["token"]}
                   for name, clash in sorted(sched.worker_clashes().items())]
        health = lane_health(lane)
        stale = stale_entries(lane)
        stale_names = dict(get_user_model().objects.filter(
            id__in=[int(e["key"]) for e in stale if e["key"].isdigit()]).values_list("id", "username"))
        for entry in stale:
            entry["user"] = stale_names.get(int(entry["key"])) if entry["key"].isdigit() else None
        totals = {"active_keys": summary["eligible"], "held": summary["waiting"], "in_flight": summary["in_flight"],
                  "window": summary["window"], "delayed": summary["delayed"], "users_with_work": summary["busy_keys"],
                  **sched.parked_counts()}
        lanes.append({"lane": lane.value, "totals": totals, "keys": rows, "worker_clashes": clashes,
                      "organisations": organisations_usage(usage, groups, names),
                      "has_usage": lane.value in settings.FAIR_USAGE_PROVIDERS,
                      "page": min(page, pages), "pages": pages, "search": search,
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
        everyone = series["users"]
        groups = groups_of(everyone)
        series["users"] = _top_series(everyone)
        named = set(series["users"]) | {k for k in everyone if k not in groups}
        names = {str(i): n for i, n in get_user_model().objects.filter(
            id__in=[int(k) for k in named if k.isdigit()]).values_list("id", "username")}
        series["organisations"] = _top_series(_organisation_series(everyone, groups, names))
        series["users"] = {names.get(k, k): v for k, v in series["users"].items()}
        history[lane.value] = series
    return history


def _organisation_series(users: dict[str, dict], groups: dict, names: dict) -> dict[str, dict]:
    """Per organisation and minute: its members' shares summed, and the
    slowest member's wait p99 (None: no member had one that minute)."""
    out: dict[str, dict] = {}
    for key, u in users.items():
        name = _group(key, groups, names)[1]
        o = out.setdefault(name, {"share_pct": [None] * len(u["share_pct"]),
                                  "wait_p99_ms": [None] * len(u["wait_p99_ms"])})
        for i, v in enumerate(u["share_pct"]):
            if v is not None:
                o["share_pct"][i] = round((o["share_pct"][i] or 0) + v, 1)
        for i, v in enumerate(u["wait_p99_ms"]):
            if v is not None:
                o["wait_p99_ms"][i] = max(o["wait_p99_ms"][i] or 0, v)
    return out


def _page_args(request: HttpRequest) -> dict:
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        page = 1
    return {"page": page, "search": request.GET.get("search", "").strip()[:150]}


# Users drawn in the charts: those with the largest share over the hour; a
# chart of 100,000 lines says nothing and weighs megabytes.
CHART_USERS = 8


def _top_series(users: dict[str, dict]) -> dict[str, dict]:
    if len(users) <= CHART_USERS:
        return users
    total = {k: sum(v or 0 for v in u["share_pct"]) for k, u in users.items()}
    return {k: users[k] for k in sorted(users, key=lambda k: (-total[k], k))[:CHART_USERS]}


@staff_member_required
def fairness_page(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Fair dispatch", "lanes": lanes_snapshot(**_page_args(request)),
               "minutes": settings.FAIR_USAGE_MINUTES, "history_minutes": settings.FAIR_HISTORY_MINUTES}
    return render(request, "dispatcher/fairness.html", context)


@staff_member_required
def fairness_data(request: HttpRequest) -> JsonResponse:
    """What the page refreshes itself with: the tables and the charts."""
    return JsonResponse({"lanes": lanes_snapshot(**_page_args(request)), "history": lanes_history()})
