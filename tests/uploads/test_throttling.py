"""API rates per user and route class (uploads/throttling.py), counted in
the run's real Redis and shared by web hosts: here two API clients, the
second with a Redis connection of its own for each request, as a request to
another host would have. The throttle's clock is the test's (DRF's `timer`
hook), so no outcome depends on how long a request takes."""
from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from project import redis_clients
from uploads import limits, throttling
from uploads.models import Profile

pytestmark = pytest.mark.django_db
TEMPLATES = Path(__file__).resolve().parents[2] / "uploads" / "templates" / "uploads"


class Clock:
    """The throttle's clock, moved by the test only."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(throttling.PlanRateThrottle, "timer", clock)
    return clock


class OtherHost(APIClient):
    """A client whose every request reaches the throttle through a new Redis
    connection (another web process): only Redis can carry the count."""

    def request(self, *args, **kwargs):
        for cached in (redis_clients.client, throttling._script, throttling._charge_script):
            cached.cache_clear()
        throttling.known_refusals.clear()  # nor what this one remembers
        return super().request(*args, **kwargs)


@pytest.fixture
def hosts(make_user, api_client_for):
    """(alice on host one, alice on host two)."""
    alice = make_user("alice")
    other = OtherHost()
    other.credentials(HTTP_AUTHORIZATION=f"Token {alice.auth_token.key}")
    return alice, api_client_for(alice), other


def refusal(resp) -> tuple[int, dict]:
    """(Retry-After, the error body) of a 429."""
    assert resp.status_code == 429, resp.content
    return int(resp["Retry-After"]), resp.json()["error"]


def test_a_users_reads_past_the_plans_rate_are_refused_on_every_host_with_a_sane_retry_after(hosts, clock):
    alice, one, two = hosts
    Profile.objects.create(user=alice, api_reads_per_min=4)  # one every 15 s, four at once
    assert [c.get("/api/webhooks/").status_code for c in (one, two, one, two)] == [200] * 4
    after, error = refusal(two.get("/api/webhooks/"))
    assert after == 15 and error == {
        "code": "throttled", "retry_after": 15, "route_class": "read", "limit": 4,
        "message": "Too many read requests: your plan allows 4 a minute. Try again in 15 s."}
    assert refusal(one.get("/api/jobs/"))[0] == 15  # the other host, another route of the class: the same count
    clock.now += 14.5
    assert refusal(one.get("/api/webhooks/"))[0] == 1  # half a second to go: whole seconds, never 0
    clock.now += 0.5
    assert two.get("/api/webhooks/").status_code == 200  # one more after 15 s, on either host
    assert refusal(one.get("/api/webhooks/"))[0] == 15
    clock.now += 60
    assert [c.get("/api/webhooks/").status_code for c in (one, two, one, two)] == [200] * 4


def test_route_classes_and_users_are_counted_apart(hosts, clock, make_user, api_client_for):
    """A refused request costs nothing but its answer; alice's exhausted
    reads leave her writes, uploads and replays, and bob's reads, alone.
    Bad requests count too: the rate is checked before the view runs."""
    alice, one, two = hosts
    Profile.objects.create(user=alice, api_reads_per_min=1, api_writes_per_min=1, api_uploads_per_min=1,
                           api_replays_per_min=1)
    nobody = "00000000-0000-0000-0000-000000000001"
    requests = {
        "read": lambda c: c.get("/api/webhooks/"),
        "write": lambda c: c.delete(f"/api/webhooks/{nobody}/"),
        "upload": lambda c: c.post("/api/uploads/direct/", {"files": []}, format="json"),
        "replay": lambda c: c.post(f"/api/webhooks/{nobody}/deliveries/{nobody}/replay/"),
    }
    for name, send in requests.items():
        assert send(one).status_code in (200, 400, 404), name
        assert refusal(send(two))[1]["route_class"] == name
    assert api_client_for(make_user("bob")).get("/api/webhooks/").status_code == 200


def test_an_empty_rate_is_the_settings_default_and_the_plans_own_wins(make_user, api_client_for, clock, settings):
    settings.FAIRLANE_API_WRITES_PER_MIN = 2
    alice, bob = make_user("alice"), make_user("bob")
    Profile.objects.create(user=alice, api_writes_per_min=3)
    nobody = "/api/webhooks/00000000-0000-0000-0000-000000000001/"
    for user, allowed in ((alice, 3), (bob, 2)):
        client = api_client_for(user)
        assert [client.delete(nobody).status_code for _ in range(allowed)] == [404] * allowed
        assert refusal(client.delete(nobody))[1]["limit"] == allowed


def _api_views(patterns=None, prefix: str = ""):
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            yield from _api_views(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern) and (prefix + str(entry.pattern)).startswith("api/"):
            yield prefix + str(entry.pattern), entry.callback.cls


UPLOADING = {"api/uploads/", "api/uploads/direct/", "api/uploads/direct/complete/",
             "api/uploads/direct/<uuid:upload_id>/", "api/uploads/direct/<uuid:upload_id>/parts/"}
REPLAYING = {"api/webhooks/<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/replay/"}


def test_every_api_route_and_method_is_of_the_route_class_the_docs_say():
    """Reads are every GET; the rest of uploading is `upload`, a replay is
    `replay`, every other POST, PUT, PATCH and DELETE a `write`."""

    class Request:
        def __init__(self, method: str) -> None:
            self.method = method

    seen = set()
    for route, view in _api_views():
        for method in (m for m in view.http_method_names if hasattr(view, m) and m not in ("options", "head")):
            expected = ("read" if method == "get" else "upload" if route in UPLOADING else
                        "replay" if route in REPLAYING else "write")
            assert throttling.route_class(Request(method.upper()), view) == expected, (method, route)
            # and the same from the path, before a view is chosen (KnownRefusalMiddleware)
            path = "/" + re.sub(r"<uuid:\w+>", "00000000-0000-0000-0000-000000000001", route)
            assert throttling._path_route_class(method.upper(), path) == expected, (method, path)
            seen.add(expected)
    assert seen == {"read", "write", "upload", "replay"}


def test_anonymous_requests_are_counted_by_address_which_a_header_cannot_change(client, clock, settings):
    """Only the API's schema and docs page take anonymous requests;
    everything else answers 401 before any rate is counted."""
    settings.FAIRLANE_API_ANON_PER_MIN = 2
    for forwarded in ("1.1.1.1", "2.2.2.2"):
        assert client.get("/api/schema/", HTTP_X_FORWARDED_FOR=forwarded).status_code == 200
    after, error = refusal(client.get("/api/schema/", HTTP_X_FORWARDED_FOR="3.3.3.3"))
    assert (after, error["route_class"], error["limit"]) == (30, "anonymous", 2)
    assert "from your address" in error["message"]
    assert client.get("/api/schema/", REMOTE_ADDR="10.9.8.7").status_code == 200  # another address: its own


def test_the_upload_pages_own_polling_stays_well_under_the_default_read_rate(make_user, api_client_for, clock,
                                                                             redis_client):
    """A minute of the upload page at its fastest (files moving: the list and
    what moves every second, the batches every two), as the templates poll:
    nothing refused, and three quarters of the minute's reads still free."""
    files, batches = (TEMPLATES / "_files.html").read_text(), (TEMPLATES / "_batches.html").read_text()
    assert "setTimeout(refresh, busy ? 1000 : 3000)" in files and "delay = 1000" in files
    assert "setTimeout(refresh, moving ? 2000 : 10000)" in batches
    alice = make_user("alice")
    client = api_client_for(alice)
    for second in range(60):
        polled = ["/api/jobs/?page_size=50", "/api/jobs/moving/"] + (["/api/batches/?page_size=10"]
                                                                    if second % 2 == 0 else [])
        assert [client.get(url).status_code for url in polled] == [200] * len(polled), second
        clock.now += 1
    assert limits.limits_for(user_id=alice.pk).api_per_min["read"] == 1200
    clock.now -= 1  # at the last poll
    # How far ahead of now the page has taken the bucket, of the minute it holds.
    taken_s = int(redis_client.get(f"{throttling.KEY_PREFIX}read:user:{alice.pk}")) / 1e6 - clock.now
    assert taken_s <= 60 / 4, taken_s


def test_with_redis_unavailable_requests_pass_and_say_so_in_the_log(make_user, api_client_for, settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    client = api_client_for(make_user("alice"))
    with caplog.at_level(logging.WARNING, logger="uploads.throttling"):
        assert client.get("/api/webhooks/").status_code == 200
    assert re.search(r"API rates: not counted, Redis unavailable", caplog.text)


def test_a_refused_requests_credentials_are_refused_again_without_a_query_or_redis_until_their_time(
        hosts, clock, make_user, api_client_for, monkeypatch, django_assert_num_queries):
    """The second refusal is the first's answer, given before the session,
    authentication and the rate's Redis script; only for those credentials
    and that route class, and only until the time the first one told."""
    alice, one, _ = hosts
    Profile.objects.create(user=alice, api_reads_per_min=2)  # one every 30 s
    assert [one.get("/api/webhooks/").status_code for _ in range(2)] == [200, 200]
    first = one.get("/api/webhooks/")
    assert refusal(first) == (30, {"code": "throttled", "retry_after": 30, "route_class": "read", "limit": 2,
                                   "message": "Too many read requests: your plan allows 2 a minute. "
                                              "Try again in 30 s."})

    def no_redis(url):
        raise AssertionError("the rate's script was asked")

    with monkeypatch.context() as patch:
        patch.setattr(throttling, "_script", no_redis)
        clock.now += 10.2
        with django_assert_num_queries(0):
            again = one.get("/api/jobs/?page_size=10")  # another route of the class
        assert refusal(again) == (20, {**refusal(first)[1], "retry_after": 20,
                                       "message": "Too many read requests: your plan allows 2 a minute. "
                                                  "Try again in 20 s."})
    # Her writes, bob's reads: the throttle's to judge, and they pass.
    assert one.delete("/api/webhooks/00000000-0000-0000-0000-000000000001/").status_code == 404
    assert api_client_for(make_user("bob")).get("/api/webhooks/").status_code == 200
    clock.now += 19.8
    assert one.get("/api/webhooks/").status_code == 200  # her time came


def test_a_web_process_remembers_a_bounded_number_of_refused_credentials_the_expired_first(clock, monkeypatch):
    monkeypatch.setattr(throttling, "REMEMBERED_MOST", 3)
    known = throttling.KnownRefusals()
    factory = RequestFactory()
    asking = [factory.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token t{i}") for i in range(5)]
    known.remember(asking[0], "read", 6, clock.now + 5)  # over first
    for request in asking[1:3]:
        known.remember(request, "read", 6, clock.now + 30)
    clock.now += 10
    known.remember(asking[3], "read", 6, clock.now + 30)  # the expired one made room
    def refused(request) -> bool:
        return known.refused(known.credentials(request), request.method, request.path_info) is not None

    assert [refused(r) for r in asking] == [False, True, True, True, False]
    known.remember(asking[4], "read", 6, clock.now + 30)  # none expired: the longest remembered goes
    assert [refused(r) for r in asking] == [False, False, True, True, True]
    assert not refused(factory.post("/api/webhooks/", HTTP_AUTHORIZATION="Token t4"))  # a write
    assert not refused(factory.get("/api/jobs/", HTTP_AUTHORIZATION="Token t4",
                                   HTTP_COOKIE="sessionid=x"))  # other credentials


def test_a_web_process_learns_whose_credentials_are_whose_from_the_throttle_and_forgets_the_least_recent(
        make_user, api_client_for, monkeypatch):
    alice = make_user("alice")
    client = api_client_for(alice)
    assert client.get("/api/webhooks/").status_code == 200
    assert throttling.known_users.user_of((f"Token {alice.auth_token.key}", "")) == alice.pk
    assert throttling.known_users.user_of(("Token nobody", "")) is None
    monkeypatch.setattr(throttling, "REMEMBERED_MOST", 2)
    known = throttling.KnownUsers()
    factory = RequestFactory()
    asking = [factory.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token t{i}") for i in range(3)]
    known.remember(asking[0], 1)
    known.remember(asking[1], 2)
    known.remember(asking[0], 1)  # seen again: now the most recent
    known.remember(asking[2], 3)  # full: t1 goes
    assert [known.user_of(throttling.KnownRefusals.credentials(r)) for r in asking] == [1, None, 3]


class Stopwatch:
    """The middleware's clock for a request's time: every request that
    reaches Django takes `step` seconds (the middleware reads the clock as
    it starts and as it ends)."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reads = 0.0, step, 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.step
        return self.now


def test_a_users_requests_share_a_budget_of_the_webs_time_whatever_their_class(
        hosts, clock, make_user, api_client_for, monkeypatch, redis_client):
    """Each request that passed is charged its seconds after its answer; a
    user more than a minute's budget ahead is refused, in every class,
    until it is paid; nobody else is."""
    alice, one, two = hosts
    Profile.objects.create(user=alice, api_seconds_per_min=2)  # a request of 1 s takes 30 s of the bucket
    monkeypatch.setattr(throttling.KnownRefusalMiddleware, "clock", Stopwatch(1.0))
    assert [c.get("/api/webhooks/").status_code for c in (one, two, one)] == [200] * 3  # 30, 60, 90 s ahead
    after, error = refusal(two.get("/api/webhooks/"))
    assert after == 30 and error == {
        "code": "throttled", "retry_after": 30, "route_class": "seconds", "limit": 2,
        "message": "Your API requests took too much of the web's time: your plan allows 2 s of them a minute. "
                   "Try again in 30 s."}
    nobody = "/api/webhooks/00000000-0000-0000-0000-000000000001/"
    assert refusal(one.delete(nobody))[1]["route_class"] == "seconds"  # a write: the same budget
    assert refusal(one.delete(nobody))[0] == 30  # and again, from what this process remembers
    bob = api_client_for(make_user("bob"))
    assert [bob.get("/api/webhooks/").status_code for _ in range(3)] == [200] * 3
    clock.now += 30
    assert one.delete(nobody).status_code == 404  # paid: through to the view
    assert refusal(two.get("/api/webhooks/"))[1]["route_class"] == "seconds"


def test_a_request_is_charged_the_time_it_took(make_user, api_client_for, clock, redis_client):
    alice = make_user("alice")
    assert api_client_for(alice).get("/api/webhooks/").status_code == 200
    key = f"{throttling.KEY_PREFIX}seconds:user:{alice.pk}"
    ahead_s = int(redis_client.get(key)) / 1e6 - clock.now
    # 20 s a minute by default: the bucket moved by the request's own time (x3), real and short
    assert limits.limits_for(user_id=alice.pk).api_seconds_per_min == 20
    assert 0 < ahead_s < 5, ahead_s
