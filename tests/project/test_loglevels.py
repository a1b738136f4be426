"""Records nobody can act on are logged at the level they deserve
(project/loglevels.py), through the logging settings every process uses."""
from __future__ import annotations

import logging

import pytest


@pytest.mark.parametrize(("msg", "args", "level"), [
    ("Inspect method %s failed", ("stats",), "INFO"),  # no worker answered (none up yet)
    ("Inspect method %s failed: %s", ("stats", "Connection refused"), "WARNING"),  # the broker is the trouble
    ("Worker inspection failed: %s", ("boom",), "WARNING"),
])
def test_flower_asking_workers_that_are_not_up_yet_is_no_warning(caplog, msg, args, level):
    logger = logging.getLogger("flower.inspector")
    with caplog.at_level(logging.INFO):
        logger.warning(msg, *args)
    [record] = [r for r in caplog.records if r.name == "flower.inspector"]
    assert record.levelname == level


@pytest.mark.parametrize(("status", "logged"), [(429, False), (404, True), (400, True)])
def test_a_rate_refusal_has_its_access_line_only(caplog, status, logged):
    """django.request's WARNING for a 429 doubled the lines (and a fifth of
    the CPU) of answering a client that ignores Retry-After."""
    with caplog.at_level(logging.INFO):
        logging.getLogger("django.request").warning("Refused: %s", "/api/batches/", extra={"status_code": status})
    assert [r.levelname for r in caplog.records if r.name == "django.request"] == (["WARNING"] if logged else [])
