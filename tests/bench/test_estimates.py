"""bench/estimates.py's scoring: the error at every whole minute after the
first, against the real finish, hindsight's, the parts before and after a
heavy user's arrival, and the target's verdict (pure, numbers chosen here)."""
from __future__ import annotations

import pytest

from bench.estimates import score


def sample(t: float, ended: int, estimate_s: float | None, *, low: float = 0.0, high: float = 1e9,
           baseline_s: float | None = 1.0) -> dict:
    return {"t": t, "ended": ended, "estimate_s": estimate_s, "low_s": low, "high_s": high,
            "baseline_s": baseline_s}


def test_only_whole_minutes_after_the_first_before_the_end_are_scored():
    # 100 files in 240 s; asked every 30 s.
    samples = [sample(30, 10, 999), sample(60, 25, 180 * 1.2, low=150, high=250), sample(90, 35, 999),
               sample(120, 50, 120 * 0.7, low=100, high=110), sample(180, 80, 60), sample(240, 100, None)]
    r = score({"files": 100, "duration_s": 240.0, "heavy_at_s": None, "samples": samples})
    scored = [s for s in r["samples"] if "error" in s]
    assert [s["t"] for s in scored] == [60, 120, 180]  # 30 and 90 are not whole minutes; at 240 it has ended
    assert [s["error"] for s in scored] == [pytest.approx(0.2), pytest.approx(-0.3), 0.0]
    assert [s["in_range"] for s in scored] == [True, False, True]
    # hindsight: files left at 240 s / 100 files each
    assert scored[0]["hindsight_error"] == pytest.approx((75 * 2.4 - 180) / 180)
    a = r["all"]
    assert a["minutes"] == 3 and a["median_abs_error"] == pytest.approx(0.2)
    assert a["worst_error"] == pytest.approx(-0.3) and a["worst_at_s"] == 120
    assert a["within_target"] == 2 and a["in_range"] == 2
    assert a["baseline_worst_error"] == pytest.approx((1 - 180) / 180, abs=1e-4)
    assert r["files_per_minute"] == [25, 25, 30]


def test_a_heavy_users_arrival_splits_the_minutes():
    samples = [sample(60, 30, 100), sample(120, 50, 60), sample(180, 60, 120)]
    r = score({"files": 100, "duration_s": 300.0, "heavy_at_s": 130.0, "samples": samples})
    assert r["before_heavy"]["minutes"] == 2 and r["after_heavy"]["minutes"] == 1
    assert r["after_heavy"]["worst_error"] == pytest.approx(0.0)
    assert r["files_per_minute"] == [30, 20]  # while the share was unchanged


def test_the_previous_rates_are_scored_beside_the_estimate_when_the_run_has_them():
    samples = [{**sample(60, 30, 100), "previous_s": 150.0}, {**sample(120, 50, 60), "previous_s": 30.0},
               sample(180, 60, 120)]  # a sample without the previous figure (a saved run from before)
    r = score({"files": 100, "duration_s": 300.0, "heavy_at_s": None, "samples": samples})
    assert [s.get("previous_error") for s in r["samples"]] == [pytest.approx(150 / 240 - 1, abs=1e-4),
                                                               pytest.approx(30 / 180 - 1, abs=1e-4), None]
    assert r["all"]["previous_worst_error"] == pytest.approx(30 / 180 - 1, abs=1e-4)
    assert r["all"]["previous_median_abs_error"] == pytest.approx(((1 - 150 / 240) + (1 - 30 / 180)) / 2, abs=1e-4)
