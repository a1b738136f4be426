"""A new user's first pages in Chromium: the login box in the middle of the
window, an icon on every page (no /favicon.ico 404, the admin's included),
empty lists that say so, and the API-token page (shown once, rotated)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from tests.browser.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_login_box_is_centred_and_every_page_has_an_icon(make_person, page, screenshot):
    nell = make_person("nell", staff=True)
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto("/")
    expect(page).to_have_url("/accounts/login/?next=/")
    box = page.locator("form.login").bounding_box()
    width = page.viewport_size["width"]
    assert abs(box["x"] + box["width"] / 2 - width / 2) <= 2, box  # centred across the window
    assert box["y"] < 300  # and near the top, not lost below the fold
    screenshot(page, "login-page")
    page.fill("input[name=username]", nell.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("form.login button[type=submit]")
    expect(page.locator("header nav")).to_contain_text("API token")
    icon = page.evaluate("fetch(document.querySelector('link[rel=icon]').href).then(r => [r.status, "
                         "r.headers.get('content-type')])")
    assert icon == [200, "image/svg+xml"]
    page.goto("/admin/")  # names no icon: the browser asks for /favicon.ico
    resp = page.request.get("/favicon.ico")
    assert resp.status == 200 and resp.headers["content-type"] == "image/x-icon"
    assert not [url for url in missing if "favicon" in url], missing


def test_a_new_users_lists_say_they_are_empty(make_person, page, site_login, screenshot):
    site_login(page, make_person("olive"))
    expect(page.locator("#batch-rows td.empty")).to_have_text("No batches yet: the files of each drop become one.")
    expect(page.locator("#jobs td.empty")).to_have_text("No files yet: drop some above.")
    expect(page.locator("#files-summary")).to_have_text("")
    expect(page.locator("#moving")).to_be_hidden()
    page.goto("/notifications/")
    expect(page.locator("#endpoints td")).to_have_text("No endpoints yet.")
    page.goto("/")
    screenshot(page, "upload-page-empty")


def test_the_api_token_is_shown_once_and_rotated(make_person, page, site_login, screenshot, api_client_for):
    pia = make_person("pia")
    old = Token.objects.get(user=pia).key
    site_login(page, pia)
    page.click("header nav >> text=API token")
    expect(page.locator("#token-state")).to_contain_text("You have a token, created")
    assert old not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#rotate button[type=submit]")
    new = page.locator("#token").inner_text()
    assert new == Token.objects.get(user=pia).key and new != old
    expect(page.locator("#new-token")).to_contain_text("only now")
    screenshot(page, "api-token-page")
    # The old token stops working at once; the new one works.
    client = api_client_for(pia)
    for key, answer in ((new, 200), (old, 401)):
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get("/api/jobs/").status_code == answer
    # Shown once: the page does not show it again.
    page.goto("/account/api-token/")
    expect(page.locator("#token-state")).to_contain_text("is not shown again")
    assert new not in page.content()
    # A dismissed confirmation rotates nothing.
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#rotate button[type=submit]")
    assert Token.objects.get(user=pia).key == new
