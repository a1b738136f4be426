"""Organisations: who shares the workers as one tenant.

The fair dispatcher shares each lane between organisations first, by their
plan's weight on that lane, then between an organisation's members by their
own plan's weight (uploads.Profile), so a tenant with 50 seats gets one
organisation's share, not 50 (docs/fairness.md). Every user belongs to
exactly one organisation (Membership.user is unique); a user nobody put in
one has an organisation of one, made when the user is (or, for users that
existed before organisations, by migration 0002, which copied each user's
plan into it so that nothing changed for them).
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from project import plans


def _weight(lane: str) -> models.FloatField:
    return models.FloatField(
        default=1.0, validators=plans.bounded(plans.WEIGHT_MIN, plans.WEIGHT_MAX, finite=True),
        help_text=f"The organisation's share of {lane}'s worker time relative to other organisations "
                  f"({plans.WEIGHT_MIN:g} to {plans.WEIGHT_MAX:g}; 1 is the default). Its members share it by "
                  f"their own weights.")


def _cap(help_text: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(null=True, blank=True, validators=plans.bounded(plans.CAP_MIN, plans.CAP_MAX),
                                       help_text=help_text)


def _rate(lane: str) -> models.FloatField:
    return models.FloatField(null=True, blank=True,
                             validators=plans.bounded(plans.RATE_MIN, plans.RATE_MAX, finite=True),
                             help_text=f"Most {lane} jobs of all its members started per second (empty: no limit).")


def _burst() -> models.PositiveIntegerField:
    return models.PositiveIntegerField(default=10, validators=plans.bounded(plans.BURST_MIN, plans.BURST_MAX),
                                       help_text="Burst allowed above the rate.")


class Organisation(models.Model):
    """A tenant and its plan on each lane: weight, concurrency cap and rate
    limit, for all its members together. Bounds as a user's plan
    (project/plans.py), checked where edited (validators, constraints) and
    again where used (selectors.lane_plans)."""

    name = models.CharField(max_length=150, help_text="As people know it (not unique: an organisation of one is "
                                                      "named after its user).")
    created_at = models.DateTimeField(default=timezone.now)

    transcode_weight = _weight("cpu-transcode")
    transcode_cap = _cap("Most cpu-transcode jobs of all its members in flight at once (empty: no cap).")
    transcode_rate_per_s = _rate("cpu-transcode")
    transcode_burst = _burst()
    notify_weight = _weight("io-notify")
    notify_cap = _cap("Most io-notify jobs of all its members in flight at once (empty: the default, "
                      "NOTIFY_USER_CAP: one tenant's slow endpoints cannot hold every io thread).")
    notify_rate_per_s = _rate("io-notify")
    notify_burst = _burst()

    # The plan, per lane (admin fieldsets, selectors.lane_plans).
    TRANSCODE_FIELDS = ("transcode_weight", "transcode_cap", "transcode_rate_per_s", "transcode_burst")
    NOTIFY_FIELDS = ("notify_weight", "notify_cap", "notify_rate_per_s", "notify_burst")
    PLAN_FIELDS = TRANSCODE_FIELDS + NOTIFY_FIELDS

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            *(models.CheckConstraint(condition=plans.in_range(f"{lane}_weight", plans.WEIGHT_MIN, plans.WEIGHT_MAX),
                                     name=f"organisation_{lane}_weight_in_range") for lane in ("transcode", "notify")),
            *(models.CheckConstraint(condition=plans.in_range(f"{lane}_cap", plans.CAP_MIN, plans.CAP_MAX,
                                                              nullable=True),
                                     name=f"organisation_{lane}_cap_in_range") for lane in ("transcode", "notify")),
            *(models.CheckConstraint(condition=plans.in_range(f"{lane}_rate_per_s", plans.RATE_MIN, plans.RATE_MAX,
                                                              nullable=True),
                                     name=f"organisation_{lane}_rate_in_range") for lane in ("transcode", "notify")),
            *(models.CheckConstraint(condition=plans.in_range(f"{lane}_burst", plans.BURST_MIN, plans.BURST_MAX),
                                     name=f"organisation_{lane}_burst_in_range") for lane in ("transcode", "notify")),
        ]
        indexes = [models.Index(fields=["name"])]

    def __str__(self) -> str:
        return self.name

    @property
    def fair_key(self) -> str:
        """Its fairness key on every lane (the dispatcher's group)."""
        return fair_key(self.pk)


def fair_key(organisation_id: int) -> str:
    """The dispatcher's group of an organisation: "org:<id>", never a value a
    client sends (the membership is read from the database)."""
    return f"org:{organisation_id}"


class Membership(models.Model):
    """A user's one organisation. The user's own plan (uploads.Profile)
    stays theirs: its weight is their share within the organisation, its
    caps and rates bound them alone."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    # PROTECT: an organisation with members cannot vanish from under them;
    # move them first (admin: Users > "Move to an organisation").
    organisation = models.ForeignKey(Organisation, on_delete=models.PROTECT, related_name="memberships")
    joined_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["organisation", "user"]

    def __str__(self) -> str:
        return f"{self.user} in {self.organisation}"
