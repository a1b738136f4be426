"""Repair plans that break the bounds 0008 enforces (project/plans.py), so
that its constraints can be added, keeping what each value meant to the
dispatcher: a cap of 0 meant no cap and a rate of 0 no limit (both become
empty); a negative rate or a burst of 0 raised on every enqueue (empty rate,
default burst); a weight outside [0.01, 100] is brought to the nearest bound,
one that is not a number to the default. The numbers are written out: a
migration must do tomorrow what it does today."""
import math

from django.db import migrations

WEIGHT_MIN, WEIGHT_MAX = 0.01, 100.0
RATE_MIN, RATE_MAX = 0.01, 10_000.0
LIMIT_MAX = 10_000  # caps and bursts
BURST_DEFAULT = 10


def _cap(value):
    return None if value is None or value < 1 else min(value, LIMIT_MAX)


def _rate(value):
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return min(max(value, RATE_MIN), RATE_MAX)


def repair(apps, schema_editor):
    Profile = apps.get_model("uploads", "Profile")
    for plan in Profile.objects.all():
        fixed = {
            "weight": min(max(plan.weight, WEIGHT_MIN), WEIGHT_MAX) if math.isfinite(plan.weight) else 1.0,
            "transcode_cap": _cap(plan.transcode_cap),
            "notify_cap": _cap(plan.notify_cap),
            "notify_rate_per_s": _rate(plan.notify_rate_per_s),
            "notify_burst": min(plan.notify_burst, LIMIT_MAX) if plan.notify_burst >= 1 else BURST_DEFAULT,
        }
        if any(getattr(plan, name) != value for name, value in fixed.items()):
            Profile.objects.filter(pk=plan.pk).update(**fixed)


class Migration(migrations.Migration):

    dependencies = [
        ("uploads", "0008_api_batches_idempotency"),
    ]

    operations = [migrations.RunPython(repair, migrations.RunPython.noop)]
