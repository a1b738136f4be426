"""bench/handover.py's arithmetic: a hand-over between two jobs of one
child is split at the probe's events, on one clock; one with an event
missing or out of order is counted as skipped, not guessed; the gap that
0.98 utilisation allows follows from the mean job."""
from __future__ import annotations

import pytest

from bench.handover import STEPS, handovers, summarize


def _runs() -> dict[str, dict]:
    return {
        "a-1": {"pid": 10, "start": 0.000, "end": 0.050},
        "a-2": {"pid": 10, "start": 0.0530, "end": 0.1030},
        "a-3": {"pid": 10, "start": 0.1060, "end": 0.1560},
        "b-1": {"pid": 11, "start": 0.000, "end": 0.500},
        "b-2": {"pid": 11, "start": 0.5020, "end": 1.0},
    }


def _events() -> list[tuple[float, int, str, str]]:
    return [
        # a-1 -> a-2: success +0.5 ms, finish 0.6 ms, parent 0.9 ms, child 0.8 ms, start 0.2 ms
        (0.0505, 10, "success", "a-1@t1"), (0.0511, 10, "postrun", "a-1@t1"),
        (0.0520, 1, "received", "a-2@t2"), (0.0528, 10, "prerun", "a-2@t2"),
        # a-2 -> a-3: the next message arrived before the previous job's postrun (out of order)
        (0.1035, 10, "success", "a-2@t2"), (0.1045, 10, "postrun", "a-2@t2"),
        (0.1040, 1, "received", "a-3@t3"), (0.1055, 10, "prerun", "a-3@t3"),
        # b-1 -> b-2: no received event (a lost line)
        (0.5005, 11, "success", "b-1"), (0.5006, 11, "postrun", "b-1"), (0.5015, 11, "prerun", "b-2"),
    ]


def test_a_handover_is_split_at_the_probes_events_by_job_id():
    steps, skipped = handovers(_runs(), _events(), 0.0, 1.0)
    assert len(steps) == 1 and len(steps[0]) == len(STEPS)
    assert [round(s * 1000, 3) for s in steps[0]] == [0.5, 0.6, 0.9, 0.8, 0.2]
    assert skipped == 2  # one out of order, one missing an event


def test_only_handovers_whose_next_job_starts_inside_the_interval_count():
    steps, skipped = handovers(_runs(), _events(), 0.06, 1.0)  # a-2 started before 0.06
    assert steps == [] and skipped == 2
    assert handovers(_runs(), _events(), 0.0, 0.053) == ([], 0)  # a-2 starts at the end: outside


def test_the_gap_that_098_allows_follows_from_the_mean_job():
    steps = [[0.0005, 0.0006, 0.0009, 0.0008, 0.0002], [0.0005, 0.0010, 0.0009, 0.0008, 0.0002]]
    res = summarize([{"steps": steps, "skipped": 1, "utilisation": 0.97, "idle_ms_per_job": 3.0,
                      "mean_job_ms": 100.0}])
    assert res["gap_ms_for_098"] == pytest.approx(100 * (1 / 0.98 - 1), abs=1e-3)
    assert res["steps_ms"]["finish"] == {"p50": 0.8, "mean": 0.8}
    assert res["gap_ms"]["mean"] == pytest.approx(3.2, abs=1e-3)
    assert res["gap_ms_without_finish_mean"] == pytest.approx(2.4, abs=1e-3)
    assert res["handovers"] == 2 and res["skipped"] == 1
