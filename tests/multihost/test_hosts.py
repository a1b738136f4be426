"""Fairlane on several hosts: worker hosts are network namespaces on one
bridge, each with its own host name; PostgreSQL, Redis and SeaweedFS are
private instances on the bridge; web is this process (the main namespace).

Every scenario checks the promise for every job (tests/promise.py): it ends
terminal, succeeded once, its outputs stored once under the attempt that
won, one summary email per batch; and the other user's jobs are unaffected.

Run by bin/test as its own pytest run (`FAIRLANE_MULTIHOST=1 pytest -m
multihost`), as root (network namespaces).
"""
from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

import dispatcher
from project.lanes import Lane
from tests.media import make_video
from tests.multihost.cluster import CLUSTER_ENV, SHARED
from tests.promise import (
    assert_swept_within_one_turn,
    lease_held,
    post,
    promise_kept,
    submit_batch,
    wait_all_terminal,
    wait_for,
)
from tests.workers import running_job_held
from uploads.models import Job, JobAttempt

pytestmark = [pytest.mark.multihost, pytest.mark.django_db(transaction=True)]

LEASE_S, SWEEP_S = float(CLUSTER_ENV["FAIRLANE_JOB_LEASE_S"]), float(CLUSTER_ENV["FAIR_RECONCILE_S"])


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """Videos long enough to be caught mid-transcode, and a small image."""
    folder = tmp_path_factory.mktemp("multihost-media")
    from PIL import Image

    image = folder / "photo.png"
    Image.new("RGB", (320, 240), (40, 120, 200)).save(image)
    return {"video": make_video(folder / "clip.mp4", seconds=4, size="640x360"), "image": image}


def host_of(attempt: JobAttempt) -> str:
    return attempt.worker.rpartition(":")[0]


def current_host(job: Job) -> str | None:
    """Where the job's current attempt runs (None for a moment after the
    claim: the attempt's row follows the job's update)."""
    attempt = job.attempt_log.filter(number=job.attempts).first()
    return None if attempt is None else host_of(attempt)


def running_on(host: str, job_ids: list[str]) -> Job | None:
    """A job of `job_ids` in progress on `host`."""
    for job in Job.objects.filter(id__in=job_ids, status="running", progress__gte=1):
        if current_host(job) == host:
            return job
    return None


def hosts_that_ran(job_ids: list[str]) -> set[str]:
    return {host_of(a) for a in JobAttempt.objects.filter(job_id__in=job_ids)}


def test_a_batch_of_two_users_is_processed_across_both_cpu_hosts(hosts, make_user, api_client_for, media):
    hosts("cpu-a")
    hosts("cpu-b")
    hosts("io-a", "io", concurrency=4)
    heavy, light = submit_batch(make_user, api_client_for, media, videos=4, images=2)
    wait_all_terminal(heavy + light, timeout=240)
    promise_kept(heavy + light)
    assert hosts_that_ran(heavy + light) == {"cpu-a", "cpu-b"}
    assert all(job.attempts == 1 for job in Job.objects.filter(id__in=heavy + light))


def test_a_vanished_cpu_host_s_jobs_rerun_on_the_other_counted_as_lost_not_crashed(
        hosts, make_user, api_client_for, media):
    doomed = hosts("cpu-a")
    hosts("cpu-b")
    hosts("io-a", "io", concurrency=4)
    heavy, light = submit_batch(make_user, api_client_for, media, videos=5, images=2)
    # Held (SIGSTOP) until the host vanishes: still running then, however fast the machine.
    with running_job_held(lambda: running_on("cpu-a", heavy), 120, "a transcode in progress on cpu-a") as victim:
        t_fault = time.time()
        doomed.host.vanish()  # every process SIGKILLed, its link cut: nothing left to tell anyone
    expiry = lease_held(str(victim.id), t_fault, LEASE_S)

    wait_all_terminal(heavy + light, timeout=240)
    promise_kept(heavy + light)
    lost = JobAttempt.objects.get(job=victim, number=1)
    # The sweep (on cpu-b) asked the dead host, found its registration
    # expired: a lost host, not a crash that would count toward resource_limit.
    assert (lost.outcome, lost.error_code) == ("lost", "host_lost")
    assert_swept_within_one_turn(str(victim.id), expiry, SWEEP_S)
    assert host_of(JobAttempt.objects.get(job=victim, number=2)) == "cpu-b"
    assert not JobAttempt.objects.filter(job_id__in=heavy + light, error_code="worker_lost").exists()
    assert all(a.outcome == "succeeded" for a in JobAttempt.objects.filter(job_id__in=light))


def test_a_host_with_a_skewed_clock_joins_and_leaves_while_jobs_run(hosts, make_user, api_client_for, media):
    hosts("cpu-a")
    hosts("io-a", "io", concurrency=4)
    heavy, light = submit_batch(make_user, api_client_for, media, videos=6, images=2)
    wait_for(lambda: Job.objects.filter(id__in=heavy, status="running").exists(), 120, "the batch under way")
    skewed = hosts("cpu-ahead", clock_offset_s=+120)  # joins, two minutes ahead of everyone
    wait_for(lambda: "cpu-ahead" in hosts_that_ran(heavy + light), 120, "the skewed host to take a job")
    skewed.proc.send_signal(signal.SIGTERM)  # and leaves, as a scale-in does: drain, hand back
    skewed.proc.wait(int(CLUSTER_ENV["FAIRLANE_SHUTDOWN_GRACE_S"]) + 30)

    wait_all_terminal(heavy + light, timeout=240)
    promise_kept(heavy + light)
    # Nothing was reaped or swept as lost because of the skew, nothing ran
    # twice: an attempt ended in success, or was handed back by the host that left.
    outcomes = set(JobAttempt.objects.filter(job_id__in=heavy + light).values_list("outcome", flat=True))
    assert outcomes <= {"succeeded", "interrupted"}, outcomes


def test_a_light_user_waits_about_one_job_while_a_heavy_user_floods_both_hosts(
        hosts, make_user, api_client_for, media):
    hosts("cpu-a")
    hosts("cpu-b")
    hosts("io-a", "io", concurrency=4)
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    heavy_user = make_user(f"heavy-{uuid.uuid4().hex[:6]}")
    heavy = post(api_client_for(heavy_user), [media["video"]] * 10)
    # Both hosts busy with the flood, and the window counts both hosts' slots.
    wait_for(lambda: {current_host(j) for j in Job.objects.filter(id__in=heavy, status="running")}
             == {"cpu-a", "cpu-b"},
             120, "both hosts running heavy jobs")
    assert sched.snapshot()["totals"]["window"] == 2 + sched.headroom  # one slot per host, plus the headroom

    light = post(api_client_for(make_user(f"light-{uuid.uuid4().hex[:6]}")), [media["image"]])
    # What had left the heavy backlog when the light job arrived (an upper
    # bound: read a moment after the submit).
    released_before_light = len(heavy) - sched.snapshot()["keys"][str(heavy_user.id)]["backlog"]
    wait_all_terminal(heavy + light, timeout=300)
    promise_kept(heavy + light)
    light_start = Job.objects.get(id=light[0]).started_at
    started_before = Job.objects.filter(id__in=heavy, started_at__lt=light_start).count()
    # FIFO would start it after all ten; fair dispatch, after the jobs already
    # released when it came (at most one more, released by a finish racing
    # the submit), whatever the machine's speed.
    assert started_before <= released_before_light + 1, (started_before, released_before_light)
    assert started_before < len(heavy)


# Organisation A's members submit A_JOBS_EACH videos each, B's one member as
# many as all of A's: ~57 jobs in the contest, so that the bound below (the
# longest attempt over the contest's worker time) stays under 0.05 unless
# one attempt takes nearly three times the mean (1.5 to 1.9x in four runs on
# a loaded 2-core machine, each 100 to 130 s).
A_MEMBERS, A_JOBS_EACH = 3, 10


def organisation_shares(orgs: dict[int, str]) -> dict:
    """Each organisation's share of the worker time (`orgs`: owner id ->
    organisation) while every organisation still had a job queued: the sum
    of the durations of the attempts started before the contest's end, the
    moment the first organisation's last attempt started. Whole attempts,
    not clipped at the end: what the dispatcher charges (its run time, not
    wall-clock bounds), so the shares hold on a host of any speed. With
    each owner's share of its organisation's time, the contest's size, and
    start-time fair queueing's bound on the deviation from equal shares
    for this sample (see the test)."""
    attempts = [(orgs[owner], owner, started, finished) for owner, started, finished in JobAttempt.objects
                .filter(job__owner_id__in=list(orgs)).values_list("job__owner_id", "started_at", "finished_at")]
    end = min(max(started for org, _, started, _ in attempts if org == o) for o in set(orgs.values()))
    contest = [(org, owner, (finished - started).total_seconds())
               for org, owner, started, finished in attempts if started < end]
    total = sum(seconds for _, _, seconds in contest)
    by_org = {o: sum(s for org, _, s in contest if org == o) for o in sorted(set(orgs.values()))}
    return {"shares": {o: round(t / total, 4) for o, t in by_org.items()},
            "members": {owner: round(sum(s for _, who, s in contest if who == owner) / by_org[org], 3)
                        for owner, org in orgs.items()},
            "jobs": {o: sum(org == o for org, _, _ in contest) for o in by_org},
            "worker_s": round(total, 1), "longest_s": round(max(s for _, _, s in contest), 2),
            "bound": round(max(s for _, _, s in contest) / total, 4)}


def test_an_organisation_of_three_and_one_of_one_flooding_both_hosts_get_half_the_worker_time_each(
        hosts, make_user, api_client_for, media):
    """Two-level fair dispatch across hosts: organisations A (three members)
    and B (one), equal weights, flood the cpu lane at the same moment, and
    each organisation gets half the worker time of both hosts while both
    have work queued, where a flat split between the four users would give
    A three quarters.

    Why 0.05 holds on any machine: the dispatcher charges a job its
    estimate at release (0.2 worker-seconds for these small files, less
    than any run), corrects the organisation's charge by the measured run
    time at the finish, and releases from the organisation charged less.
    Take the organisation that got more and its last release before the
    end: it was charged no more than the other then, and all it was not yet
    charged for was that job and the one in flight on the other slot,
    while all the other was charged for had run. So the two organisations'
    worker times differ by at most two attempts, and each share is within
    c_max / W of one half (c_max the longest attempt, W the contest's
    worker time): about 1/57 with 57 jobs of similar length, past 0.05
    only if one attempt takes nearly three times the mean (the measured
    bound is in the message). A simulation of this dispatch (2,000 runs
    each) deviated by 0.022 at most with attempt times spread 0.7 to 1.6x,
    by 0.029 with 0.5 to 2.5x. A per-user split is 0.25 away from the
    target (A got 0.73 in a run with A's members left in organisations of
    one): no run passes by chance."""
    from organisations import members_move, organisation_create

    hosts("io-a", "io", concurrency=4)
    tag = uuid.uuid4().hex[:6]
    org_a, org_b = organisation_create(name=f"A-{tag}"), organisation_create(name=f"B-{tag}")
    a_users = [make_user(f"a{i}-{tag}") for i in range(A_MEMBERS)]
    b_user = make_user(f"b-{tag}")
    members_move(user_ids=[u.pk for u in a_users], organisation=org_a)
    members_move(user_ids=[b_user.pk], organisation=org_b)

    # Every flood is in before a cpu host exists, so all four users are
    # queued at the first start (the lane's default window releases two
    # jobs before any worker registers; their run time is charged at their
    # finish like any other's).
    jobs = [job for user in a_users for job in post(api_client_for(user), [media["video"]] * A_JOBS_EACH)]
    jobs += post(api_client_for(b_user), [media["video"]] * (A_MEMBERS * A_JOBS_EACH))
    all_in = timezone.now()
    hosts("cpu-a")
    hosts("cpu-b")
    wait_all_terminal(jobs, timeout=240)
    promise_kept(jobs)
    assert hosts_that_ran(jobs) == {"cpu-a", "cpu-b"}
    assert JobAttempt.objects.filter(job_id__in=jobs).earliest("started_at").started_at > all_in

    orgs = {u.pk: "A" for u in a_users} | {b_user.pk: "B"}
    m = organisation_shares(orgs)
    print("organisation shares while both had work queued:", m)  # in a passing run's log too (-rP)
    per_user_a = A_MEMBERS / len(orgs)  # a flat split between four users queued throughout
    assert all(abs(share - 0.5) <= 0.05 for share in m["shares"].values()), (
        f"organisation shares {m['shares']} (target 0.50 +-0.05; a flat per-user split would give A "
        f"{per_user_a:.2f}, B {1 - per_user_a:.2f}); {m}")
    # The contest spans most of both floods: the sample the bound is about.
    assert min(m["jobs"].values()) >= A_MEMBERS * A_JOBS_EACH * 3 // 4, m


def test_seaweedfs_restarted_mid_batch_loses_nothing(hosts, make_user, api_client_for, media):
    hosts("cpu-a")
    hosts("cpu-b")
    hosts("io-a", "io", concurrency=4)
    heavy, light = submit_batch(make_user, api_client_for, media, videos=5, images=2)
    wait_for(lambda: Job.objects.filter(id__in=heavy, status="running", progress__gte=1).exists(), 120,
             "a transcode in progress")
    SHARED["s3"].restart(down_for_s=2.0)
    late = post(api_client_for(make_user(f"late-{uuid.uuid4().hex[:6]}")), [media["image"]] * 2)
    wait_all_terminal(heavy + light + late, timeout=300)
    promise_kept(heavy + light + late)
    # Attempts that met the outage were retried (a transient error), not failed.
    assert set(JobAttempt.objects.filter(job_id__in=heavy + light + late)
               .values_list("outcome", flat=True)) <= {"succeeded", "retry"}


def test_a_host_lost_mid_chunk_costs_only_that_chunk(hosts, make_user, api_client_for, tmp_path):
    from tests.conftest import CHUNKING_ENV

    doomed = hosts("cpu-a", env=CHUNKING_ENV)
    hosts("cpu-b", env=CHUNKING_ENV)
    hosts("io-a", "io", concurrency=4)
    # 720p, so that a 4 s chunk takes a few seconds: long enough to be caught running
    video = make_video(tmp_path / "long.mp4", seconds=16, size="1280x720")
    [parent_id] = post(api_client_for(make_user(f"long-{uuid.uuid4().hex[:6]}")), [video])

    def chunk_on_a() -> Job | None:
        parts = [str(i) for i in Job.objects.filter(parent_id=parent_id, part="chunk").values_list("id", flat=True)]
        return running_on("cpu-a", parts)

    with running_job_held(chunk_on_a, 120, "a chunk in progress on cpu-a") as victim:
        doomed.host.vanish()
    wait_all_terminal([parent_id], timeout=240)
    parent = Job.objects.get(id=parent_id)
    assert parent.status == "succeeded", parent.error
    assert (parent.attempts, JobAttempt.objects.get(job=parent).outcome) == (1, "split")  # not split again
    lost = JobAttempt.objects.get(job=victim, number=1)
    assert (lost.outcome, lost.error_code) == ("lost", "host_lost")
    assert host_of(JobAttempt.objects.get(job=victim, number=2)) == "cpu-b"
    others = Job.objects.filter(parent_id=parent_id).exclude(id=victim.id)
    assert {job.attempts for job in others} == {1}  # nothing else ran twice


def _web_host(hosts_network, name: str, tmp_path: Path) -> str:
    """The web process on a host of its own, as the Procfile runs it; its URL."""
    import os

    from bench.harness import web_command
    from tests.workers import test_database_url

    host = hosts_network.add_host(name)
    argv, web_env = web_command(f"{host.address}:8000")
    host.popen(argv,
               env={**os.environ, **web_env, "DATABASE_URL": test_database_url(), "DJANGO_ALLOWED_HOSTS": host.address,
                    "FAIRLANE_UPLOAD_PART_BYTES": str(5 * 1024 * 1024)},
               log=tmp_path / f"{name}.log")
    url = f"http://{host.address}:8000"
    import urllib.error
    import urllib.request

    def answering() -> bool:
        try:
            urllib.request.urlopen(url + "/healthz?scope=web", timeout=2)
        except urllib.error.HTTPError:
            pass  # it answers
        return True

    wait_for(answering, 60, lambda: f"{name} to answer: " + (tmp_path / f"{name}.log").read_text()[-2000:],
             every=0.2, ignoring=(OSError,))
    return url


def test_any_web_host_takes_any_request_of_an_upload_and_one_dying_mid_upload_loses_nothing(
        hosts, make_user, tmp_path):
    """The bytes go to the store, the state is in the database: an upload
    created on one web host, its part URLs asked for from both in turn, goes
    on through the other when the first is lost half-way, and the stored
    file is the file."""
    network = SHARED["network"]
    try:
        _upload_across_two_web_hosts(network, hosts, make_user, tmp_path)
    finally:
        for name in ("web-a", "web-b"):
            if name in network.hosts:
                network.remove_host(name)


def _upload_across_two_web_hosts(network, hosts, make_user, tmp_path) -> None:
    import json
    import urllib.request

    import numpy as np
    from PIL import Image

    import media
    from uploads.models import Upload

    web_a, web_b = _web_host(network, "web-a", tmp_path), _web_host(network, "web-b", tmp_path)
    noise = np.random.default_rng(31).integers(0, 256, (2500, 4000, 3), dtype=np.uint8)  # 30 MB: 6 parts
    picture = tmp_path / "noise.png"
    Image.fromarray(noise).save(picture, compress_level=0)
    data = picture.read_bytes()
    user = make_user("wanda")

    def call(web: str, method: str, path: str, body=None) -> dict:
        request = urllib.request.Request(web + path, method=method, data=None if body is None else json.dumps(body)
                                         .encode(), headers={"Authorization": f"Token {user.auth_token.key}",
                                                             "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    [upload] = call(web_a, "POST", "/api/uploads/direct/", {"files": [{"filename": "noise.png",
                                                                      "size": len(data)}]})["uploads"]
    parts, size = upload["parts"], upload["part_size"]
    assert parts == 6 and all(u["url"].startswith("http") for u in upload["urls"])  # the store's own URLs
    for number in range(1, parts + 1):
        if number == parts // 2 + 1:
            network.hosts["web-a"].vanish()  # lost half-way: what it signed and recorded was never only its own
        web = web_a if number % 2 and number <= parts // 2 else web_b  # in turn, then the one left
        [url] = call(web, "POST", f"/api/uploads/direct/{upload['id']}/parts/", {"parts": [number]})["urls"]
        chunk = data[(number - 1) * size:number * size]
        with urllib.request.urlopen(urllib.request.Request(url["url"], data=chunk, method="PUT"), timeout=60) as r:
            assert r.status == 200
    status = call(web_b, "GET", f"/api/uploads/direct/{upload['id']}/")
    assert status["received"] == len(data)
    claimed = call(web_b, "POST", "/api/uploads/", {"direct": [upload["id"]]})
    [accepted] = claimed["uploads"]
    stored = Upload.objects.get(id=accepted["id"])
    assert media.read_bytes(stored.file.name) == data
    hosts("cpu-a")
    hosts("io-a", "io", concurrency=4)
    jobs = [accepted["job"]["id"]]
    wait_all_terminal(jobs, timeout=120)
    promise_kept(jobs)
