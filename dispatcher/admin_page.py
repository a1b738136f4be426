"""The staff page of the fair dispatcher: per lane, who is waiting, how much
is in flight, and each user's weight, straight from the scheduler's state."""
from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.module_loading import import_string

from dispatcher.service import scheduler
from project.lanes import FAIR_LANES


def _usage(lane: str) -> dict[str, dict]:
    path = settings.FAIR_USAGE_PROVIDERS.get(lane)
    return import_string(path)(minutes=settings.FAIR_USAGE_MINUTES) if path else {}


def lanes_snapshot() -> list[dict]:
    """Every fair lane's live state joined with its recent usage per user:
    who waits (backlog), who runs (in flight), and who got the workers lately
    (share of worker time, wait p50/p99)."""
    lanes = []
    for lane in sorted(FAIR_LANES):
        snap = scheduler(lane).snapshot()
        usage = _usage(lane.value)
        keys = set(snap["keys"]) | set(usage)
        names = dict(get_user_model().objects.filter(id__in=[int(k) for k in keys if k.isdigit()])
                     .values_list("id", "username"))
        idle = {"state": "idle", "backlog": 0, "in_flight": 0, "weight": None, "cap": None, "vt": None}
        rows = [
            {"key": key, "user": names.get(int(key)) if key.isdigit() else None,
             **snap["keys"].get(key, idle),
             **usage.get(key, {"share": 0.0, "wait_p50_ms": None, "wait_p99_ms": None})}
            for key in keys
        ]
        for row in rows:
            row["share_pct"] = round(100 * row["share"], 1)
        rows.sort(key=lambda k: (-k["backlog"], -k["in_flight"], -k["share"], k["key"]))
        lanes.append({"lane": lane.value, "totals": snap["totals"], "keys": rows,
                      "has_usage": lane.value in settings.FAIR_USAGE_PROVIDERS})
    return lanes


@staff_member_required
def fairness_page(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Fair dispatch", "lanes": lanes_snapshot(),
               "minutes": settings.FAIR_USAGE_MINUTES}
    return render(request, "dispatcher/fairness.html", context)
