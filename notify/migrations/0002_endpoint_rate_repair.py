"""Repair endpoint rate limits that break the bounds 0003 enforces
(project/plans.py), so that its constraints can be added: a rate of 0 or
less (which meant "no limit" without a word) becomes empty, the default;
a burst of 0 (which worked as 1) becomes 1; others are brought within the
bounds. The numbers are written out: a migration must do tomorrow what it
does today."""
import math

from django.db import migrations

RATE_MIN, RATE_MAX = 0.01, 10_000.0
BURST_MAX = 10_000


def repair(apps, schema_editor):
    Endpoint = apps.get_model("notify", "Endpoint")
    for endpoint in Endpoint.objects.exclude(rate_per_s__isnull=True, burst__isnull=True):
        rate, burst = endpoint.rate_per_s, endpoint.burst
        if rate is not None:
            rate = min(max(rate, RATE_MIN), RATE_MAX) if math.isfinite(rate) and rate > 0 else None
        if burst is not None:
            burst = min(max(burst, 1), BURST_MAX)
        if (rate, burst) != (endpoint.rate_per_s, endpoint.burst):
            Endpoint.objects.filter(pk=endpoint.pk).update(rate_per_s=rate, burst=burst)


class Migration(migrations.Migration):

    dependencies = [
        ("notify", "0001_initial"),
    ]

    operations = [migrations.RunPython(repair, migrations.RunPython.noop)]
