"""A slow request is logged with where its time went (project/request_timing.py):
the front door's wait for a thread (its header, project/web_gate.py), its
CPU and its database calls; a request under the threshold is not."""
from __future__ import annotations

import itertools
import logging

import pytest

from project import request_timing

pytestmark = pytest.mark.django_db


@pytest.fixture
def slow_clock(monkeypatch):
    """Every request takes 3 s in Django, as the log's clock sees it."""
    ticks = itertools.count(0, 3.0)
    monkeypatch.setattr(request_timing, "_clock", lambda: next(ticks))


def slow_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "fairlane.slow"]


def test_a_slow_request_is_logged_with_its_wait_cpu_and_queries(make_user, api_client_for, settings, slow_clock,
                                                                 caplog):
    settings.FAIRLANE_SLOW_REQUEST_MS = 2000
    alice = make_user("alice")
    with caplog.at_level(logging.WARNING, logger="fairlane.slow"):
        resp = api_client_for(alice).get("/api/batches/", HTTP_X_FAIRLANE_GATE_WAIT_MS="7")
    assert resp.status_code == 200
    [line] = slow_lines(caplog)
    assert line.startswith(f'slow request: "GET /api/batches/" 200 user {alice.pk}: 3000 ms in Django '
                           "(front door wait 7 ms), CPU "), line
    queries = int(line.split(" queries")[0].rsplit(" ", 1)[1])
    assert queries >= 1 and "(slowest " in line, line  # at least the token's


def test_a_request_under_the_threshold_or_with_the_log_off_is_not_logged(make_user, api_client_for, settings,
                                                                         slow_clock, caplog):
    alice = make_user("alice")
    client = api_client_for(alice)
    with caplog.at_level(logging.WARNING, logger="fairlane.slow"):
        settings.FAIRLANE_SLOW_REQUEST_MS = 3001
        client.get("/api/batches/")
        settings.FAIRLANE_SLOW_REQUEST_MS = 0
        client.get("/api/batches/")
    assert slow_lines(caplog) == []


def test_a_wait_the_front_door_did_not_measure_shows_as_unknown(make_user, api_client_for, settings, slow_clock,
                                                                caplog):
    settings.FAIRLANE_SLOW_REQUEST_MS = 1
    alice = make_user("alice")
    with caplog.at_level(logging.WARNING, logger="fairlane.slow"):
        api_client_for(alice).get("/api/batches/", HTTP_X_FAIRLANE_GATE_WAIT_MS="soon")
    [line] = slow_lines(caplog)
    assert "(front door wait - ms)" in line, line
