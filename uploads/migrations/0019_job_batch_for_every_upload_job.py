"""Every upload job carries its upload's batch (Job.batch), copied once
here for the jobs made before: one UPDATE of the table, then the index that
finds a batch's unfinished jobs. No constraint: a web process of the
version before, still running while the new one rolls out, makes upload jobs
without it (notify.services.batch_summary_publish reads those through their
upload)."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('uploads', '0018_job_rate_key'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # A correlated subquery: the same SQL on PostgreSQL and SQLite.
        migrations.RunSQL(
            "UPDATE uploads_job SET batch = (SELECT u.batch FROM uploads_upload u WHERE u.id = uploads_job.upload_id)"
            " WHERE upload_id IS NOT NULL AND batch IS NULL",
            reverse_sql=migrations.RunSQL.noop, elidable=True),
        migrations.AlterField(
            model_name='job',
            name='batch',
            field=models.UUIDField(blank=True, help_text="Its upload's batch; for an export job, the batch it exports.", null=True),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', ('queued', 'running')), ('upload__isnull', False)), fields=['batch'], name='job_batch_unfinished_idx'),
        ),
    ]
