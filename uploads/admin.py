from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from uploads.models import Job, Notification, Output, Profile, Upload


class ProfileInline(admin.StackedInline):
    model = Profile
    can_delete = False
    verbose_name = "fair-share plan"
    fields = ["weight", "transcode_cap", "notify_rate_per_s", "notify_burst"]


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class FairlaneUserAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, ProfileInline]


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "weight", "transcode_cap", "notify_rate_per_s", "notify_burst"]
    search_fields = ["user__username"]


class JobInline(admin.TabularInline):
    model = Job
    fields = ["id", "kind", "status", "progress", "attempts", "error_code"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Upload)
class UploadAdmin(admin.ModelAdmin):
    list_display = ["filename", "owner", "size", "batch", "created_at"]
    list_filter = ["created_at"]
    search_fields = ["filename", "owner__username", "id", "batch"]
    readonly_fields = ["id", "owner", "batch", "filename", "file", "size", "client_content_type", "created_at"]
    inlines = [JobInline]


class OutputInline(admin.TabularInline):
    model = Output
    fields = ["name", "content_type", "size", "file"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "kind", "lane", "status", "progress", "attempts", "wait_ms", "process_ms",
                    "created_at", "finished_at"]
    list_filter = ["status", "lane", "kind", "created_at"]
    search_fields = ["id", "owner__username", "upload__filename", "task_id"]
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [OutputInline]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["event", "channel", "recipient", "status", "created_at", "sent_at"]
    list_filter = ["status", "channel", "event"]
    readonly_fields = [f.name for f in Notification._meta.fields]
