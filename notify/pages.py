"""HTML pages: notification preferences and webhook endpoints (register,
see the secret once, delete), and one endpoint's delivery log with replay."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_http_methods

from notify import selectors, services
from notify.events import SUBSCRIBABLE, Channel
from notify.models import Delivery
from uploads.errors import ApplicationError


def _save_preferences(request: HttpRequest) -> None:
    for channel in Channel:
        services.preferences_set(user=request.user, channel=channel,
                                 events=request.POST.getlist(f"{channel}_events"))
    messages.success(request, "Preferences saved.")


def _register(request: HttpRequest) -> dict:
    endpoint = services.endpoint_create(owner=request.user, url=request.POST.get("url", "").strip(),
                                        events=request.POST.getlist("events"))
    return {"new_endpoint": endpoint}


def _delete(request: HttpRequest) -> None:
    services.endpoint_delete(endpoint=selectors.endpoint_get_for_user(
        user=request.user, endpoint_id=request.POST.get("endpoint_id")))
    messages.success(request, "Endpoint deleted.")


ACTIONS = {"preferences": _save_preferences, "register": _register, "delete": _delete}


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    context: dict = {}
    if request.method == "POST":
        action = ACTIONS.get(request.POST.get("action", ""))
        try:
            context = (action(request) if action else None) or {}
        except ApplicationError as exc:
            context = {"error": exc.message, "url": request.POST.get("url", "")}
        if not context:  # done: back to a GET, so a reload does not post again
            return redirect("notify-settings")
    context.update(
        events=SUBSCRIBABLE,
        preferences=selectors.preferences_for_user(user_id=request.user.pk),
        endpoints=selectors.endpoints_for_user(user=request.user),
    )
    response = render(request, "notify/settings_page.html", context, status=400 if "error" in context else 200)
    if "new_endpoint" in context:  # the one page that shows a secret: no cache (or back button) keeps it
        patch_cache_control(response, no_store=True)
    return response


# The endpoint page lists this many of its latest deliveries (the API pages through all).
DELIVERIES_SHOWN = 100


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_page(request: HttpRequest, endpoint_id) -> HttpResponse:
    """The endpoint's delivery log (latest first: status, tries, the last
    answer's code, every try), and Replay for an ended delivery (POST)."""
    endpoint = selectors.endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id)
    if request.method == "POST":
        delivery = selectors.delivery_get_for_endpoint(endpoint=endpoint, delivery_id=request.POST.get("delivery_id"))
        try:
            services.delivery_replay(delivery=delivery, actor=request.user)
            messages.success(request, f"{delivery.event.type} ({delivery.event.webhook_id}) is being delivered again.")
        except ApplicationError as exc:
            messages.error(request, exc.message)
        return redirect("notify-endpoint", endpoint_id=endpoint.id)
    deliveries = list(selectors.deliveries_for_endpoint(endpoint=endpoint)[:DELIVERIES_SHOWN])
    return render(request, "notify/endpoint_page.html", {
        "endpoint": endpoint, "deliveries": deliveries, "shown": DELIVERIES_SHOWN,
        "moving": any(d.status in (Delivery.Status.PENDING, Delivery.Status.SENDING) for d in deliveries)})
