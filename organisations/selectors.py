"""Reads of organisations: who belongs where, and an organisation's plan on
a lane as the fair dispatcher applies it. Every read is by the users or
organisations asked about (the membership's unique user, the primary key),
never a scan: the dispatch path asks for the owners of the jobs it submits,
the staff page and the metrics for one page of keys."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from organisations.models import Membership, Organisation, fair_key
from project import plans
from project.lanes import Lane

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupPlan:
    """An organisation's plan on one lane, as the dispatcher's group: its
    key ("org:<id>"), weight, cap (None: none) and rate ((tokens per
    second, burst); None: none)."""

    key: str
    organisation_id: int
    name: str
    weight: float
    cap: int | None
    rate: tuple[float, float] | None


def _checked(organisation: Organisation) -> Organisation:
    """`organisation` with every plan value that breaks its bounds back at
    its default (on this instance only), as uploads.services does for a
    user's plan: one tenant's bad plan must not make an enqueue raise."""
    bad = plans.reset_invalid(organisation, Organisation.PLAN_FIELDS)
    if bad:
        log.warning("plan of organisation %s has invalid %s; the defaults are used instead", organisation.pk,
                    ", ".join(bad))
    return organisation


def plan_on(organisation: Organisation, lane: Lane) -> GroupPlan:
    """`organisation`'s plan on `lane`. On io-notify an organisation without
    a cap of its own gets NOTIFY_USER_CAP, as a user does: what bounds one
    person's slow endpoints bounds one tenant's."""
    o = _checked(organisation)
    if lane is Lane.IO_NOTIFY:
        weight, cap, rate, burst = o.notify_weight, o.notify_cap or settings.NOTIFY_USER_CAP, o.notify_rate_per_s, \
            o.notify_burst
    else:
        weight, cap, rate, burst = o.transcode_weight, o.transcode_cap, o.transcode_rate_per_s, o.transcode_burst
    return GroupPlan(key=fair_key(o.pk), organisation_id=o.pk, name=o.name, weight=weight, cap=cap,
                     rate=(rate, float(burst)) if rate is not None else None)


def member_plans(*, user_ids: Iterable[int], lane: Lane,
                 related: tuple[str, ...] = ()) -> dict[int, tuple[Membership, GroupPlan]]:
    """Each user's membership and their organisation's plan on `lane`, in
    one query; a user with no membership (made around the signal, e.g. by
    bulk_create) is left out, and the caller treats the user as a group of
    their own. `related`: more select_related paths from the membership,
    read in the same query (uploads.services.fair_policies reads the
    user's own plan so: one round trip for both, on every submit)."""
    ids = set(user_ids)
    if not ids:
        return {}
    plans_by_org: dict[int, GroupPlan] = {}
    out = {}
    for membership in Membership.objects.filter(user_id__in=ids).select_related("organisation", *related):
        org = membership.organisation
        if org.pk not in plans_by_org:
            plans_by_org[org.pk] = plan_on(org, lane)
        out[membership.user_id] = (membership, plans_by_org[org.pk])
    return out


def lane_plans(*, user_ids: Iterable[int], lane: Lane) -> dict[int, GroupPlan]:
    """Each user's organisation's plan on `lane` (member_plans)."""
    return {user_id: plan for user_id, (_, plan) in member_plans(user_ids=user_ids, lane=lane).items()}


@dataclass(frozen=True)
class Belonging:
    """Which organisation a user is in, for pages, labels and the API."""

    organisation_id: int
    key: str
    name: str


def organisation_names(*, keys: Iterable[str]) -> dict[str, str]:
    """The names of the organisations whose group keys ("org:<id>") are
    given, in one query; other keys are left out (Flower's labels)."""
    ids = {int(k[4:]) for k in keys if k.startswith("org:") and k[4:].isdigit()}
    if not ids:
        return {}
    return {fair_key(pk): name for pk, name in Organisation.objects.filter(pk__in=ids).values_list("pk", "name")}


def organisations_of(*, user_ids: Iterable[int]) -> dict[int, Belonging]:
    """Each user's organisation (users without one left out), in one query."""
    ids = set(user_ids)
    if not ids:
        return {}
    rows = Membership.objects.filter(user_id__in=ids).values_list("user_id", "organisation_id", "organisation__name")
    return {user_id: Belonging(org_id, fair_key(org_id), name) for user_id, org_id, name in rows}
