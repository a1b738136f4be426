"""The admin of organisations and of who is in them.

An organisation's page holds its plan per lane and links to its members
(the users list filtered by it: an organisation of thousands is not one
page of inlines). People move from their user page (the membership's
organisation) or many at once from the users list (an action that asks
where, then moves). Both go through services.members_move, so a move is
the same whoever makes it: never without an organisation, logged.

The user admin lives in uploads/admin.py (it unregisters Django's); it
takes MembershipInline, the move action and the columns below.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import AutocompleteSelect
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from organisations.models import Membership, Organisation
from organisations.services import members_move

# The users list's lookup that lists an organisation's members (allowed in
# UserAdmin.lookup_allowed: it is no list filter, which would list every
# organisation).
MEMBERS_LOOKUP = "membership__organisation__id__exact"
# Members named on an organisation's page; the link lists them all.
MEMBERS_NAMED = 20


def members_url(organisation: Organisation) -> str:
    return f"{reverse('admin:auth_user_changelist')}?{MEMBERS_LOOKUP}={organisation.pk}"


@admin.register(Organisation)
class OrganisationAdmin(admin.ModelAdmin):
    list_display = ["name", "members", "transcode_weight", "transcode_cap", "transcode_rate_per_s", "notify_weight",
                    "notify_cap", "notify_rate_per_s"]
    search_fields = ["name", "memberships__user__username"]
    fieldsets = [
        (None, {"fields": ["name", "member_list"]}),
        ("cpu-transcode (uploads and exports)", {"fields": list(Organisation.TRANSCODE_FIELDS)}),
        ("io-notify (webhooks and email)", {"fields": list(Organisation.NOTIFY_FIELDS)}),
    ]
    readonly_fields = ["member_list"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # Ordered again: Meta.ordering is dropped from a GROUP BY query.
        return (super().get_queryset(request).annotate(members=Count("memberships", distinct=True))
                .order_by("name", "id"))

    @admin.display(description="members", ordering="members")
    def members(self, organisation: Organisation) -> int:
        return organisation.members

    @admin.display(description="members")
    def member_list(self, organisation: Organisation) -> str:
        if organisation.pk is None:
            return "Add people from the users list (action “Move to an organisation”) or from a user’s page."
        names = list(organisation.memberships.order_by("user__username")
                     .values_list("user__username", flat=True)[:MEMBERS_NAMED])
        count = organisation.members
        shown = ", ".join(names) + (f" and {count - len(names):,} more" if count > len(names) else "")
        return format_html('<a href="{}">{} member{}</a>{}{}', members_url(organisation), f"{count:,}",
                           "" if count == 1 else "s", ": " if shown else "", shown)


class MembershipInline(admin.StackedInline):
    """A user's one organisation, on their page: changing it moves them
    (FairlaneUserAdmin.save_formset calls members_move)."""

    model = Membership
    can_delete = False
    fields = ["organisation"]
    autocomplete_fields = ["organisation"]
    verbose_name = verbose_name_plural = "organisation"


class MoveForm(forms.Form):
    organisation = forms.ModelChoiceField(
        queryset=Organisation.objects.all(),
        widget=AutocompleteSelect(Membership._meta.get_field("organisation"), admin.site),
        help_text="Type to find it by its name or a member's.")


@admin.display(description="organisation", ordering="membership__organisation__name")
def organisation_column(user) -> str:
    membership = getattr(user, "membership", None)
    if membership is None:
        return "–"
    url = reverse("admin:organisations_organisation_change", args=[membership.organisation_id])
    return format_html('<a href="{}">{}</a>', url, membership.organisation.name)


def membership_saved(request: HttpRequest, formset) -> None:
    """A user page's membership form, saved through the service; the
    user's change message names the move (formset.changed_objects, as
    the formset's own save would have set it)."""
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.forms:
        if not form.has_changed() or "organisation" not in form.cleaned_data:
            continue
        members_move(user_ids=[formset.instance.pk], organisation=form.cleaned_data["organisation"],
                     actor=request.user)
        formset.changed_objects.append((Membership.objects.get(user_id=formset.instance.pk), ["organisation"]))


@admin.action(description="Move selected users to an organisation", permissions=["move"])
def move_to_organisation(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
                         ) -> HttpResponse | None:
    """Ask where (with who is selected), then move them on an explicit yes."""
    form = MoveForm(request.POST if request.POST.get("confirm") == "yes" else None)
    if form.is_bound and form.is_valid():
        organisation = form.cleaned_data["organisation"]
        users = list(queryset)
        moved = members_move(user_ids=[u.pk for u in users], organisation=organisation, actor=request.user)
        for user in users:
            modeladmin.log_change(request, user, f"Moved to organisation {organisation.name} ({organisation.pk}).")
        modeladmin.message_user(request, f"Moved {moved} user(s) to {organisation.name}.", messages.SUCCESS)
        return None
    users = list(queryset.select_related("membership__organisation").order_by("username"))
    return TemplateResponse(request, "admin/organisations/move_members.html", {
        **modeladmin.admin_site.each_context(request), "title": f"Move {len(users)} user{'s' if len(users) != 1 else ''}"
        " to an organisation", "users": users, "form": form, "media": modeladmin.media + form.media,
        "opts": modeladmin.model._meta,
    })


def has_move_permission(request: HttpRequest) -> bool:
    return request.user.has_perm("organisations.change_membership")
