"""Batches get a row of their own (the batch API lists them by an index), made
for every batch that exists already; uploads an index for their list; and
the Idempotency-Key answers."""

import django.db.models.deletion
import django.utils.timezone
import uuid
from django.conf import settings
from django.db import migrations, models
from django.db.models import Min


def batches_from_uploads(apps, schema_editor):
    """One Batch per (owner, batch) the uploads name, dated by its first upload."""
    Batch, Upload = apps.get_model("uploads", "Batch"), apps.get_model("uploads", "Upload")
    rows = Upload.objects.values("owner_id", "batch").annotate(first=Min("created_at")).order_by()
    Batch.objects.bulk_create(
        (Batch(id=row["batch"], owner_id=row["owner_id"], created_at=row["first"]) for row in rows.iterator()),
        batch_size=1000, ignore_conflicts=True,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('uploads', '0007_attempt_task_id_and_budget'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Batch',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='batches', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at'],
                'indexes': [models.Index(fields=['owner', '-created_at'], name='uploads_bat_owner_i_d138ae_idx')],
            },
        ),
        migrations.CreateModel(
            name='IdempotencyKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('scope', models.CharField(help_text='The endpoint (URL name) the key was used on.', max_length=64)),
                ('key', models.CharField(max_length=255)),
                ('request_hash', models.CharField(help_text='SHA-256 of what the request asked for.', max_length=64)),
                ('status_code', models.PositiveSmallIntegerField()),
                ('response_body', models.JSONField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('expires_at', models.DateTimeField(db_index=True)),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='idempotency_keys', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('owner', 'scope', 'key'), name='idempotency_key_unique')],
            },
        ),
        migrations.AddIndex(
            model_name='upload',
            index=models.Index(fields=['owner', '-created_at'], name='uploads_upl_owner_i_747099_idx'),
        ),
        migrations.RunPython(batches_from_uploads, migrations.RunPython.noop),
    ]
