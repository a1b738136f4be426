"""List cursors (uploads/pagination.py) are client input: whatever a cursor
decodes to, the lists answer a page or a 400 `invalid_cursor`, never a 5xx.
The cases found by hand are listed; Hypothesis generates the rest: base64 of
arbitrary bytes, and of almost-valid payloads whose position is a date with
each field drawn past its range."""
from __future__ import annotations

import base64
from datetime import timedelta, timezone as dt_timezone
from urllib.parse import urlencode

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from notify import signing
from notify.models import Endpoint
from tests.api_answers import assert_no_5xx_and_error_shape
from uploads.models import Batch, Job, Upload

pytestmark = pytest.mark.django_db

LISTS = ("/api/jobs/", "/api/uploads/", "/api/batches/")


def cursor(**tokens: str) -> str:
    """A cursor as DRF encodes one: base64 of a query string (o offset, r reverse, p position)."""
    return base64.b64encode(urlencode(tokens).encode("ascii")).decode("ascii")


@pytest.fixture
def lister(make_user, api_client_for):
    """A user with a few rows in every list (so a position reaches the page
    query and the links), and their client."""
    alice = make_user("alice")
    start = timezone.now() - timedelta(minutes=5)
    for i in range(3):
        at = start + timedelta(seconds=i)
        batch = Batch.objects.create(owner=alice, created_at=at)
        upload = Upload.objects.create(owner=alice, batch=batch.id, filename=f"{i}.mp4", file=f"u/{i}", size=1)
        job = Job.objects.create(upload=upload, owner=alice, lane="cpu-transcode")
        Upload.objects.filter(id=upload.id).update(created_at=at)  # auto_now_add: set after
        Job.objects.filter(id=job.id).update(created_at=at)
    endpoint = Endpoint.objects.create(owner=alice, url="https://hooks.example/in", events=["job.failed"],
                                       secret=signing.secret_generate())
    return api_client_for(alice), (*LISTS, f"/api/webhooks/{endpoint.id}/deliveries/")


def check_cursor(client, path: str, value: str) -> None:
    resp = client.get(path, {"cursor": value, "page_size": "2"})
    assert_no_5xx_and_error_shape(resp, f"GET {path}?cursor={value!r}")
    assert resp.status_code in (200, 400), (path, value, resp.status_code)
    if resp.status_code == 400:
        assert resp.json()["error"]["code"] == "invalid_cursor", (value, resp.json())


# Well-formed dates that are no instant: the calendar has no such day or
# hour, or the instant is outside the years the database and Python hold
# once converted to UTC (9999-12-31 at -23:59 is in year 10000).
IMPOSSIBLE = [
    "2026-02-30 00:00:00+00:00", "2026-02-29T12:00:00+00:00", "2026-01-01 25:00:00+00:00",
    "2026-01-01 23:60:00+00:00", "2026-13-01 00:00:00+00:00", "2026-00-10 00:00:00+00:00",
    "9999-12-31T23:59:59.999999-23:59", "0001-01-01T00:00:00+23:59", "2026-01-01 00:00:00+24:00",
]


@pytest.mark.parametrize("position", IMPOSSIBLE)
@pytest.mark.parametrize("path", LISTS)
def test_a_cursor_at_an_impossible_date_is_a_400(path, position, lister):
    client, _ = lister
    resp = client.get(path, {"cursor": cursor(p=position)})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_cursor", resp.content


def test_a_cursor_without_a_time_zone_is_refused_as_none_we_gave_out(lister):
    """Every cursor we hand out carries its UTC offset; a naive time would be
    read in the server's zone (and warned about) instead."""
    client, _ = lister
    resp = client.get("/api/jobs/", {"cursor": cursor(p="2026-01-01 00:00:00")})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_cursor"


def test_a_cursor_in_another_time_zone_names_the_same_instant(lister):
    """What the cursor says is an instant: the same one written at +02:00 or
    in UTC pages alike."""
    client, _ = lister
    newest = Job.objects.order_by("-created_at").first().created_at
    in_utc = client.get("/api/jobs/", {"cursor": cursor(p=str(newest))}).json()
    at_plus_two = client.get("/api/jobs/", {"cursor": cursor(
        p=newest.astimezone(dt_timezone(timedelta(hours=2))).isoformat())}).json()
    assert [r["id"] for r in at_plus_two["results"]] == [r["id"] for r in in_utc["results"]]
    assert len(in_utc["results"]) == 2


# --- generated ------------------------------------------------------------------------

def _two(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(lambda n: f"{n:02d}")


# A date in the shape parse_datetime reads, each field from a little below
# its range to a little past it, with or without fraction and offset.
_OFFSETS = st.one_of(st.just(""), st.just("Z"),
                     st.builds("{}{}:{}".format, st.sampled_from("+-"), _two(0, 25), _two(0, 61)))
_DATES = st.builds(
    "{}-{}-{}{}{}:{}:{}{}{}".format,
    st.integers(0, 10001).map(lambda n: f"{n:04d}"), _two(0, 13), _two(0, 32), st.sampled_from(["T", " "]),
    _two(0, 25), _two(0, 61), _two(0, 61), st.sampled_from(["", ".5", ".999999", ".0000001"]), _OFFSETS)
# Times the API could have written: any aware instant, in UTC or at an offset.
_REAL = st.builds(
    lambda at, minutes: str(at.astimezone(dt_timezone(timedelta(minutes=minutes)))),
    st.datetimes(min_value=timezone.datetime(1, 1, 2), max_value=timezone.datetime(9999, 12, 30),
                 timezones=st.just(dt_timezone.utc)),
    st.integers(-23 * 60 - 59, 23 * 60 + 59))
_TEXT = st.text(max_size=40)
_PAYLOADS = st.fixed_dictionaries({}, optional={
    "o": st.one_of(st.integers(-2, 2000).map(str), _TEXT),
    "r": st.one_of(st.sampled_from(["0", "1", "2", "-1", ""]), _TEXT),
    "p": st.one_of(_DATES, _REAL, _TEXT),
})
CURSORS = st.one_of(
    _PAYLOADS.map(lambda tokens: cursor(**tokens)),
    st.binary(max_size=80).map(lambda raw: base64.b64encode(raw).decode("ascii")),
    st.binary(max_size=80).map(lambda raw: base64.urlsafe_b64encode(raw).decode("ascii")),
    _TEXT,
)


@hypothesis_settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=CURSORS, which=st.integers(0, len(LISTS)))
def test_no_cursor_makes_a_list_answer_5xx(value, which, lister):
    client, paths = lister
    check_cursor(client, paths[which], value)


def test_every_cursor_the_lists_give_out_is_taken_back(lister):
    client, paths = lister
    for path in paths[:3]:
        page = client.get(path, {"page_size": "1"}).json()
        while page["next"]:
            page = client.get(page["next"]).json()
            back = client.get(page["previous"]) if page["previous"] else None
            assert back is None or back.status_code == 200
        assert page["results"], path

