"""/metrics' job counters and histograms: jobs that end together (a batch's
cancel) are counted in one round trip to Redis, and count exactly as the
same jobs observed one by one."""
from __future__ import annotations

import math

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from project import metrics
from tests.backlogs import files_with_jobs
from uploads import services

pytestmark = pytest.mark.django_db
FAMILIES = ("fairlane_jobs", "fairlane_job_wait_seconds", "fairlane_job_processing_seconds")


def job_samples(client) -> dict[tuple[str, tuple], float]:
    resp = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken")
    assert resp.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.content.decode()) if family.name in FAMILIES
            for s in family.samples}


@pytest.fixture
def round_trips(monkeypatch) -> list[int]:
    """The metrics' pipelines sent to Redis (each one round trip): how many
    commands each held."""
    sent: list[int] = []
    execute = redis.client.Pipeline.execute

    def counted(self, *args, **kwargs):
        keys = {str(command[1]) for command, _ in self.command_stack if len(command) > 1}
        if any(key.startswith(("metrics:", "b'metrics:")) for key in keys):
            sent.append(len(self.command_stack))
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    return sent


def test_jobs_ended_together_count_as_each_alone_in_one_round_trip(client, redis_client, settings, round_trips):
    settings.METRICS_TOKEN = "t0ken"
    ended = [metrics.JobEnded("cpu-transcode", "image", "canceled" if i % 4 else "succeeded",
                              None if i % 3 == 0 else 0.07 * i, None if i % 2 else 0.3 + i) for i in range(40)]
    ended.append(metrics.JobEnded("cpu-transcode", "video", "failed", 12.0, 400.0))
    for job in ended:
        metrics.observe_job(**job._asdict())
    assert len(round_trips) == len(ended)
    one_by_one = sum(round_trips)
    alone = job_samples(client)
    assert alone[("fairlane_jobs_total", (("kind", "image"), ("lane", "cpu-transcode"),
                                          ("outcome", "canceled")))] == 30

    redis_client.flushdb()
    round_trips.clear()
    metrics.observe_jobs(ended)
    [commands] = round_trips  # one command a field that changed, not one a job's field
    assert commands < one_by_one / 3
    together = job_samples(client)
    assert together.keys() == alone.keys()
    assert together == {name: pytest.approx(value) for name, value in alone.items()}


def test_a_cancel_of_many_waiting_jobs_counts_them_in_one_round_trip(
        make_user, client, redis_client, settings, round_trips, django_capture_on_commit_callbacks):
    """Issue 32: a 5,000-job cancel counted each job in a round trip of its
    own, 5,000 on the web's thread and on the Redis every user shares."""
    settings.METRICS_TOKEN = "t0ken"
    alice = make_user("alice")
    _, jobs = files_with_jobs(alice, 300)
    with django_capture_on_commit_callbacks(execute=True):
        canceled = services.jobs_cancel(job_ids=[job.id for job in jobs], actor=alice)
    assert len(canceled) == 300
    # One round trip a chunk of the cancel's, of one field: canceled jobs of one lane and kind, no times.
    assert round_trips == [1] * math.ceil(300 / services.BULK_CHUNK)
    assert job_samples(client)[("fairlane_jobs_total", (("kind", "unknown"), ("lane", "cpu-transcode"),
                                                         ("outcome", "canceled")))] == 300
