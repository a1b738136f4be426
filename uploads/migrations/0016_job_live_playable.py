"""A video's segments stored while it encodes (Job.live) and when it first
became playable (Job.playable_at): transcoding/live.py, uploads/live.py."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("uploads", "0015_plan_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="live",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="job",
            name="playable_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
