"""A user's requests hold at most FAIRLANE_WEB_USER_THREADS of a web
process's threads; the next is refused at once, another user's pass."""
from __future__ import annotations

import json
import threading

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.authtoken.models import Token

from uploads.thread_bound import UserThreadBound

pytestmark = pytest.mark.django_db(transaction=True)


class HeldView:
    """A view that holds its thread until released, counting who got in."""

    def __init__(self) -> None:
        self.release, self.entered = threading.Event(), threading.Semaphore(0)

    def __call__(self, request) -> HttpResponse:
        self.entered.release()
        assert self.release.wait(30)
        return HttpResponse("done")


def _token_request(path: str, token: Token):
    return RequestFactory().get(path, HTTP_AUTHORIZATION=f"Token {token.key}")


def test_a_users_requests_past_the_bound_are_refused_and_others_pass(make_user, settings):
    settings.FAIRLANE_WEB_USER_THREADS = 2
    heavy, light = make_user("heavy"), make_user("light")
    heavy_token, light_token = (Token.objects.get_or_create(user=u)[0] for u in (heavy, light))
    view = HeldView()
    bound = UserThreadBound(view)
    answers: list[HttpResponse] = []
    held = [threading.Thread(target=lambda: answers.append(bound(_token_request("/api/batches/", heavy_token))))
            for _ in range(2)]
    other = threading.Thread(target=lambda: answers.append(bound(_token_request("/api/batches/", light_token))))
    for thread in held:
        thread.start()
    try:
        for _ in held:
            assert view.entered.acquire(timeout=30)  # both of the heavy user's requests hold a thread
        refused = bound(_token_request("/api/batches/", heavy_token))
        assert refused.status_code == 429 and refused["Retry-After"] == "1"
        assert json.loads(refused.content)["error"]["code"] == "busy"
        page = RequestFactory().get("/uploads/")
        page.user = heavy  # a session's user, as AuthenticationMiddleware sets it
        assert bound(page).status_code == 429  # pages count too, whatever the authentication
        assert bound(page)["Content-Type"].startswith("text/plain")

        other.start()
        assert view.entered.acquire(timeout=30)  # the light user's request runs beside them
    finally:
        view.release.set()
        for thread in [*held, other]:
            if thread.is_alive():
                thread.join(30)
    assert [a.status_code for a in answers] == [200, 200, 200]
    view.release.set()
    assert bound(_token_request("/api/batches/", heavy_token)).status_code == 200  # the threads came back
    assert bound.held == {}


def test_anonymous_and_unknown_tokens_are_not_counted(settings):
    settings.FAIRLANE_WEB_USER_THREADS = 1
    view = HeldView()
    view.release.set()
    bound = UserThreadBound(view)
    request = RequestFactory().get("/api/schema/")
    request.user = AnonymousUser()
    assert bound(request).status_code == 200
    assert bound(RequestFactory().get("/api/batches/", HTTP_AUTHORIZATION="Token nosuchtoken")).status_code == 200
    assert bound.held == {}


def test_signed_links_are_not_counted(make_user, settings):
    """A page's pictures and player load outputs by their signed links, which cannot wait out a 429."""
    settings.FAIRLANE_WEB_USER_THREADS = 1
    view = HeldView()
    view.release.set()
    bound = UserThreadBound(view)
    bound.held[make_user("viewer").pk] = 1  # the user's one thread is taken
    user = get_user_model().objects.get(username="viewer")
    for path in ("/o/token/poster.jpg", "/o/live/token/master.m3u8", "/store/incoming/token"):
        request = RequestFactory().get(path)
        request.user = user
        assert bound(request).status_code == 200, path
    page = RequestFactory().get("/uploads/")
    page.user = user
    assert bound(page).status_code == 429
