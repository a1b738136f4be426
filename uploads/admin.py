from collections import Counter

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django_celery_results.models import TaskResult
from rest_framework.authtoken.models import Token, TokenProxy

from uploads import services
from uploads.models import Job, JobAttempt, Output, Profile, Upload


class ProfileInline(admin.StackedInline):
    model = Profile
    can_delete = False
    verbose_name = "fair-share plan"
    fields = list(Profile.PLAN_FIELDS)


User = get_user_model()
admin.site.unregister(User)
# DRF's token admin lists every user's API token in clear (and names it on
# its delete page): a token is shown to its user only (create_api_user,
# demo_setup). Staff revoke tokens from the users list instead.
admin.site.unregister(TokenProxy)


@admin.register(User)
class FairlaneUserAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, ProfileInline]
    actions = ["revoke_api_tokens"]

    @admin.action(description="Revoke the API tokens of selected users", permissions=["change"])
    def revoke_api_tokens(self, request, queryset):
        revoked = list(Token.objects.filter(user__in=queryset).select_related("user"))
        for token in revoked:
            token.delete()
            self.log_change(request, token.user, "Revoked the API token from the admin.")
        self.message_user(request, f"Revoked {len(revoked)} API token(s).", messages.SUCCESS)


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ["user", *Profile.PLAN_FIELDS]
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


class AttemptInline(admin.TabularInline):
    model = JobAttempt
    fields = ["number", "worker", "started_at", "finished_at", "outcome", "error_code", "error_message"]
    readonly_fields = fields
    extra = 0
    can_delete = False


class PartInline(admin.TabularInline):
    """A chunked job's parts (uploads/parts.py), each a job of its own."""

    model = Job
    fk_name = "parent"
    verbose_name, verbose_name_plural = "part", "parts (chunks, audio, finalizer)"
    fields = ["part_link", "part_index", "status", "progress", "attempts", "wait_ms", "process_ms", "error_code"]
    readonly_fields = fields
    ordering = ["part", "part_index"]
    extra = 0
    can_delete = False

    @admin.display(description="part")
    def part_link(self, job: Job) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:uploads_job_change", args=[job.id]), job.part)


def _confirm_or_run(modeladmin, request, queryset, *, action: str, verb: str, verb_past: str,
                    eligible: tuple, run) -> HttpResponse | None:
    """Show who and how many first; act only after an explicit yes."""
    jobs = list(queryset.filter(status__in=eligible).select_related("owner", "upload"))
    if request.POST.get("confirm") != "yes":
        owners = Counter(str(job.owner) for job in jobs)
        return TemplateResponse(request, "admin/uploads/job/confirm_action.html", {
            **modeladmin.admin_site.each_context(request), "title": f"{verb.capitalize()} jobs",
            "jobs": jobs, "selected": queryset, "owners": sorted(owners.items()), "action": action,
            "verb": verb, "verb_past": verb_past, "skipped": queryset.count() - len(jobs),
        })
    done = run(job_ids=[str(job.id) for job in jobs], actor=request.user)
    for job in done:
        modeladmin.log_change(request, job, f"{verb_past.capitalize()} from the admin.")
    modeladmin.message_user(request, f"{verb_past.capitalize()} {len(done)} job(s).", messages.SUCCESS)
    return None


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "filename", "kind", "part", "lane", "status", "progress", "attempts", "wait_ms",
                    "process_ms", "created_at", "started_at", "finished_at"]
    list_filter = ["status", "lane", "kind", "part", ("owner", admin.RelatedOnlyFieldListFilter), "created_at"]
    search_fields = ["=id", "owner__username", "upload__filename", "=task_id", "=parent__id"]
    list_select_related = ["owner", "upload", "parent__upload"]
    readonly_fields = [f.name for f in Job._meta.fields] + ["upload_link", "task_result_link"]
    inlines = [PartInline, AttemptInline, OutputInline]
    actions = ["retry_jobs", "cancel_jobs"]
    date_hierarchy = "created_at"

    @admin.display(description="file", ordering="upload__filename")
    def filename(self, job: Job) -> str:
        return job.title

    @admin.display(description="upload")
    def upload_link(self, job: Job) -> str:
        if job.upload_id is None:
            return "–"
        url = reverse("admin:uploads_upload_change", args=[job.upload_id])
        return format_html('<a href="{}">{}</a>', url, job.upload.filename)

    @admin.display(description="Celery task result")
    def task_result_link(self, job: Job) -> str:
        result = TaskResult.objects.filter(task_id=job.task_id or str(job.id)).first()
        if result is None:
            return "–"
        url = reverse("admin:django_celery_results_taskresult_change", args=[result.pk])
        return format_html('<a href="{}">{} ({})</a>', url, result.task_id, result.status)

    def has_retry_permission(self, request) -> bool:
        return request.user.has_perm("uploads.retry_job")

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("uploads.cancel_job")

    @admin.action(description="Retry selected jobs", permissions=["retry"])
    def retry_jobs(self, request, queryset):
        return _confirm_or_run(self, request, queryset, action="retry_jobs", verb="retry", verb_past="retried",
                               eligible=(Job.Status.FAILED, Job.Status.CANCELED), run=services.jobs_retry)

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request, queryset):
        return _confirm_or_run(self, request, queryset, action="cancel_jobs", verb="cancel", verb_past="canceled",
                               eligible=(Job.Status.QUEUED, Job.Status.RUNNING), run=services.jobs_cancel)
