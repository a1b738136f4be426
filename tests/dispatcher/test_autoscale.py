"""dispatcher/autoscale.py: the work an autoscaler sees and the hosts it is
told to run, table-driven."""
from __future__ import annotations

import pytest

from dispatcher import lane_work, slots_per_host, suggested_hosts

# (work_s, jobs, target_s, slots per host) -> hosts
CASES = [
    (0.0, 0, 300, 4, 0),            # nothing to do: no host needed
    (0.5, 1, 300, 4, 1),            # one thumbnail: one host, however small
    (600.0, 2000, 300, 4, 1),       # 2,000 thumbnails of 0.3 s: 2 slots' worth, one host (not 500)
    (600_000.0, 2000, 300, 4, 500),  # 2,000 five-minute videos: 2,000 slots' worth
    (1200.0, 1, 300, 4, 1),          # one long video: one slot, whatever its length
    (1200.0, 3, 300, 1, 3),          # three of them on one-slot hosts: three hosts, not four
    (1201.0, 100, 300, 4, 2),        # 5 slots' worth: two hosts of four
]


@pytest.mark.parametrize("work_s, jobs, target_s, slots, hosts", CASES)
def test_suggested_hosts_clear_the_work_within_the_target_never_more_slots_than_jobs(work_s, jobs, target_s, slots,
                                                                                     hosts):
    assert suggested_hosts(work_s=work_s, jobs=jobs, target_s=target_s, slots_per_host=slots) == hosts


def test_the_work_is_the_estimates_corrected_by_the_measured_ratio():
    work = lane_work({"waiting": 10, "in_flight": 2, "waiting_cost_s": 100.0, "in_flight_cost_s": 20.0,
                      "served_s": 5000.0, "cost_ratio": 1.5})
    assert (work.jobs, work.waiting_work_s, work.in_flight_work_s, work.work_s) == (12, 150.0, 30.0, 180.0)
    assert work.served_s == 5000.0


@pytest.mark.parametrize("ratio", [0, -1, float("nan"), float("inf"), None])
def test_a_ratio_that_is_not_a_positive_number_leaves_the_estimates_as_they_are(ratio):
    work = lane_work({"waiting": 1, "in_flight": 0, "waiting_cost_s": 7.0, "in_flight_cost_s": 0.0,
                      "served_s": 0.0, "cost_ratio": ratio})
    assert (work.cost_ratio, work.waiting_work_s) == (1.0, 7.0)


@pytest.mark.parametrize("live, configured, slots", [
    ([4, 4, 8], 0, 5), ([], 0, 1), ([4], 16, 16), ([0, 0], 0, 1),
])
def test_slots_per_host_are_configured_or_the_live_workers_mean(live, configured, slots):
    assert slots_per_host(live, configured=configured) == slots
