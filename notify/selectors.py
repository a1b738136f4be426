"""Reads. A user's endpoints and deliveries are looked up from the user, so
another user's are simply not found (404), never forbidden."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from notify.events import Channel
from notify.models import ChannelPreference, Delivery, Endpoint


def preferences_for_user(*, user_id: int) -> dict[str, list[str]]:
    """Events per channel the user receives: their choice, else the defaults."""
    chosen = dict(ChannelPreference.objects.filter(user_id=user_id).values_list("channel", "events"))
    return {channel.value: list(chosen.get(channel.value, settings.NOTIFY_DEFAULT_EVENTS[channel.value]))
            for channel in Channel}


def endpoints_for_user(*, user: AbstractBaseUser) -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(owner=user).order_by("-created_at")


def _uuid_or_404(value, what: str) -> uuid.UUID:
    """404 for an id that is not a UUID too (a form field, not a URL
    converter, may carry it): the lookup would raise a ValidationError."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise Http404(f"No such {what}.") from None


def endpoint_get_for_user(*, user: AbstractBaseUser, endpoint_id) -> Endpoint:
    return get_object_or_404(endpoints_for_user(user=user), id=_uuid_or_404(endpoint_id, "endpoint"))


def deliveries_for_endpoint(*, endpoint: Endpoint) -> QuerySet[Delivery]:
    return (Delivery.objects.filter(endpoint=endpoint).select_related("event", "replay_of")
            .prefetch_related("attempt_log").order_by("-created_at"))


def delivery_get_for_endpoint(*, endpoint: Endpoint, delivery_id) -> Delivery:
    return get_object_or_404(Delivery.objects.select_related("event", "endpoint").filter(endpoint=endpoint),
                             id=_uuid_or_404(delivery_id, "delivery"))
