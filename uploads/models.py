"""Uploads, the jobs that process them, their outputs and notifications.

The Job row is the source of truth for a job's life: the fair dispatcher's
Redis state and Celery's messages can be rebuilt from it. Status changes go
through the guarded services in uploads/services.py, never through save().
"""
from __future__ import annotations

import posixpath
import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from project import plans

import media


def upload_path(instance: "Upload", filename: str) -> str:
    # The client's filename never reaches the store: a generated key under a
    # per-user prefix, so nothing about it is guessable or injectable.
    return media.upload_key(owner_id=instance.owner_id)


# A plan's limits on what users share (uploads/limits.py), with their bounds (project/plans.py).
PLAN_LIMITS = {
    "max_queued_jobs": (plans.QUEUED_JOBS_MIN, plans.QUEUED_JOBS_MAX),
    "max_webhook_endpoints": (plans.ENDPOINTS_MIN, plans.ENDPOINTS_MAX),
    "max_pending_uploads": (plans.PENDING_UPLOADS_MIN, plans.PENDING_UPLOADS_MAX),
    "max_pending_bytes": (plans.PENDING_BYTES_MIN, plans.PENDING_BYTES_MAX),
    **dict.fromkeys(("api_reads_per_min", "api_writes_per_min", "api_uploads_per_min", "api_replays_per_min"),
                    (plans.API_RATE_MIN, plans.API_RATE_MAX)),
    "api_seconds_per_min": (plans.API_SECONDS_MIN, plans.API_SECONDS_MAX),
}


def _limit(name: str, help_text: str, *, big: bool = False) -> models.Field:
    """The plan's limit `name`: a whole number within its bounds, or empty for its default."""
    field = models.PositiveBigIntegerField if big else models.PositiveIntegerField
    return field(null=True, blank=True, validators=plans.bounded(*PLAN_LIMITS[name]), help_text=help_text)


class Profile(models.Model):
    """A user's plan: their share of the workers (as the fair dispatcher
    sees it) and their limits on what users share (uploads/limits.py). No
    row means the defaults. The bounds and why: project/plans.py."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="fair_profile")
    weight = models.FloatField(
        default=1.0, validators=plans.bounded(plans.WEIGHT_MIN, plans.WEIGHT_MAX, finite=True),
        help_text=f"Share of each lane's worker time relative to others ({plans.WEIGHT_MIN:g} to "
                  f"{plans.WEIGHT_MAX:g}; 1 is the default).")
    transcode_cap = models.PositiveIntegerField(
        null=True, blank=True, validators=plans.bounded(plans.CAP_MIN, plans.CAP_MAX),
        help_text="Most cpu-transcode jobs in flight at once (empty: no cap).",
    )
    notify_rate_per_s = models.FloatField(
        null=True, blank=True, validators=plans.bounded(plans.RATE_MIN, plans.RATE_MAX, finite=True),
        help_text="Most io-notify jobs started per second (empty: no limit).",
    )
    notify_burst = models.PositiveIntegerField(
        default=10, validators=plans.bounded(plans.BURST_MIN, plans.BURST_MAX),
        help_text="Burst allowed above the notify rate.")
    notify_cap = models.PositiveIntegerField(
        null=True, blank=True, validators=plans.bounded(plans.CAP_MIN, plans.CAP_MAX),
        help_text="Most io-notify jobs in flight at once (empty: the default, NOTIFY_USER_CAP).",
    )

    # The plan's per-user limits on what users share (uploads/limits.py,
    # which checks them again where used). Empty: the setting's default, as
    # it is when used, so changing a setting changes every plan that has
    # no value of its own.
    max_queued_jobs = _limit(
        "max_queued_jobs", "Most jobs queued, scheduled or running at once (empty: FAIRLANE_MAX_QUEUED_JOBS).")
    max_webhook_endpoints = _limit(
        "max_webhook_endpoints", "Most webhook endpoints (empty: NOTIFY_MAX_WEBHOOK_ENDPOINTS).")
    max_pending_uploads = _limit(
        "max_pending_uploads", "Most direct uploads in progress (empty: FAIRLANE_MAX_PENDING_UPLOADS).")
    max_pending_bytes = _limit(
        "max_pending_bytes", "Most bytes those uploads may hold (empty: FAIRLANE_MAX_USER_PENDING_BYTES).", big=True)
    api_reads_per_min = _limit(
        "api_reads_per_min", "API reads (GET) a minute (empty: FAIRLANE_API_READS_PER_MIN).")
    api_writes_per_min = _limit(
        "api_writes_per_min", "API writes (POST, PATCH, DELETE) a minute (empty: FAIRLANE_API_WRITES_PER_MIN).")
    api_uploads_per_min = _limit(
        "api_uploads_per_min", "API upload requests a minute: create, sign parts, complete, give up, claim "
        "(empty: FAIRLANE_API_UPLOADS_PER_MIN).")
    api_replays_per_min = _limit(
        "api_replays_per_min", "Webhook deliveries replayed a minute (empty: FAIRLANE_API_REPLAYS_PER_MIN).")
    api_seconds_per_min = _limit(
        "api_seconds_per_min", "Seconds the web spends on this user's API requests a minute, all of them "
        "together (empty: FAIRLANE_API_SECONDS_PER_MIN).")

    # The fields that make the plan (fair_policies checks them again where used).
    PLAN_FIELDS = ("weight", "transcode_cap", "notify_rate_per_s", "notify_burst", "notify_cap")
    # The limits (uploads/limits.py reads them), with their bounds.
    LIMITS = PLAN_LIMITS

    class Meta:
        constraints = [
            models.CheckConstraint(condition=plans.in_range("weight", plans.WEIGHT_MIN, plans.WEIGHT_MAX),
                                   name="profile_weight_in_range"),
            models.CheckConstraint(condition=plans.in_range("transcode_cap", plans.CAP_MIN, plans.CAP_MAX,
                                                            nullable=True), name="profile_transcode_cap_in_range"),
            models.CheckConstraint(condition=plans.in_range("notify_cap", plans.CAP_MIN, plans.CAP_MAX,
                                                            nullable=True), name="profile_notify_cap_in_range"),
            models.CheckConstraint(condition=plans.in_range("notify_rate_per_s", plans.RATE_MIN, plans.RATE_MAX,
                                                            nullable=True), name="profile_notify_rate_in_range"),
            models.CheckConstraint(condition=plans.in_range("notify_burst", plans.BURST_MIN, plans.BURST_MAX),
                                   name="profile_notify_burst_in_range"),
            *(models.CheckConstraint(condition=plans.in_range(field, low, high, nullable=True),
                                     name=f"profile_{field}_in_range") for field, (low, high) in PLAN_LIMITS.items()),
        ]

    def __str__(self) -> str:
        return f"plan of {self.user}"


class Batch(models.Model):
    """The files posted in one request: the unit of the batch summary email,
    of exports and of /api/batches/. `Upload.batch` and an export job's
    `Job.batch` hold its id as a plain UUID (the readers of those fields
    predate this table); this row gives a user's batches an order and an
    index, so listing them is O(page) instead of a GROUP BY over every
    upload the user ever made."""

    NAME_MAX_LENGTH = 200

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="batches")
    created_at = models.DateTimeField(default=timezone.now)
    # What people call it: given at upload or renamed (batch_rename), else
    # its first file's name and how many more, or its date (batch_default_name).
    name = models.CharField(max_length=NAME_MAX_LENGTH, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return self.name or f"batch {self.id}"

    @staticmethod
    def dated_name(at) -> str:
        """The name of a batch that has nothing better: its date."""
        return f"Batch of {timezone.localtime(at):%d %b %Y, %H:%M}"

    @property
    def display_name(self) -> str:
        """Its name; a row made without one (by hand, in a test) by its date."""
        return self.name or self.dated_name(self.created_at)


class Upload(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploads")
    # Files posted in one request form a batch (one summary notification later).
    batch = models.UUIDField(db_index=True)
    filename = models.CharField(max_length=255, help_text="As the client named it; display only.")
    file = models.FileField(upload_to=upload_path, max_length=255)
    size = models.BigIntegerField()
    client_content_type = models.CharField(max_length=255, blank=True, help_text="Untrusted; never used to decide.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        # /api/uploads/ pages by it (uploads/pagination.py).
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return self.filename


class Job(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELED = "canceled"

    class Kind(models.TextChoices):
        UNKNOWN = "unknown"  # until the probe has looked at the content
        VIDEO = "video"
        AUDIO = "audio"
        IMAGE = "image"
        PDF = "pdf"
        EXPORT = "export"  # a ZIP of a batch's outputs (exports/), not an upload

    class Part(models.TextChoices):
        """A long video's job is split into parts (transcoding/chunks.py):
        jobs of the same owner, dispatched fairly like any other, shown to
        the user as their parent job only."""
        NONE = "", "whole job"
        CHUNK = "chunk"  # a run of whole HLS segments of every rendition, video only
        AUDIO = "audio"  # the whole file's audio, one HLS audio rendition
        FINALIZE = "finalize"  # playlists and the MP4 remux, once the others are done

    TERMINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELED)
    UNFINISHED = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Null only for export jobs, which work on a whole batch (`batch`).
    upload = models.ForeignKey(Upload, on_delete=models.CASCADE, related_name="jobs", null=True, blank=True)
    # Its upload's batch, copied when the job is made (a job made with its
    # Upload takes it, see __init__), so that "has this batch ended?", which
    # every ending job asks, is one probe of job_batch_unfinished_idx: through
    # the upload it walked the owner's unfinished jobs of every other batch.
    # An export job's: the batch it exports. Null for a video's part jobs,
    # and for upload jobs that a web process of the version before 0019
    # made while this one rolled out (read through their upload).
    batch = models.UUIDField(null=True, blank=True,
                             help_text="Its upload's batch; for an export job, the batch it exports.")
    # No index of its own, nor on status: the Meta indexes led by each serve
    # their lookups, and every status change writes every index of this
    # table (tests/uploads/test_job_indexes.py).
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs",
                              db_index=False)
    # A part's job: the one the user sees. Parts have no upload of their own
    # (they read the parent's), so the user's lists and batches never count them.
    parent = models.ForeignKey("self", on_delete=models.CASCADE, related_name="parts", null=True, blank=True)
    part = models.CharField(max_length=16, choices=Part.choices, default=Part.NONE, blank=True)
    part_index = models.PositiveIntegerField(null=True, blank=True, help_text="A chunk's place, from 0.")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.UNKNOWN)
    lane = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    # Attempts numbered above this count toward FAIRLANE_MAX_ATTEMPTS: an
    # operator's (or owner's) retry sets it to `attempts`, a fresh budget.
    attempt_budget_from = models.PositiveIntegerField(default=0)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    task_id = models.CharField(max_length=64, blank=True, db_index=True)
    # Estimated worker seconds, charged by the fair dispatcher at release.
    cost_estimate = models.FloatField(default=1.0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # When the current attempt was (re)queued: wait_ms is measured from here.
    queued_at = models.DateTimeField(null=True, blank=True)
    # Not before this time: the fair dispatcher holds the job until it is due.
    scheduled_for = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    wait_ms = models.PositiveBigIntegerField(null=True, blank=True, help_text="Queued until started.")
    process_ms = models.PositiveBigIntegerField(null=True, blank=True, help_text="Started until finished.")
    media_info = models.JSONField(default=dict, blank=True, help_text="What the probe found.")
    # What its waiting work is priced at in the batch estimate (uploads/rates.py's
    # rate_of): the name's guess when created, the probe's key once recorded.
    # Null in rows from before it was kept; the estimate fills them once (rates.rate_keys_fill).
    rate_key = models.CharField(max_length=16, null=True, blank=True)
    rate_units = models.FloatField(null=True, blank=True)
    # The running attempt's lease: renewed by its worker every third of
    # FAIRLANE_JOB_LEASE_S. Once it has passed, the worker is presumed dead and
    # the job is offered again (uploads.attempts.jobs_recover_expired); the
    # attempt number is the fencing token that stops the old worker writing.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Long jobs (exports) save their progress here after each chunk, so that
    # the next attempt resumes instead of starting over.
    checkpoint = models.JSONField(default=dict, blank=True)
    # Set with the terminal state, in the same UPDATE; cleared once the notify
    # app has turned the ending into its events. The row is the outbox: when
    # the notify task was never submitted (Redis down at that moment) or lost,
    # notify.services.job_notifications_reconcile submits it again.
    notify_pending = models.BooleanField(default=False)
    # A video's segments stored so far by its running attempt, while it
    # encodes (transcoding/live.py): per track the [segment, seconds] every
    # rendition has, and the renditions. Written only by the attempt that
    # owns the job, emptied when an attempt starts; the web makes the
    # growing playlists from it (uploads/live.py).
    live = models.JSONField(default=dict, blank=True)
    # When the video first became playable (its first segments stored) in
    # this run of the job; a retry by a person starts it again. Set once,
    # with the job.playable event (uploads.lifecycle.job_playable).
    playable_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # (owner, -finished_at): what just ended, for the pages' "moving" view (selectors.jobs_moving).
        # (owner, status): a user's unfinished jobs, counted against their plan (uploads/limits.py) in
        # time that grows with their own jobs only.
        indexes = [models.Index(fields=["owner", "-created_at"]), models.Index(fields=["owner", "-finished_at"]),
                   models.Index(fields=["owner", "status"]),
                   models.Index(fields=["status", "lane"]),
                   models.Index(fields=["status", "lease_expires_at"]),
                   models.Index(fields=["finished_at"], condition=models.Q(notify_pending=True),
                                name="job_notify_pending_idx"),
                   models.Index(fields=["batch"], name="job_batch_unfinished_idx",
                                condition=models.Q(upload__isnull=False, status__in=("queued", "running")))]
        constraints = [
            # Exactly one finalizer (and one audio job, one job per chunk) per
            # parent: the guarded transition that creates it can race, the row cannot.
            models.UniqueConstraint(fields=["parent", "part", "part_index"], name="job_part_unique",
                                    nulls_distinct=False, condition=models.Q(parent__isnull=False)),
        ]
        permissions = [
            ("retry_job", "Can retry failed or canceled jobs"),
            ("cancel_job", "Can cancel queued or running jobs"),
        ]

    def __init__(self, *args, **kwargs) -> None:
        """A job made with its Upload (Job(upload=...)) takes the upload's
        batch unless one is given. Rows read from the database come
        positionally and are left as stored (reading their `batch` here
        would load it, a query each, where a query deferred it)."""
        super().__init__(*args, **kwargs)
        upload = kwargs.get("upload")
        if isinstance(upload, Upload) and kwargs.get("batch") is None:
            self.batch = upload.batch

    def __str__(self) -> str:
        return f"{self.kind} job {self.id} ({self.status})"

    @property
    def title(self) -> str:
        """What a person calls this job: its file, or the batch it exports."""
        if self.parent_id:
            return f"{self.part} {'' if self.part_index is None else self.part_index} of {self.parent.title}"
        return self.upload.filename if self.upload_id else f"export of batch {self.batch}"

    @property
    def error(self) -> dict | None:
        return {"code": self.error_code, "message": self.error_message} if self.error_code else None


class JobAttempt(models.Model):
    """One run of a job by a worker: when, where, and how it ended."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=255, blank=True)
    # The Celery message that delivered it (`<job id>@<random>`): Flower, results.
    task_id = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # A terminal Job.Status; or "retry" (transient error, queued again after a
    # backoff), "lost" (its worker died or its lease ran out), "interrupted"
    # (its worker shut down and handed it back); "" while running.
    outcome = models.CharField(max_length=16, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="attempt_unique_number_per_job")]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.job_id}"


class Output(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="outputs")
    name = models.CharField(max_length=64)
    file = models.FileField(max_length=255)
    content_type = models.CharField(max_length=100)
    size = models.BigIntegerField()
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="output_unique_name_per_job")]

    def __str__(self) -> str:
        return f"{self.name} of {self.job_id}"

    @property
    def label(self) -> str:
        """The output's name as people read it (the page, the API's `label`)."""
        return OUTPUT_LABELS.get(self.name, self.name.replace("_", " "))

    @property
    def bundle_folder(self) -> str | None:
        """The folder (ending with "/") of an HLS output, which is a bundle:
        its master playlist names renditions and segments stored beside it
        by relative paths, so the output is every object under that folder
        (served by uploads/delivery.py, copied by exports). None for an
        output that is its one object."""
        if self.content_type != HLS_PLAYLIST:
            return None
        return posixpath.dirname(self.file.name) + "/"


HLS_PLAYLIST = "application/vnd.apple.mpegurl"

# Output names are for machines (`large_jpeg`); these are for people.
OUTPUT_LABELS = {
    "hls": "stream (HLS)", "mp4": "video (MP4)", "poster": "poster", "m4a": "audio (M4A)", "waveform": "waveform",
    "large": "large (WebP)", "medium": "medium (WebP)", "thumbnail": "thumbnail (WebP)", "large_jpeg": "large (JPEG)",
    "medium_jpeg": "medium (JPEG)", "thumbnail_jpeg": "thumbnail (JPEG)", "zip": "ZIP",
    "storyboard": "scrub previews (sprite)", "storyboard_vtt": "scrub previews (WebVTT)",
}


class IdempotencyKey(models.Model):
    """The first answer to a POST sent with an `Idempotency-Key` header, kept
    so that the same request sent again (a client retrying after a timeout)
    gets that answer instead of doing the work twice (uploads/idempotency.py).
    The row is written in the same transaction as the work it answers for, so
    a key either has its answer or does not exist."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idempotency_keys")
    scope = models.CharField(max_length=64, help_text="The endpoint (URL name) the key was used on.")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of what the request asked for.")
    status_code = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "scope", "key"], name="idempotency_key_unique")]

    def __str__(self) -> str:
        return f"{self.scope} {self.key!r} of user {self.owner_id}"


class DirectUpload(models.Model):
    """A file on its way into storage, part by part, straight from the
    client (uploads/direct.py): not a job yet. Its bytes go to the store
    under `key`, a multipart upload until completed, never through a web
    host that keeps them; any web host answers any request about it. Once
    claimed into a batch, `key` becomes its Upload's file (nothing is
    copied) and the row goes. An expired row stays a while as a tombstone,
    so that its URLs answer 410, not 404."""

    class State(models.TextChoices):
        OPEN = "open"  # parts may arrive
        COMPLETE = "complete"  # assembled in the store, waiting to be claimed
        EXPIRED = "expired"  # given up; its bytes are gone

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="direct_uploads")
    filename = models.CharField(max_length=255, help_text="As the client named it; display only.")
    content_type = models.CharField(max_length=255, blank=True, help_text="Untrusted; never used to decide.")
    size = models.BigIntegerField(null=True, blank=True,
                                  help_text="Declared at creation; null for a deferred length (known once complete).")
    part_size = models.PositiveIntegerField(help_text="Every part but the last is exactly this long.")
    key = models.CharField(max_length=255, unique=True, help_text="Where the bytes go (media.upload_key).")
    multipart_id = models.CharField(max_length=255, blank=True, help_text="The store's multipart upload id.")
    # A deferred length's parts, as their URLs were signed: {number: bytes}.
    # What a URL allows is all that can arrive, so their sum is what the
    # upload counts against its owner's budget before it is complete.
    signed = models.JSONField(default=dict, blank=True)
    signed_bytes = models.BigIntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The owner's uploads in progress (bounds), and the sweep by expiry.
        indexes = [models.Index(fields=["owner", "state"])]

    def __str__(self) -> str:
        return f"{self.filename} ({self.state})"
