"""The admin of records the system writes (jobs, their attempts and
outputs, uploads, deliveries, events), by Django's conventions: they are
read, never edited, so there is no "Add" and no "Save" (Django shows a
record without change permission field by field, read-only); what an
operator may do to one is an admin action that calls a service, offered on
the list and, for one record, on its own page. And columns that fit a
laptop's screen (1,366 px, the admin's side bars open): ids cut to their
first characters, times without the year, long names cut with the whole
in a tooltip. notify's admin uses these too."""
from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html

# A UUID's first 8 hex digits: what people read and say (as git's short
# hashes); the list's search finds a record by its whole id.
SHORT_ID = 8


def short_id(value) -> str:
    return str(value)[:SHORT_ID]


def compact_time(value: datetime | None) -> str:
    """"26 Nov 14:31": the year only when it is not this one."""
    if value is None:
        return "–"
    local = timezone.localtime(value)
    return local.strftime("%d %b %H:%M" if local.year == timezone.localtime().year else "%d %b %Y %H:%M")


@admin.display(description="created", ordering="created_at")
def created(record) -> str:
    """A list's column of when a record was made."""
    return compact_time(record.created_at)


def cut(text: str, limit: int) -> str:
    """At most `limit` characters shown; the whole on hover."""
    if len(text) <= limit:
        return text
    return format_html('<span title="{}">{}…</span>', text, text[: limit - 1])


class RecordInline(admin.TabularInline):
    """Rows of a record, shown on its page: read-only, no "Add another"."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class RecordAdmin(admin.ModelAdmin):
    """A record nobody edits. `object_actions` ({action name: button
    label}) are the admin actions also offered on a record's own page,
    where `object_action_allowed` says they apply; the button posts to the
    list's action, so confirmation, permissions and logging are the same."""

    change_form_template = "admin/record_change_form.html"
    change_list_template = "admin/compact_change_list.html"
    object_actions: dict[str, str] = {}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def object_action_allowed(self, obj, name: str) -> bool:
        return True

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        permitted = self.get_actions(request)
        offered = [(name, label) for name, label in self.object_actions.items()
                   if obj is not None and name in permitted and self.object_action_allowed(obj, name)]
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "object_actions": offered})
