# Every user who exists now gets an organisation of one, named after them,
# whose plan is a copy of theirs (uploads.Profile, or the defaults), so the
# two-level dispatcher shares the lanes between them exactly as the flat one
# did: a user's share of a lane is (organisation weight / the busy
# organisations' weights) x (their weight / their organisation's busy
# members' weights), and with one member the second factor is 1. Caps and
# rates are copied to both levels and bind together.
#
# In pages of 1,000 users, bulk inserts: a few seconds per 100,000 users.
# A user made while this runs gets theirs from the post_save receiver
# (organisations/apps.py); one that both reach is skipped here.

from django.conf import settings
from django.db import migrations

PAGE = 1000
PLAN_COPY = {  # organisation field <- profile field
    "transcode_weight": "weight", "transcode_cap": "transcode_cap",
    "notify_weight": "weight", "notify_cap": "notify_cap", "notify_rate_per_s": "notify_rate_per_s",
    "notify_burst": "notify_burst",
}


def organisations_of_one(apps, schema_editor):
    User = apps.get_model(settings.AUTH_USER_MODEL)
    Profile = apps.get_model("uploads", "Profile")
    Organisation = apps.get_model("organisations", "Organisation")
    Membership = apps.get_model("organisations", "Membership")
    last = 0
    while True:
        users = list(User.objects.filter(pk__gt=last, membership__isnull=True).order_by("pk")
                     .values_list("pk", "username")[:PAGE])
        if not users:
            return
        last = users[-1][0]
        profiles = {p["user_id"]: p for p in Profile.objects.filter(user_id__in=[pk for pk, _ in users])
                    .values("user_id", *set(PLAN_COPY.values()))}
        organisations = Organisation.objects.bulk_create([
            Organisation(name=username, **({field: profiles[pk][source] for field, source in PLAN_COPY.items()}
                                           if pk in profiles else {}))
            for pk, username in users])
        Membership.objects.bulk_create([Membership(user_id=pk, organisation_id=org.pk)
                                        for (pk, _), org in zip(users, organisations)], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ("organisations", "0001_initial"),
        ("uploads", "0015_plan_limits"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(organisations_of_one, migrations.RunPython.noop)]
