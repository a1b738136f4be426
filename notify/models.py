"""Notifications: what happened (Event), to whom it goes (Delivery, one per
channel target) and every try (DeliveryAttempt); webhook endpoints and each
user's choice of events per channel.

Job and batch ids are plain UUIDs, not foreign keys: an event outlives
nothing it describes, and this app's schema does not depend on the uploads
app's migrations.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from project import plans


class ChannelPreference(models.Model):
    """Which events a user receives on a channel; no row means the channel's
    defaults (settings.NOTIFY_DEFAULT_EVENTS)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_preferences")
    channel = models.CharField(max_length=16)
    events = models.JSONField(default=list)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "channel"], name="preference_unique_channel")]

    def __str__(self) -> str:
        return f"{self.channel} preferences of {self.user}"


class Endpoint(models.Model):
    """A webhook receiver. The secret signs every delivery; it is shown to the
    owner once, at registration, and kept to sign with."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list)
    secret = models.CharField(max_length=128)
    is_active = models.BooleanField(default=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=255, blank=True)
    # Bounds and why: project/plans.py (a rate <= 0 meant "no limit" without a word).
    rate_per_s = models.FloatField(null=True, blank=True, validators=plans.bounded(plans.RATE_MIN, plans.RATE_MAX,
                                                                                   finite=True),
                                   help_text="Deliveries per second (empty: the default).")
    burst = models.PositiveIntegerField(null=True, blank=True, validators=plans.bounded(plans.BURST_MIN, plans.BURST_MAX),
                                        help_text="Burst above the rate (empty: the default).")
    # Failed attempts in a row and when the streak began (disabling rule).
    failure_streak = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=plans.in_range("rate_per_s", plans.RATE_MIN, plans.RATE_MAX,
                                                            nullable=True), name="endpoint_rate_in_range"),
            models.CheckConstraint(condition=plans.in_range("burst", plans.BURST_MIN, plans.BURST_MAX, nullable=True),
                                   name="endpoint_burst_in_range"),
        ]

    def __str__(self) -> str:
        return self.url


class Event(models.Model):
    """Something a user may be told about, with the payload every channel
    renders. `key` makes creating it idempotent (a redelivered task, two
    jobs of a batch ending at once)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_events")
    type = models.CharField(max_length=32)
    key = models.CharField(max_length=128, unique=True)
    job_id = models.UUIDField(null=True, blank=True, db_index=True)
    batch = models.UUIDField(null=True, blank=True, db_index=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.type} {self.key}"

    @property
    def webhook_id(self) -> str:
        """Standard Webhooks `webhook-id`: the same for every try, so receivers de-duplicate."""
        return f"msg_{self.id.hex}"


class Delivery(models.Model):
    """One event to one target (an email address or an endpoint), tried
    until it succeeds or is given up. `seq` numbers its scheduled tries: the
    task of try n carries n, so a stale or duplicated message finds nothing
    to claim."""

    class Status(models.TextChoices):
        PENDING = "pending"  # waiting for its next try
        SENDING = "sending"  # claimed by a worker until lease_until
        SUCCEEDED = "succeeded"
        FAILED = "failed"  # given up, or refused without retry
        CANCELED = "canceled"  # its endpoint was disabled or deleted

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=16)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries")
    recipient = models.CharField(max_length=255, blank=True, help_text="Email address (email channel).")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    seq = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # A replay (notify.services.delivery_replay) is a delivery of its own:
    # the same event to the same target again, with its own tries, while
    # the delivery it replays keeps its log. Publishing still makes one
    # delivery per event and target: the constraints count originals only.
    replay_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="replays")

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at"]
        permissions = [("replay_delivery", "Can replay finished deliveries")]
        constraints = [
            models.UniqueConstraint(fields=["event", "endpoint"], name="delivery_once_per_endpoint",
                                    condition=models.Q(endpoint__isnull=False, replay_of__isnull=True)),
            models.UniqueConstraint(fields=["event", "channel"], name="delivery_once_per_email",
                                    condition=models.Q(channel="email", replay_of__isnull=True)),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event.type} by {self.channel} to {self.endpoint or self.recipient}"


class DeliveryAttempt(models.Model):
    """One try: what the receiver answered (status, a prefix of the body) or
    why it could not be reached, and how long it took."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        RETRY = "retry"  # another try is scheduled
        FAILED = "failed"  # no more tries

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    response_prefix = models.TextField(blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"


class JobEnding(models.Model):
    """Turning one job's ending into its events (the `notify.job_finished`
    task, notify.services.job_event_process). Every try is counted before
    it runs, so that an ending whose task fails every time (a bug, a row no
    code expected) is given up after NOTIFY_MAX_ATTEMPTS tries, failed with
    its error's code, instead of being re-submitted by the reconciler every
    FAIR_RECONCILE_S forever. A row lives while its ending is being
    processed and goes when it succeeds; one given up stays, for operators
    (the admin lists them)."""

    class Status(models.TextChoices):
        PENDING = "pending"  # being processed (tried `tries` times so far)
        FAILED = "failed"  # given up: the job's owner hears nothing of this ending

    job_id = models.UUIDField()  # indexed by the constraint below
    # Which ending: a retried job that ends again is another one.
    finished_at = models.DateTimeField()
    job_status = models.CharField(max_length=16, help_text="How the job ended.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    tries = models.PositiveIntegerField(default=0)
    error_code = models.CharField(max_length=64, blank=True, help_text="The last try's error.")
    error_message = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    given_up_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["job_id", "finished_at"], name="job_ending_once")]

    def __str__(self) -> str:
        return f"{self.job_status} ending of job {self.job_id}"
