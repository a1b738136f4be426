"""The job table's indexes on owner and on status alone go: the Meta indexes
led by each serve their lookups (tests/uploads/test_job_indexes.py).

The owner's is dropped by name, not through Django's AlterField, which would
drop and add back the foreign key and so check every row under a lock."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('uploads', '0019_job_batch_for_every_upload_job'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AlterField(
                model_name='job',
                name='owner',
                field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                        related_name='jobs', to=settings.AUTH_USER_MODEL),
            )],
            database_operations=[migrations.RunSQL(
                'DROP INDEX IF EXISTS "uploads_job_owner_id_4db2fbe0"',
                reverse_sql='CREATE INDEX IF NOT EXISTS "uploads_job_owner_id_4db2fbe0" ON "uploads_job" ("owner_id")',
            )],
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'),
                                            ('failed', 'Failed'), ('canceled', 'Canceled')],
                                   default='queued', max_length=16),
        ),
    ]
