"""Moving people between organisations in the admin, as staff do it: pick
users in the list, the action asks where (an autocomplete of organisations
by name), then moves them; the organisation's page lists them. At 1,366 px,
screenshotted (test-artifacts/screenshots/admin-1366-move-*.png)."""
from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.browser.test_admin_pages import LAPTOP

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_move_selected_users_to_an_organisation(browser, live_server, make_person, admin_login, screenshot):
    from organisations import Membership, organisation_create

    people = [make_person(name) for name in ("alice", "bob", "carol")]
    studio = organisation_create(name="Northwind Post-Production Studio")
    organisation_create(name="Northwind Marketing")
    context = browser.new_context(base_url=live_server.url, viewport=LAPTOP)
    context.set_default_timeout(10_000)
    page = context.new_page()
    admin_login(page, make_person("olga", staff=True))

    page.goto(reverse("admin:auth_user_changelist"))
    for person in people[:2]:
        page.locator(f"input.action-select[value='{person.pk}']").check()
    page.locator("select[name=action]").select_option("move_to_organisation")
    page.get_by_role("button", name="Go").click()
    expect(page.locator("#content h1")).to_have_text("Move 2 users to an organisation")
    # The autocomplete (select2): type part of the name, pick one of the two that match.
    page.locator(".select2-selection").click()
    page.locator(".select2-search__field").fill("northwind p")
    expect(page.locator(".select2-results__option")).to_have_text(["Northwind Post-Production Studio"])
    screenshot(page, "admin-1366-move-users")
    page.locator(".select2-results__option").click()
    page.get_by_role("button", name="Move 2 users").click()
    expect(page.locator(".messagelist")).to_contain_text("Moved 2 user(s) to Northwind Post-Production Studio")
    assert sorted(Membership.objects.filter(organisation=studio).values_list("user__username", flat=True)) == [
        "alice", "bob"]

    page.goto(reverse("admin:organisations_organisation_change", args=[studio.pk]))
    members = page.locator(".field-member_list")
    expect(members).to_contain_text("2 members: alice, bob")
    members.get_by_role("link").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    screenshot(page, "admin-1366-move-members-listed")
    context.close()
