from collections import Counter

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django_celery_results.admin import TaskResultAdmin
from django_celery_results.models import TaskResult
from rest_framework.authtoken.models import Token, TokenProxy

from organisations import admin as organisations_admin
from project import plans
from uploads import limits, services
from uploads.admin_records import RecordAdmin, RecordInline, compact_time, created, cut, short_id
from uploads.errors import ApplicationError
from uploads.facts import bytes_text, duration_text
from uploads.models import Job, JobAttempt, Output, Profile, Upload


class PlanForm:
    """A plan's form: the user's share of the workers, then their limits on
    what users share (uploads/limits.py), each saying the default an empty
    value means now."""

    PLAN_FIELDSETS = [(None, {"fields": list(Profile.PLAN_FIELDS)}),
                      ("Limits (empty: the default)", {"fields": list(limits.DEFAULTS)})]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "weight":  # the model's text predates organisations (a migration to change it: no)
            field.help_text = (f"Share of the organisation's worker time relative to its other members "
                               f"({plans.WEIGHT_MIN:g} to {plans.WEIGHT_MAX:g}; 1 is the default). Organisations "
                               f"share each lane by their own plan's weight first; alone in one, this does not "
                               f"change the share.")
        if db_field.name in limits.DEFAULTS:
            default = getattr(settings, limits.DEFAULTS[db_field.name])
            in_words = f" ({bytes_text(default)})" if db_field.name.endswith("_bytes") else ""
            field.help_text = f"{field.help_text} Now {default:,}{in_words}."
            field.label = field.label.replace("Api ", "API ")
        return field


class ProfileInline(PlanForm, admin.StackedInline):
    """The user's plan, on the user's own admin page."""

    model = Profile
    can_delete = False
    verbose_name = "fair-share plan"
    fieldsets = PlanForm.PLAN_FIELDSETS


User = get_user_model()
admin.site.unregister(User)
# DRF's token admin lists every user's API token in clear (and names it on
# its delete page): a token is shown to its user only (create_api_user,
# demo_setup). Staff revoke tokens from the users list instead.
admin.site.unregister(TokenProxy)


@admin.register(User)
class FairlaneUserAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, organisations_admin.MembershipInline, ProfileInline]
    actions = ["revoke_api_tokens", organisations_admin.move_to_organisation]
    list_display = [*UserAdmin.list_display, organisations_admin.organisation_column]
    list_select_related = ["membership__organisation"]
    search_fields = [*UserAdmin.search_fields, "membership__organisation__name"]

    def lookup_allowed(self, lookup: str, value: str, request=None) -> bool:
        """An organisation's page links to its members: this list filtered by it."""
        return lookup == organisations_admin.MEMBERS_LOOKUP or super().lookup_allowed(lookup, value, request)

    def has_move_permission(self, request) -> bool:
        return organisations_admin.has_move_permission(request)

    def save_formset(self, request, form, formset, change):
        if formset.model is organisations_admin.MembershipInline.model:
            organisations_admin.membership_saved(request, formset)
        else:
            super().save_formset(request, form, formset, change)

    @admin.action(description="Revoke the API tokens of selected users", permissions=["change"])
    def revoke_api_tokens(self, request, queryset):
        revoked = list(Token.objects.filter(user__in=queryset).select_related("user"))
        for token in revoked:
            token.delete()
            self.log_change(request, token.user, "Revoked the API token from the admin.")
        self.message_user(request, f"Revoked {len(revoked)} API token(s).", messages.SUCCESS)


admin.site.unregister(TaskResult)


@admin.register(TaskResult)
class CompactTaskResultAdmin(RecordAdmin, TaskResultAdmin):
    """django-celery-results' results, as records (read-only), listed in
    columns that fit 1,366 px: a task id is a job id and a release tag, 53
    characters."""

    list_display = ["task", "task_name", "status", "host", "done"]

    @admin.display(description="task id", ordering="task_id")
    def task(self, result: TaskResult) -> str:
        return cut(result.task_id, 14)

    @admin.display(description="worker", ordering="worker")
    def host(self, result: TaskResult) -> str:
        return cut(result.worker or "–", 20)

    @admin.display(description="done", ordering="date_done")
    def done(self, result: TaskResult) -> str:
        return compact_time(result.date_done)


@admin.register(Profile)
class ProfileAdmin(PlanForm, admin.ModelAdmin):
    list_display = ["user", *Profile.PLAN_FIELDS]
    search_fields = ["user__username"]
    fieldsets = [(None, {"fields": ["user", *Profile.PLAN_FIELDS]}), *PlanForm.PLAN_FIELDSETS[1:]]


def _job_link(job: Job) -> str:
    return format_html('<a href="{}" title="{}">{}</a>', reverse("admin:uploads_job_change", args=[job.id]), job.id,
                       short_id(job.id))


def _batch_link(batch) -> str:
    """A batch is no record of its own here: its link lists its jobs (the
    job list's search takes a batch's id)."""
    if batch is None:
        return "–"
    return format_html('<a href="{}?q={}" title="{}">{}</a>', reverse("admin:uploads_job_changelist"), batch, batch,
                       short_id(batch))


def _ms_text(ms: int | None) -> str:
    return "–" if ms is None else duration_text(ms / 1000)


@admin.display(description="waited", ordering="wait_ms")
def waited(job: Job) -> str:
    return _ms_text(job.wait_ms)


@admin.display(description="took", ordering="process_ms")
def took(job: Job) -> str:
    return _ms_text(job.process_ms)


class JobInline(RecordInline):
    model = Job
    fields = ["job", "kind", "status", "progress", "attempts", "error_code"]
    readonly_fields = fields

    @admin.display(description="job")
    def job(self, job: Job) -> str:
        return _job_link(job)


@admin.register(Upload)
class UploadAdmin(RecordAdmin):
    list_display = ["name", "owner", "size_text", "batch_link", created]
    list_filter = ["created_at"]
    search_fields = ["filename", "owner__username", "=id", "=batch"]
    list_select_related = ["owner"]
    fields = ["id", "owner", "batch_link", "filename", "file", "size_text", "client_content_type", "created_at"]
    readonly_fields = fields
    inlines = [JobInline]

    @admin.display(description="file", ordering="filename")
    def name(self, upload: Upload) -> str:
        return cut(upload.filename, 40)

    @admin.display(description="size", ordering="size")
    def size_text(self, upload: Upload) -> str:
        return bytes_text(upload.size)

    @admin.display(description="batch")
    def batch_link(self, upload: Upload) -> str:
        return _batch_link(upload.batch)


class OutputInline(RecordInline):
    model = Output
    fields = ["name", "content_type", "size_text", "file"]
    readonly_fields = fields

    @admin.display(description="size")
    def size_text(self, output: Output) -> str:
        return bytes_text(output.size)


class AttemptInline(RecordInline):
    model = JobAttempt
    fields = ["number", "worker", "started_at", "finished_at", "outcome", "error_code", "error_message"]
    readonly_fields = fields


class PartInline(RecordInline):
    """A chunked job's parts (uploads/parts.py), each a job of its own."""

    model = Job
    fk_name = "parent"
    verbose_name, verbose_name_plural = "part", "parts (chunks, audio, finalizer)"
    fields = ["part_link", "part_index", "status", "progress", "attempts", waited, took, "error_code"]
    readonly_fields = fields
    ordering = ["part", "part_index"]

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
    try:
        done = run(job_ids=[str(job.id) for job in jobs], actor=request.user)
    except ApplicationError as refused:  # a user's limit (uploads/limits.py): nothing was done
        modeladmin.message_user(request, f"Nothing was {verb_past}: {refused.message}", messages.ERROR)
        return None
    for job in done:
        modeladmin.log_change(request, job, f"{verb_past.capitalize()} from the admin.")
    modeladmin.message_user(request, f"{verb_past.capitalize()} {len(done)} job(s).", messages.SUCCESS)
    return None


# The states each action applies to (uploads/services.py guards them again).
RETRYABLE = (Job.Status.FAILED, Job.Status.CANCELED)
CANCELABLE = (Job.Status.QUEUED, Job.Status.RUNNING)


@admin.register(Job)
class JobAdmin(RecordAdmin):
    # What fits 1,366 px beside the side bars: kind, lane and part are
    # filters (a file's name and a part's say which), the time it took is
    # on its page.
    list_display = ["job", "file", "user", "state", "tries", waited, created]
    list_display_links = ["job"]
    list_filter = ["status", "lane", "kind", "part", ("owner", admin.RelatedOnlyFieldListFilter), "created_at"]
    # A job by (the start of) its id, its task, its parent's id; a batch's jobs by the batch's id.
    search_fields = ["^id", "owner__username", "upload__filename", "=task_id", "=parent__id", "=upload__batch",
                     "=batch"]
    list_select_related = ["owner", "upload", "parent__upload"]
    date_hierarchy = "created_at"
    fieldsets = [
        (None, {"fields": ["id", "upload_link", "batch_link", "owner", "kind", "status", "progress", "error_code",
                           "error_message"]}),
        ("Times", {"fields": ["created_at", "queued_at", "scheduled_for", "started_at", "finished_at", waited,
                              took]}),
        ("Attempts", {"fields": ["attempts", "attempt_budget_from", "lease_expires_at", "task_result_link"]}),
        ("Part of a long video", {"fields": ["parent", "part", "part_index"]}),
        ("Internals", {"classes": ["collapse"], "fields": ["lane", "task_id", "cost_estimate", "media_info",
                                                           "checkpoint", "notify_pending"]}),
    ]
    readonly_fields = [field for _, options in fieldsets for field in options["fields"]]
    inlines = [PartInline, AttemptInline, OutputInline]
    actions = ["retry_jobs", "cancel_jobs"]
    object_actions = {"retry_jobs": "Retry", "cancel_jobs": "Cancel"}

    def get_inlines(self, request, obj: Job | None):
        """Only the sections with rows: a whole job has no parts, a failed one no outputs."""
        if obj is None:
            return []
        present = {PartInline: obj.parts.exists(), AttemptInline: obj.attempt_log.exists(),
                   OutputInline: obj.outputs.exists()}
        return [inline for inline in self.inlines if present[inline]]

    def get_fieldsets(self, request, obj: Job | None = None):
        return [fs for fs in self.fieldsets if obj is None or obj.parent_id or fs[0] != "Part of a long video"]

    def object_action_allowed(self, job: Job, name: str) -> bool:
        return job.status in {"retry_jobs": RETRYABLE, "cancel_jobs": CANCELABLE}[name]

    @admin.display(description="job", ordering="id")
    def job(self, job: Job) -> str:
        return short_id(job.id)

    @admin.display(description="file", ordering="upload__filename")
    def file(self, job: Job) -> str:
        if job.kind == Job.Kind.EXPORT:
            return f"export of batch {short_id(job.batch)}"
        return cut(job.title, 22)

    @admin.display(description="owner", ordering="owner__username")
    def user(self, job: Job) -> str:
        return cut(job.owner.get_username(), 12)

    @admin.display(description="tries", ordering="attempts")
    def tries(self, job: Job) -> int:
        return job.attempts

    @admin.display(description="status", ordering="status")
    def state(self, job: Job) -> str:
        label = job.get_status_display()
        return f"{label} {job.progress} %" if job.status == Job.Status.RUNNING else label

    @admin.display(description="upload")
    def upload_link(self, job: Job) -> str:
        if job.upload_id is None:
            return "–"
        url = reverse("admin:uploads_upload_change", args=[job.upload_id])
        return format_html('<a href="{}">{}</a>', url, job.upload.filename)

    @admin.display(description="batch")
    def batch_link(self, job: Job) -> str:
        """The batch its file came in (a part: its parent's); an export's, the one it exports."""
        source = job.parent if job.parent_id else job
        return _batch_link(source.upload.batch if source.upload_id else source.batch)

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
                               eligible=RETRYABLE, run=services.jobs_retry)

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request, queryset):
        return _confirm_or_run(self, request, queryset, action="cancel_jobs", verb="cancel", verb_past="canceled",
                               eligible=CANCELABLE, run=services.jobs_cancel)
