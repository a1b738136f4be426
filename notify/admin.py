from django.contrib import admin, messages

from notify import services
from notify.models import ChannelPreference, Delivery, DeliveryAttempt, Endpoint, Event, JobEnding


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = ["number", "started_at", "status_code", "latency_ms", "outcome", "error", "response_prefix",
              "next_attempt_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "event_type", "channel", "target", "status", "attempts", "last_status_code",
                    "next_attempt_at", "created_at"]
    list_filter = ["status", "channel", "event__type", "created_at"]
    search_fields = ["id", "recipient", "endpoint__url", "event__owner__username", "event__key"]
    readonly_fields = [f.name for f in Delivery._meta.fields]
    list_select_related = ["event", "endpoint"]
    inlines = [AttemptInline]
    actions = ["resend"]

    @admin.display(description="event")
    def event_type(self, delivery: Delivery) -> str:
        return delivery.event.type

    @admin.display(description="to")
    def target(self, delivery: Delivery) -> str:
        return delivery.endpoint.url if delivery.endpoint_id else delivery.recipient

    @admin.action(description="Resend selected deliveries (finished ones; same webhook-id)")
    def resend(self, request, queryset):
        count = services.deliveries_resend(delivery_ids=list(queryset.values_list("id", flat=True)),
                                           actor=request.user)
        self.message_user(request, f"{count} delivery(ies) queued again; pending ones were left alone.",
                          messages.SUCCESS)

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "owner", "is_active", "failure_streak", "rate_per_s", "burst", "disabled_at",
                    "created_at"]
    list_filter = ["is_active", "created_at"]
    search_fields = ["url", "owner__username", "id"]
    # The signing secret is shown to its owner once, at registration, and to
    # nobody else: staff see that there is one, never what it is.
    exclude = ["secret"]
    readonly_fields = ["id", "owner", "failure_streak", "failing_since", "disabled_at", "created_at"]
    actions = ["enable"]

    @admin.action(description="Re-enable selected endpoints")
    def enable(self, request, queryset):
        count = services.endpoint_enable(endpoint_ids=list(queryset.values_list("id", flat=True)), actor=request.user)
        self.message_user(request, f"{count} endpoint(s) re-enabled.", messages.SUCCESS)


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["type", "owner", "key", "created_at"]
    list_filter = ["type", "created_at"]
    search_fields = ["key", "owner__username", "id", "job_id", "batch"]
    readonly_fields = [f.name for f in Event._meta.fields]


@admin.register(JobEnding)
class JobEndingAdmin(admin.ModelAdmin):
    """Job endings whose events could not be made (given up after
    NOTIFY_MAX_ATTEMPTS tries), and those being made right now."""

    list_display = ["job_id", "job_status", "status", "tries", "error_code", "given_up_at", "finished_at"]
    list_filter = ["status", "error_code"]
    search_fields = ["job_id", "error_code"]
    readonly_fields = [f.name for f in JobEnding._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(ChannelPreference)
class ChannelPreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", "channel", "events"]
    search_fields = ["user__username"]
