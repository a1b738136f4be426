"""The bounds of a fair-share plan: a user's (uploads.Profile: weight, caps,
notify rate, and the per-user limits of uploads/limits.py) and a webhook
endpoint's rate limit (notify.Endpoint).

Checked where plans are edited (these validators, which the admin's forms
run, and database constraints built from the same bounds) and again where
they are used (uploads.services.fair_policies, notify.services): a bad value
stored anyway (before the constraints existed, or written around them) falls
back to its default with a warning instead of raising on an enqueue.

Why these bounds:
- weight in [0.01, 100]. Releasing a job moves the lane's virtual clock to
  the user's virtual time + cost / weight. A weight of 1e-300 moves it by
  1e300 at once; every other user's charge is then lost to rounding
  (V + 0.05 == V) and fairness is gone for good, since V never goes back.
  A ratio of 10,000 between the heaviest and the lightest plan is more than
  any tier needs, and keeps charges far from that.
- caps >= 1, or empty for none: the dispatcher reads 0 as "no cap", a
  person as "nothing may run".
- rates in [0.01, 10,000] per second and bursts in [1, 10,000]: the
  dispatcher refuses a rate <= 0 or a burst < 1 (a ValueError on every
  enqueue, which aborted the reconcilers for every row after it).
- every float finite: NaN passes every comparison's "not less than".
- limits (uploads/limits.py) >= 1, or empty for the setting's default: 0
  would shut the user out of what it bounds, which is a ban, not a plan.
  Their highest values keep one user's share of what everyone shares
  small: a million queued or scheduled jobs is about 2 GiB of the
  dispatcher's Redis (~2.1 KB each); 1,000 webhook endpoints make 1,000
  deliveries of every event; 100,000 uploads and 1 TiB in progress; an API
  rate of 100,000 a minute is more than one web host serves.
"""
from __future__ import annotations

import math

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Model, Q

WEIGHT_MIN, WEIGHT_MAX = 0.01, 100.0
RATE_MIN, RATE_MAX = 0.01, 10_000.0
BURST_MIN, BURST_MAX = 1, 10_000
CAP_MIN, CAP_MAX = 1, 10_000
QUEUED_JOBS_MIN, QUEUED_JOBS_MAX = 1, 1_000_000
ENDPOINTS_MIN, ENDPOINTS_MAX = 1, 1_000
PENDING_UPLOADS_MIN, PENDING_UPLOADS_MAX = 1, 100_000
PENDING_BYTES_MIN, PENDING_BYTES_MAX = 1, 1024**4
API_RATE_MIN, API_RATE_MAX = 1, 100_000  # requests a minute
API_SECONDS_MIN, API_SECONDS_MAX = 1, 6_000  # seconds of requests in progress a minute (100 threads' worth)


def validate_finite(value: float) -> None:
    if not math.isfinite(value):
        raise ValidationError("Enter a finite number.", code="not_finite")


def bounded(low: float, high: float, *, finite: bool = False) -> list:
    """Field validators for a value in [low, high]."""
    return [*([validate_finite] if finite else []), MinValueValidator(low), MaxValueValidator(high)]


def in_range(field: str, low: float, high: float, *, nullable: bool = False) -> Q:
    """The database constraint for the same range (NaN fails it in PostgreSQL:
    NaN sorts above every number there)."""
    inside = Q(**{f"{field}__gte": low, f"{field}__lte": high})
    return Q(**{f"{field}__isnull": True}) | inside if nullable else inside


def reset_invalid(instance: Model, fields: Iterable[str]) -> list[str]:
    """Where used: put each of `fields` whose value breaks its validators back
    to the field's default, on this instance only (nothing is saved);
    returns their names, for the caller's warning."""
    fields = set(fields)
    try:
        instance.clean_fields(exclude=[f.name for f in instance._meta.fields if f.name not in fields])
    except ValidationError as exc:
        for name in exc.error_dict:
            setattr(instance, name, instance._meta.get_field(name).get_default())
        return sorted(exc.error_dict)
    return []
