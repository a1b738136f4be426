from django.contrib import admin, messages

from notify import services
from notify.models import ChannelPreference, Delivery, DeliveryAttempt, Endpoint, Event, JobEnding
from uploads.admin_records import RecordAdmin, RecordInline, compact_time, created, cut, short_id
from uploads.errors import ApplicationError


class AttemptInline(RecordInline):
    model = DeliveryAttempt
    fields = ["number", "started_at", "status_code", "latency_ms", "outcome", "error", "response_prefix",
              "next_attempt_at"]
    readonly_fields = fields


@admin.register(Delivery)
class DeliveryAdmin(RecordAdmin):
    # What fits 1,366 px beside the side bars: the channel is a filter (the
    # target says which), when a pending one tries next is on its page.
    list_display = ["delivery", "event_type", "target", "status", "tries", "answer", created]
    list_display_links = ["delivery"]
    list_filter = ["status", "channel", "event__type", "created_at"]
    search_fields = ["^id", "recipient", "endpoint__url", "event__owner__username", "event__key"]
    readonly_fields = [f.name for f in Delivery._meta.fields]
    list_select_related = ["event", "endpoint"]
    inlines = [AttemptInline]
    actions = ["replay"]
    object_actions = {"replay": "Replay"}

    def object_action_allowed(self, delivery: Delivery, name: str) -> bool:
        return delivery.status in services.REPLAYABLE

    @admin.display(description="delivery", ordering="id")
    def delivery(self, delivery: Delivery) -> str:
        return short_id(delivery.id)

    @admin.display(description="event")
    def event_type(self, delivery: Delivery) -> str:
        return delivery.event.type

    @admin.display(description="to")
    def target(self, delivery: Delivery) -> str:
        return cut(delivery.endpoint.url if delivery.endpoint_id else delivery.recipient, 22)

    @admin.display(description="tries", ordering="attempts")
    def tries(self, delivery: Delivery) -> int:
        return delivery.attempts

    @admin.display(description="answer", ordering="last_status_code")
    def answer(self, delivery: Delivery) -> str:
        """The receiver's last HTTP status; an email's is none."""
        return str(delivery.last_status_code or "–")

    def has_replay_permission(self, request) -> bool:
        return request.user.has_perm("notify.replay_delivery")

    @admin.action(description="Replay selected deliveries", permissions=["replay"])
    def replay(self, request, queryset):
        """Each a new delivery of the same event to the same target, through
        the io-notify lane's fair dispatch (notify.services.delivery_replay);
        those still under way, or to a disabled endpoint, are left alone
        with the reason."""
        replayed, refused = 0, {}
        for delivery in queryset.select_related("event", "endpoint"):
            try:
                replay = services.delivery_replay(delivery=delivery, actor=request.user)
            except ApplicationError as exc:
                refused.setdefault(exc.message, []).append(short_id(delivery.id))
                continue
            replayed += 1
            self.log_change(request, delivery, f"Replayed from the admin as delivery {replay.id}.")
        if replayed:
            self.message_user(request, f"Replaying {replayed} deliver{'y' if replayed == 1 else 'ies'}.",
                              messages.SUCCESS)
        for reason, ids in refused.items():
            self.message_user(request, f"Left alone ({', '.join(ids)}): {reason}", messages.WARNING)


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    change_list_template = "admin/compact_change_list.html"
    list_display = ["address", "owner", "active", "failing", "rate", "burst", created]
    list_filter = ["is_active", "created_at"]
    search_fields = ["url", "owner__username", "id"]
    # The signing secret is shown to its owner once, at registration, and to
    # nobody else: staff see that there is one, never what it is.
    exclude = ["secret"]
    readonly_fields = ["id", "owner", "failure_streak", "failing_since", "disabled_at", "created_at"]
    actions = ["enable"]

    @admin.display(description="URL", ordering="url")
    def address(self, endpoint: Endpoint) -> str:
        return cut(endpoint.url, 28)

    @admin.display(description="active", boolean=True, ordering="is_active")
    def active(self, endpoint: Endpoint) -> bool:
        return endpoint.is_active

    @admin.display(description="failed in a row", ordering="failure_streak")
    def failing(self, endpoint: Endpoint) -> int:
        return endpoint.failure_streak

    @admin.display(description="rate / s", ordering="rate_per_s")
    def rate(self, endpoint: Endpoint) -> str:
        return "default" if endpoint.rate_per_s is None else f"{endpoint.rate_per_s:g}"

    @admin.action(description="Re-enable selected endpoints", permissions=["change"])
    def enable(self, request, queryset):
        count = services.endpoint_enable(endpoint_ids=list(queryset.values_list("id", flat=True)), actor=request.user)
        self.message_user(request, f"{count} endpoint(s) re-enabled.", messages.SUCCESS)


@admin.register(Event)
class EventAdmin(RecordAdmin):
    list_display = ["type", "owner", "event_key", created]
    list_filter = ["type", "created_at"]
    search_fields = ["key", "owner__username", "id", "job_id", "batch"]
    readonly_fields = [f.name for f in Event._meta.fields]

    @admin.display(description="key", ordering="key")
    def event_key(self, event: Event) -> str:
        return cut(event.key, 48)


@admin.register(JobEnding)
class JobEndingAdmin(RecordAdmin):
    """Job endings whose events could not be made (given up after
    NOTIFY_MAX_ATTEMPTS tries), and those being made right now."""

    list_display = ["job", "job_status", "status", "tries", "error_code", "given_up", "finished"]
    list_filter = ["status", "error_code"]
    search_fields = ["job_id", "error_code"]
    readonly_fields = [f.name for f in JobEnding._meta.fields]

    @admin.display(description="job", ordering="job_id")
    def job(self, ending: JobEnding) -> str:
        return short_id(ending.job_id)

    @admin.display(description="given up", ordering="given_up_at")
    def given_up(self, ending: JobEnding) -> str:
        return compact_time(ending.given_up_at)

    @admin.display(description="job finished", ordering="finished_at")
    def finished(self, ending: JobEnding) -> str:
        return compact_time(ending.finished_at)


@admin.register(ChannelPreference)
class ChannelPreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", "channel", "events"]
    search_fields = ["user__username"]
