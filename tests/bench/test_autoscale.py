"""The autoscaling simulation's parts (bench/autoscale.py): the day it
replays, the autoscaler's rule, billing and protection, the targets'
verdicts, and a scale-in through the dispatcher's own Lua on a simulated
clock. If these are wrong, `make bench-autoscale`'s numbers mean nothing."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from bench import autoscale
from bench.autoscale import (
    BILLING_S,
    BURST_UPLOAD_S,
    BURSTS,
    CHUNK_S,
    CHUNK_THRESHOLD_S,
    ESTIMATE_PER_VIDEO_S,
    IDLE_UNPROTECT_S,
    SCENARIOS,
    UPLOADS_PER_DAY,
    Host,
    Job,
    Simulation,
    billed_s,
    durations_model,
    evaluate,
    name,
    pct,
    scale_step,
    workload,
)

MEDIA = json.loads((autoscale.RESULTS / "media.json").read_text())


def test_durations_are_a_line_through_each_clips_median_run_with_the_runs_spread():
    media = {"overhead": [{"clip_s": 1, "job_runs_s": [2.0, 3.0, 4.0]},
                          {"clip_s": 3, "job_runs_s": [6.0, 7.0, 8.0]}]}
    fixed, per_s, spread = durations_model(media)
    assert (fixed, per_s) == pytest.approx((1.0, 2.0))
    assert sorted(spread) == pytest.approx(sorted([2 / 3, 1.0, 4 / 3, 6 / 7, 1.0, 8 / 7]))


@pytest.fixture(scope="module")
def day() -> list[Job]:
    return workload(36, MEDIA)


def test_a_day_is_a_month_of_800000_uploads_over_30_days(day):
    uploads = len({job.file for job in day})
    assert abs(uploads - UPLOADS_PER_DAY) / UPLOADS_PER_DAY < 0.03
    assert [job.arrival for job in day] == sorted(job.arrival for job in day)


def test_each_burst_is_thousands_of_one_customers_files_within_minutes(day):
    files = {}
    for job in day:
        if not job.light:
            files.setdefault(job.customer, {})[job.file] = job.arrival
    for hour, customer, count, _ in BURSTS:
        arrivals = [at for at in files[customer].values() if hour * 3600 <= at <= hour * 3600 + BURST_UPLOAD_S]
        assert len(arrivals) == count
    assert sum(len(f) for f in files.values()) == sum(count for _, _, count, _ in BURSTS)


def test_videos_over_a_minute_are_chunks_of_at_most_30_media_seconds_of_one_upload(day):
    jobs_per_file = Counter(job.file for job in day)
    chunked = [job for job in day if jobs_per_file[job.file] > 1]
    assert chunked, "the day has long videos"
    assert max(job.estimate for job in chunked) <= ESTIMATE_PER_VIDEO_S * CHUNK_S + 1e-9
    assert max(job.estimate for job in day) <= ESTIMATE_PER_VIDEO_S * CHUNK_THRESHOLD_S + 1e-9
    by_file = {}
    for job in chunked:
        by_file.setdefault(job.file, set()).add((job.customer, job.arrival, job.estimate))
    assert all(len(parts) == 1 for parts in by_file.values())  # one upload's chunks: same owner, time, length


def test_the_same_seed_replays_the_same_day(day):
    again = workload(36, MEDIA)
    assert [(j.id, j.customer, j.arrival, j.actual) for j in again] == [
        (j.id, j.customer, j.arrival, j.actual) for j in day]


@pytest.mark.parametrize(("wanted", "up", "asked", "removed", "change"), [
    (5, 2, [5], 0, 3),  # out at once
    (2, 2, [2], 0, 0),
    (1, 6, [1, 4, 2, 1], 0, -2),  # in only to the window's largest ask
    (1, 9, [1], 0, -4),  # at most four a minute
    (1, 9, [1], 3, -1),
    (1, 9, [1], 4, 0),
    (1, 2, [3, 1], 0, 0),
])
def test_the_autoscaler_scales_out_at_once_and_in_slowly(wanted, up, asked, removed, change):
    assert scale_step(wanted=wanted, up=up, asked_recently=asked, removed_last_minute=removed) == change


@pytest.mark.parametrize(("seconds", "periods"), [(0, 1), (1, 1), (BILLING_S, 1), (BILLING_S + 1, 2),
                                                  (3 * BILLING_S, 3)])
def test_a_host_is_billed_whole_periods_from_its_launch(seconds, periods):
    assert billed_s(100.0, 100.0 + seconds) == periods * BILLING_S


def test_a_host_is_protected_from_its_start_while_busy_and_until_idle_for_a_while():
    host = Host("h0", launched=0.0)
    assert not host.protected(0.0)  # still starting: nothing to lose
    host.ready, host.last_busy = True, 180.0
    assert host.protected(180.0)
    assert not host.protected(180.0 + IDLE_UNPROTECT_S)
    host.running["j1"] = 300.0
    assert host.protected(10_000.0)
    host.running.clear()
    host.last_busy = 400.0
    assert host.protected(400.0 + IDLE_UNPROTECT_S - 1)
    assert not host.protected(400.0 + IDLE_UNPROTECT_S)


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (pct(values, 50), pct(values, 99), pct(values, 100)) == (50.0, 99.0, 100.0)
    assert pct([], 99) == 0.0


def fake_results(*, jobs_p99: float, work_p99: float, jobs_h: float, work_h: float, handed: int) -> dict:
    results = {}
    for signal, mode, protect in SCENARIOS:
        results[name(signal, mode, protect)] = {
            "light_wait_s": {"p99": work_p99 if signal == "work" else jobs_p99},
            "host_hours": work_h if signal == "work" else jobs_h,
            "handed_back": handed if protect else 7,
        }
    return results


def test_the_targets_are_half_the_p99_wait_at_most_1_1x_the_host_hours_and_nothing_handed_back():
    met = evaluate(fake_results(jobs_p99=800.0, work_p99=400.0, jobs_h=100.0, work_h=110.0, handed=0))
    assert all(target["pass"] for target in met.values())
    missed = evaluate(fake_results(jobs_p99=800.0, work_p99=401.0, jobs_h=100.0, work_h=110.5, handed=1))
    assert not any(target["pass"] for target in missed.values())


def scale_in_run(redis_client, *, protect: bool) -> Simulation:
    """Eight jobs at once on one host of four slots: two of 50 s, six of
    1,000 s. Scaling on jobs (1.5 a slot) asks for a second host, then, when
    the two short ones end, for one again: five minutes later one host goes
    while both run long jobs."""
    actual = [1000.0, 50.0, 50.0] + [1000.0] * 5
    jobs = [Job(f"j{i}", i, "c", True, 0.0, cost, cost) for i, cost in enumerate(actual)]
    sim = Simulation(redis_client, jobs, signal="jobs", mode="fifo", protect=protect, jobs_per_slot=1.5, seed=1,
                     lane="autoscale-test", hours=0.5)
    sim.run()
    return sim


def test_without_protection_scale_in_hands_back_running_jobs_which_then_finish(redis_client):
    sim = scale_in_run(redis_client, protect=False)
    report = sim.report()
    assert report["hosts_launched"] == 2
    assert report["handed_back"] >= 2 and report["lost_work_s"] > 0
    assert report["finished"] == 8 and report["unfinished"] == 0


def test_with_protection_scale_in_waits_for_an_idle_host_and_hands_back_nothing(redis_client):
    sim = scale_in_run(redis_client, protect=True)
    report = sim.report()
    assert report["hosts_launched"] == 2
    assert report["handed_back"] == 0 and report["finished"] == 8
    removed = [host for host in sim.hosts.values() if host.draining]
    assert len(removed) == 1  # a scale-in happened, later: the host that went had been idle for a while
    assert removed[0].stopped - removed[0].last_busy >= IDLE_UNPROTECT_S
