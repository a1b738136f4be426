"""Human units on the pages (uploads/facts.py; pages.js's duration follows
the same rules in the browser)."""
from __future__ import annotations

import pytest

from uploads.facts import bytes_text, duration_text, rate_text


@pytest.mark.parametrize(("seconds", "text"), [
    (None, ""), (0, "0 ms"), (0.0854, "85 ms"), (0.9994, "999 ms"), (1, "1.0 s"), (4.25, "4.2 s"),
    (9.94, "9.9 s"), (10, "10 s"), (42.4, "42 s"), (59.6, "1 min 0 s"), (179.171, "2 min 59 s"),
    (180.04, "3 min 0 s"), (3599, "59 min 59 s"), (3600, "1 h 0 min"), (3725, "1 h 2 min"), (90_061, "25 h 1 min"),
])
def test_durations_read_as_people_say_them(seconds, text):
    assert duration_text(seconds) == text


@pytest.mark.parametrize(("size", "text"), [
    (None, ""), (0, "0 bytes"), (999, "999 bytes"), (1000, "1.0 kB"), (464_012, "464.0 kB"),
    (123_456_789, "123.5 MB"), (2_147_483_648, "2.1 GB"),
])
def test_sizes_are_in_decimal_units(size, text):
    assert bytes_text(size) == text


def test_rates_group_their_thousands():
    assert (rate_text(None), rate_text(429.4), rate_text(5012)) == ("", "429 kbit/s", "5,012 kbit/s")
