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


def test_a_repeated_warning_is_written_once_an_interval_and_then_says_how_many_were_held():
    """While Redis is out of reach every request warns the same: one line a
    minute for each kind, with the count, and a different warning (another
    user's, another logger's) still written at once."""
    from project.loglevels import RepeatedWarnings

    repeats = RepeatedWarnings(interval_s=60, most=2)
    now = [100.0]
    repeats._clock = lambda: now[0]

    def record(msg="API rates: not counted, Redis unavailable: %r", args=("refused",), name="uploads.throttling",
               level=logging.WARNING):
        return logging.LogRecord(name, level, __file__, 1, msg, args, None)

    assert repeats.filter(record())
    assert not any(repeats.filter(record()) for _ in range(500))
    assert repeats.filter(record(args=("timeout",)))  # other arguments: another kind
    assert repeats.filter(record(level=logging.INFO)) and repeats.filter(record(level=logging.INFO))
    now[0] += 59.9
    assert not repeats.filter(record())
    now[0] += 0.2
    again = record()
    assert repeats.filter(again)
    assert again.getMessage() == "API rates: not counted, Redis unavailable: 'refused' (501 more like this in the " \
                                 "last 60 s)"
    assert repeats.filter(record(name="uploads.batch_summary"))  # a third kind: the oldest forgotten
    assert repeats.filter(record(args=("timeout",)))  # forgotten, so written again
    assert RepeatedWarnings(interval_s=0).filter(record()) and RepeatedWarnings(interval_s=0).filter(record())


def test_the_console_handler_holds_repeats():
    [console] = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)
                 and any(type(f).__name__ == "RepeatedWarnings" for f in h.filters)]
    assert console.filters[0].interval_s == 60
