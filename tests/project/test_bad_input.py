"""Bad input never answers 5xx: every route of the URL configuration, walked
from the resolver, with malformed ids, huge numbers, wrong methods, wrong
content types, malformed JSON and empty multipart bodies, anonymously, as a
user and as staff. API routes answer errors in the API's shape
({"error": {"code", "message"}}); pages may answer an HTML 4xx."""
from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404

from tests.api_answers import assert_no_5xx_and_error_shape

pytestmark = pytest.mark.django_db

HUGE = "200000000000000000"
# Values put in each kind of path segment: one that is well-formed but names
# nothing, and malformed ones.
SEGMENTS = {
    "uuid": [str(uuid.UUID(int=7)), "not-a-uuid", HUGE],
    "int": [HUGE, "-1", "x"],
    "str": ["x", HUGE, "%00"],
    "path": ["a/../../etc/passwd", HUGE, "x.mp4"],
    "slug": ["x", HUGE],
}
# The cursors: not base64; p=notatime; p=2026-02-30 00:00:00+00:00 (well-formed, no such day;
# tests/uploads/test_pagination.py generates many more).
QUERIES = ["", f"?page={HUGE}", f"?page={HUGE}&page_size={HUGE}", "?cursor=garbage", "?cursor=cD1ub3RhdGltZQ==",
           "?cursor=cD0yMDI2LTAyLTMwKzAwJTNBMDAlM0EwMCUyQjAwJTNBMDA=", "?status=bogus&batch=nope",
           "?page_size=-1&o=-1"]
BODIES = [
    ("application/json", b"{not json"),
    ("application/json", b'{"file": [1], "batch": "x", "events": 5, "url": [], "scheduled_for": "soon"}'),
    ("text/plain", b"hello"),
    ("multipart/form-data; boundary=XX", b"--XX--\r\n"),
    ("multipart/form-data", b"no boundary"),
    ("application/x-www-form-urlencoded", b"endpoint_id=not-a-uuid&action=delete&url=%00&events=x"),
]
METHODS = ["get", "post", "put", "patch", "delete"]

# A health check answers 503 when a dependency is down: that is its answer,
# not an error of the request (the test run has no workers up). It waits
# about a second for workers to answer, so it is asked once per method.
DOWN_IS_AN_ANSWER = {"/healthz"}
# Under /api/ but HTML pages for people: the API docs.
DOCS_PAGES = {"/api/docs/"}


def _routes(patterns=None, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(pattern text, pattern) of every route, with included prefixes."""
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


SLOT = re.compile(r"<(?:(?P<converter>\w+):)?\w+>|\(\?P<\w+>(?P<regex>[^)]*)\)")


def _fill(template: str) -> list[str]:
    """Concrete paths for a route: each `<conv:name>` (path()) or named
    group (re_path(), the admin's) replaced by every sample of its kind; a
    group of alternatives (the admin's app labels) by its first one too."""
    template = template.replace("^", "").replace("$", "").replace("\\Z", "")
    slots, kinds = [], []
    for match in SLOT.finditer(template):
        slots.append(match.group(0))
        samples = SEGMENTS.get(match.group("converter") or "str", SEGMENTS["str"])
        alternatives = (match.group("regex") or "").split("|")
        if all(re.fullmatch(r"\w+", a) for a in alternatives):
            samples = [alternatives[0], *samples]
        kinds.append(samples)
    paths = []
    for values in itertools.product(*kinds):
        path = template
        for slot, value in zip(slots, values):
            path = path.replace(slot, value, 1)
        paths.append("/" + path.replace("\\", ""))
    return paths


def _all_paths() -> list[str]:
    return sorted({path for template, _ in _routes() for path in _fill(template)})


def _list_paths() -> set[str]:
    """Routes without a path parameter: where lists live, and so where query
    parameters (pages, cursors, filters) are read."""
    return {_fill(template)[0] for template, _ in _routes() if not SLOT.search(template)} - DOWN_IS_AN_ANSWER


def _check(resp, path: str) -> None:
    query = resp.request.get("QUERY_STRING")
    where = f"{resp.request['REQUEST_METHOD']} {path}{'?' + query if query else ''}"
    if path in DOWN_IS_AN_ANSWER and resp.status_code == 503:
        return
    if path.startswith("/api/") and path not in DOCS_PAGES:
        assert_no_5xx_and_error_shape(resp, where)
    assert resp.status_code < 500, f"{where} answered {resp.status_code}"


@pytest.fixture
def clients(make_user) -> dict[str, Client]:
    anonymous, user, staff = Client(), Client(), Client()
    user.force_login(make_user("walker"))
    staff.force_login(make_user("staffer", is_staff=True, is_superuser=True))
    return {"anonymous": anonymous, "user": user, "staff": staff}


def test_the_walk_covers_every_route_of_the_url_configuration():
    """The walk is only as good as its routes: each pattern yields paths, and
    every path()-route's first path resolves back to that route's view."""
    routes = list(_routes())
    assert len(routes) > 30
    for template, pattern in routes:
        paths = _fill(template)
        assert paths, template
        if "(?P" not in template:
            try:
                assert resolve(paths[0]).func == pattern.callback, (template, paths[0])
            except Resolver404:
                pytest.fail(f"{template} -> {paths[0]} resolves to nothing")


@pytest.mark.parametrize("who", ["anonymous", "user", "staff"])
def test_no_route_answers_5xx_to_malformed_ids_pages_or_methods(who, clients):
    client, lists = clients[who], _list_paths()
    for path in _all_paths():
        for method in METHODS:
            for query in QUERIES if method == "get" and path in lists else [""]:
                _check(getattr(client, method)(path + query), path)


@pytest.mark.parametrize("who", ["anonymous", "user"])
def test_no_route_answers_5xx_to_malformed_bodies_or_content_types(who, clients):
    client = clients[who]
    for path in _all_paths():
        for method, (content_type, body) in itertools.product(["post", "put", "patch"], BODIES):
            _check(getattr(client, method)(path, data=body, content_type=content_type), path)


def test_the_api_refuses_too_many_files_in_its_own_error_shape(make_user, api_client_for, settings):
    """Django raises TooManyFilesSent while parsing the body, before the
    view: it used to be Django's HTML 400."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 2
    files = [SimpleUploadedFile(f"{i}.mp4", b"x") for i in range(3)]
    resp = api_client_for(make_user("u")).post("/api/uploads/", {"file": files}, format="multipart")
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "too_many_files" and "2 files" in resp.json()["error"]["message"]


def test_a_malformed_endpoint_id_on_the_notifications_page_is_a_404(make_user, client):
    client.force_login(make_user("u"))
    resp = client.post("/notifications/", {"action": "delete", "endpoint_id": "not-a-uuid"})
    assert resp.status_code == 404


def test_a_huge_page_number_on_the_job_list_is_not_a_500(make_user, api_client_for):
    resp = api_client_for(make_user("u")).get(f"/api/jobs/?page={HUGE}")
    assert resp.status_code == 200 and resp.json()["results"] == []


def test_an_unknown_api_url_is_a_json_404(make_user, api_client_for):
    resp = api_client_for(make_user("u")).get("/api/nothing-here/")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


def test_djangos_own_answers_under_api_keep_the_error_shape(rf):
    """handler400/500 (project/urls.py): what Django answers itself, before or
    after a view, is JSON under /api/ and Django's page elsewhere."""
    from django.core.exceptions import TooManyFilesSent

    from uploads.api_errors import bad_request, server_error

    crash = server_error(rf.get("/api/jobs/"))
    assert crash.status_code == 500 and json.loads(crash.content)["error"]["code"] == "internal_error"
    refused = bad_request(rf.post("/api/uploads/"), TooManyFilesSent("too many"))
    assert refused.status_code == 413 and json.loads(refused.content)["error"]["code"] == "too_many_files"
    assert server_error(rf.get("/jobs/")).status_code == 500
    assert not bad_request(rf.get("/"), TooManyFilesSent("x"))["Content-Type"].startswith("application/json")
