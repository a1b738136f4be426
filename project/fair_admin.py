"""The staff page of the fair dispatcher: per lane, who is waiting, how much
is in flight, and each user's weight, straight from the scheduler's state."""
from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from project import dispatch
from project.lanes import FAIR_LANES


def lanes_snapshot() -> list[dict]:
    """Every fair lane's state, keys resolved to usernames where they are users."""
    lanes = []
    for lane in sorted(FAIR_LANES):
        snap = dispatch.scheduler(lane).snapshot()
        user_ids = [int(k) for k in snap["keys"] if k.isdigit()]
        names = dict(get_user_model().objects.filter(id__in=user_ids).values_list("id", "username"))
        keys = [
            {"key": key, "user": names.get(int(key)) if key.isdigit() else None, **info}
            for key, info in snap["keys"].items()
        ]
        keys.sort(key=lambda k: (-k["backlog"], -k["in_flight"], k["key"]))
        lanes.append({"lane": lane.value, "totals": snap["totals"], "keys": keys})
    return lanes


@staff_member_required
def fairness_page(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Fair dispatch", "lanes": lanes_snapshot()}
    return render(request, "admin/fairness.html", context)
