"""Browser tests: Debian's Chromium (/usr/bin/chromium, see bin/ensure-system-tools)
driven by Playwright's sync API against pytest-django's `live_server`.

Each test saves a full-page screenshot to test-artifacts/screenshots/ (git
ignored, kept by CI as an artifact). The README shows copies in
docs/screenshots/; refresh them by hand after a UI change:
    cp test-artifacts/screenshots/*.png docs/screenshots/
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

# Playwright's sync API keeps an asyncio event loop running in this thread,
# so Django would refuse every ORM call made while a page is open
# (SynchronousOnlyOperation). The tests touch the database only between page
# actions, never concurrently with the loop, so the check is safe to lift here.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from tests.promise import wait_for  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
# The background-networking flags keep Chromium from dialling Google services
# (component updates, sync, QUIC probes), which on a closed network only
# produces a stream of failing connections.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
PASSWORD = "correct-horse-battery"  # every browser test user's password
expect.set_options(timeout=10_000)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run bin/ensure-system-tools (as root) first", pytrace=False)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, live_server) -> Iterator[Page]:
    """A fresh browser profile per test (no cookies shared), at the live server."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1920, "height": 1000})
    context.set_default_timeout(10_000)  # clicks and navigations, as for expect
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def screenshot() -> Callable[[Page, str], Path]:
    def take(page: Page, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def make_person(make_user):
    """A user who logs in with PASSWORD. Staff with `perms` ("app.codename")
    get just those; staff without any are superusers."""
    from django.contrib.auth.models import Permission

    def make(username: str, *, staff: bool = False, perms: tuple[str, ...] = ()):
        user = make_user(username, password=PASSWORD, is_staff=staff, is_superuser=staff and not perms)
        for perm in perms:
            app_label, codename = perm.split(".")
            user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        return user

    return make


def _admin_login(page: Page, user) -> None:
    page.goto("/admin/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(user.username)


def _site_login(page: Page, user) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("form.login button[type=submit]")
    expect(page.locator("header")).to_contain_text(user.username)


@pytest.fixture
def admin_login() -> Callable[[Page, object], None]:
    """Log in through the admin's own login form, as a person would."""
    return _admin_login


@pytest.fixture
def site_login() -> Callable[[Page, object], None]:
    """Log in through the site's form (/accounts/login/)."""
    return _site_login


def _reload_until(page: Page, check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """For pages that do not refresh themselves (the admin): reload until
    `check()` holds, as a person pressing F5 would."""
    def seen() -> bool:
        if check():
            return True
        page.reload()
        return False

    wait_for(seen, timeout_s, what, every=1)


@pytest.fixture
def reload_until():
    return _reload_until


def _wait_terminal(client, job_url: str, timeout_s: float = 90.0) -> dict:
    """Poll the API until the job has finished one way or the other."""
    def ended() -> dict | None:
        body = client.get(job_url).json()
        return body if body["status"] in ("succeeded", "failed", "canceled") else None

    return wait_for(ended, timeout_s, lambda: f"the job to finish: {client.get(job_url).json()}", every=0.2)


@pytest.fixture
def wait_terminal():
    return _wait_terminal
