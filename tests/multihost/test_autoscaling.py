"""Autoscaling on several hosts (issue 36): an autoscaler that reads
`fairlane_suggested_hosts` from /metrics adds a worker host when a burst
arrives and removes one when the suggestion falls, stopping only a host
that its own scale-in protection (the ECS provider, against a stand-in
agent per host) says is idle. No job is handed back, none is lost.

Beside the burst runs a job held by the test (tests/dispatcher/
hold_tasks.py), so the suggestion falls to one host while a host is still
busy with it, whatever the machine's speed: the autoscaler must pass over
that busy host and stop the idle one. The held job is let go only after
the scale-in. The drain's grace period is cut to half a second, so a host
stopped while it runs a job would hand it back (an `interrupted` attempt):
the test fails if the autoscaler ever removes a busy host.

Run by bin/test as its own pytest run (`FAIRLANE_MULTIHOST=1 pytest -m
multihost`), as root (network namespaces).
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import redis as redis_lib

import dispatcher
from project.lanes import Lane
from tests.dispatcher.hold_tasks import flag
from tests.media import make_video
from tests.multihost.autoscaler import Autoscaler
from tests.multihost.cluster import SHARED
from tests.promise import TERMINAL, promise_kept, submit_batch, wait_for
from uploads.models import Job, JobAttempt

pytestmark = [pytest.mark.multihost, pytest.mark.django_db(transaction=True)]

IDLE_UNPROTECT_S = 2.0


@pytest.fixture
def media(tmp_path) -> dict[str, Path]:
    from PIL import Image

    image = tmp_path / "photo.png"
    Image.new("RGB", (320, 240), (40, 120, 200)).save(image)
    return {"video": make_video(tmp_path / "clip.mp4", seconds=4, size="640x360"), "image": image}


def test_an_autoscaler_adds_a_host_under_a_burst_and_removes_an_idle_one_when_the_suggestion_falls(
        hosts, make_user, api_client_for, media, settings):
    settings.METRICS_TOKEN = "autoscaler"
    # Small, so that a burst of short videos asks for more than one host of one slot.
    settings.FAIRLANE_SCALE_TARGET_S = 4.0
    settings.FAIRLANE_SCALE_HOST_SLOTS = 1
    hosts("io-a", "io", concurrency=4)
    scaler = Autoscaler(
        start_host=lambda name, env: hosts(name, env=env), address=SHARED["network"].address,
        lane=Lane.CPU_TRANSCODE.value, max_hosts=2, stabilise_s=3.0,
        worker_env={"FAIRLANE_IDLE_UNPROTECT_S": str(IDLE_UNPROTECT_S), "FAIRLANE_SHUTDOWN_GRACE_S": "0.5"})
    client = redis_lib.Redis.from_url(settings.FAIR_REDIS_URL)
    held = f"held-{uuid.uuid4().hex[:8]}"
    try:
        first = scaler.add_host()
        first.agent.wait_for(lambda: first.agent.protected, 30, "the first host to protect itself at its start")
        heavy, light = submit_batch(make_user, api_client_for, media, videos=6, images=2)
        jobs = heavy + light
        # A job of another user that keeps its host busy until the scale-in.
        assert dispatcher.enqueue("bench.cpu.hold", [held], task_id=held, fair_key="autoscale-held", cost=1.0)
        deadline = time.monotonic() + 300
        while not (scaler.removed and Job.objects.filter(id__in=jobs, status__in=TERMINAL).count() == len(jobs)):
            assert time.monotonic() < deadline, f"no scale-in after the burst: {scaler.actions}"
            scaler.step()
            time.sleep(0.5)
        held_by = client.get(flag(held, "started"))
        assert held_by is not None and not client.exists(flag(held, "done")), "the held job ran to the scale-in"
        client.set(flag(held, "go"), 1)
        wait_for(lambda: client.exists(flag(held, "done")), 60, "the held job to end once let go")
        promise_kept(jobs)
    finally:
        client.set(flag(held, "go"), 1)
        scaler.close()

    t0 = scaler.actions[0][0] if scaler.actions else 0.0
    print("autoscaler:", [(round(at - t0, 1), kind, host) for at, kind, host in scaler.actions])
    print("passed over at each scale-in:", scaler.passed_over)
    kinds = [kind for _, kind, _ in scaler.actions if kind != "wait"]  # wait: all hosts were protected
    assert kinds[:2] == ["out", "in"], scaler.actions  # a host added under the burst, one removed after
    added = [name for _, kind, name in scaler.actions if kind == "out"]
    [holder] = [h.name for h in scaler.hosts + scaler.removed if h.worker.name == held_by.decode()]
    ran = {attempt.worker.rpartition(":")[0] for attempt in JobAttempt.objects.filter(job_id__in=jobs)}
    # Both hosts took work (the burst's jobs, or the held one), and no other did.
    assert ran <= {"cpu-1", *added} and ran | {holder} == {"cpu-1", *added}, (ran, holder)
    # Nothing handed back, nothing run twice: every job's one attempt succeeded.
    assert set(JobAttempt.objects.filter(job_id__in=jobs).values_list("outcome", flat=True)) == {"succeeded"}
    assert {job.attempts for job in Job.objects.filter(id__in=jobs)} == {1}
    # The first scale-in came while the held job ran: the autoscaler passed
    # over its busy, protected host and stopped the idle one.
    stopped, protected = scaler.passed_over[0]
    assert protected == [holder] and stopped != holder, (scaler.passed_over, holder)
    for gone in scaler.removed:
        # Protected from its start, unprotected (idle) when it was stopped,
        # and nothing handed back by its drain.
        assert gone.agent.protections()[0] is True and gone.agent.protections()[-1] is False
        assert "handed back" not in gone.worker.log.read_text(errors="replace")
