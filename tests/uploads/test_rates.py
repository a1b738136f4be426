"""Measured rates for the batch estimate (uploads/rates.py): what a job is
measured as (table-driven), the same in SQL for unfinished jobs, the
rate (a time-weighted ratio of sums) and the per-sample mean and variance
in Python and in the Redis script, the slot's
time of a job, and a finished job becoming a sample."""
from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from django.utils import timezone as dj_timezone

from uploads import rates
from uploads.lifecycle import JobFinished
from uploads.models import Job, Upload
from uploads.rates import (
    MB,
    RATE_ALPHA,
    RATE_TAU_S,
    Rate,
    job_keys,
    rate_keys_fill,
    rate_of,
    rate_update,
    slot_seconds,
    time_weight,
)

VIDEO_720 = {"width": 1280, "height": 720, "duration_s": 12.0}
PORTRAIT_1080 = {"width": 1080, "height": 1920, "duration_s": 30.0}
UHD = {"width": 3840, "height": 2160, "duration_s": 5.0}

# (kind, media_info, filename, size, cost_estimate) -> every (key, units) a finished job is a sample of
CASES = [
    # a photo: per file, before and after the probe
    ("image", {"width": 4032, "height": 3024}, "IMG_1.JPG", 3 * MB, 0.4, [("pre:image", 1.0), ("image", 1.0)]),
    # a video: per MB from its name, per second of its frame's band once probed
    ("video", VIDEO_720, "clip.mp4", 24 * MB, 9.0, [("pre:video", 24.0), ("video:720", 12.0)]),
    # the band is the short side's: a portrait 1080x1920 is 1080p
    ("video", PORTRAIT_1080, "phone.MOV", 60 * MB, 40.0, [("pre:video", 60.0), ("video:1080", 30.0)]),
    ("video", UHD, "drone.mkv", 80 * MB, 30.0, [("pre:video", 80.0), ("video:2160", 5.0)]),
    # a video named like a picture: the name's guess learns it too
    ("video", VIDEO_720, "odd.jpg", 2 * MB, 9.0, [("pre:image", 1.0), ("video:720", 12.0)]),
    # sound per second; an unknown extension per MB
    ("audio", {"duration_s": 180.0}, "song.flac", 30 * MB, 3.0, [("pre:audio", 30.0), ("audio", 180.0)]),
    ("audio", {"duration_s": 60.0}, "memo.bin", MB // 2, 1.0, [("pre:other", 0.5), ("audio", 60.0)]),
    ("pdf", {}, "scan.pdf", MB, 1.0, [("pre:pdf", 1.0), ("pdf", 1.0)]),
    # never probed (it failed before): only the name's guess
    ("unknown", {}, "broken.mp4", 3 * MB, 2.0, [("pre:video", 3.0)]),
    # an export has no file: per second of its static estimate
    ("export", {}, "", 0, 12.5, [("export", 12.5)]),
    # no duration measured: a tenth of a second, never zero units
    ("video", {"width": 640, "height": 360}, "x.webm", MB, 1.0, [("pre:video", 1.0), ("video:360", 0.1)]),
]


@pytest.mark.parametrize(("kind", "media_info", "filename", "size", "cost", "expected"), CASES)
def test_a_finished_job_is_a_sample_of_its_names_guess_and_of_what_its_probe_found(kind, media_info, filename, size,
                                                                                     cost, expected):
    assert job_keys(kind=kind, media_info=media_info, filename=filename, size=size, cost_estimate=cost) == expected


@pytest.mark.django_db
def test_a_waiting_job_is_priced_as_its_finished_self_would_be_measured_and_old_rows_are_filled_once(make_user):
    """rate_of (what a job's waiting work is priced at, stored on it) is
    job_keys' last (the measuring): the probed key when there is one, else
    the name's guess. A row stored without it (from before it was kept)
    gets it from rate_keys_fill, once; a key already stored is kept."""
    owner = make_user("alice")
    batch = uuid.uuid4()
    expected = {}
    for i, (kind, media_info, filename, size, cost, keys) in enumerate(CASES):
        assert rate_of(kind=kind, media_info=media_info, filename=filename, size=size, cost_estimate=cost) == keys[-1]
        upload = None
        if filename:
            upload = Upload.objects.create(owner=owner, batch=batch, filename=filename, file=f"u/{i}", size=size)
        job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", kind=kind, media_info=media_info,
                                 cost_estimate=cost)
        expected[job.id] = keys[-1]
    kept = Job.objects.create(owner=owner, lane="cpu-transcode", kind="image", rate_key="image", rate_units=7.0)
    assert rate_keys_fill(Job.objects.filter(owner=owner)) == len(CASES)
    got = {job_id: (key, units) for job_id, key, units in
           Job.objects.filter(owner=owner).values_list("id", "rate_key", "rate_units")}
    for job_id, (key, units) in expected.items():
        assert got[job_id][0] == key
        assert got[job_id][1] == pytest.approx(units)
    assert got[kept.id] == ("image", 7.0)
    assert rate_keys_fill(Job.objects.filter(owner=owner)) == 0


@pytest.mark.django_db
def test_a_job_is_priced_by_its_name_when_created_and_by_its_probe_once_recorded(make_user):
    from exports.services import export_create
    from uploads import services

    owner = make_user("alice")
    [clip, memo] = services.uploads_record(owner=owner, files=[
        services.StoredFile(key="u/clip", filename="clip.MP4", size=24 * MB),
        services.StoredFile(key="u/memo", filename="memo.bin", size=MB // 2)])
    clip_job, memo_job = clip.accepted_job, memo.accepted_job

    def priced(job: Job) -> tuple[str, float]:
        job.refresh_from_db()
        return job.rate_key, job.rate_units

    assert priced(clip_job) == ("pre:video", pytest.approx(24.0))
    assert priced(memo_job) == ("pre:other", pytest.approx(0.5))
    services.job_probe_record(job_id=str(clip_job.id), kind="video", media_info=VIDEO_720, cost_estimate=9.0)
    assert priced(clip_job) == ("video:720", pytest.approx(12.0))
    # a kind without a key of its own keeps its name's guess
    services.job_probe_record(job_id=str(memo_job.id), kind="unknown", media_info={}, cost_estimate=1.0)
    assert priced(memo_job) == ("pre:other", pytest.approx(0.5))
    # an export is priced by its static estimate (nothing stored yet to zip: the least)
    assert priced(export_create(owner=owner, batch=clip.batch)) == ("export", pytest.approx(0.05))


def test_the_per_sample_mean_is_plain_for_the_first_samples_then_weighted():
    state = None
    for x in (1.0, 2.0, 3.0):
        state = rate_update(state, x, alpha=0.25)
    # 1/n while 1/n > alpha: the plain mean (2.0) and the population variance (2/3)
    assert state.n == 3 and state.sample_mean == pytest.approx(2.0) and state.var == pytest.approx(2 / 3)
    state = rate_update(state, 10.0, alpha=0.25)  # 1/4 = alpha
    assert state.sample_mean == pytest.approx(2.0 + 0.25 * 8.0)
    state = rate_update(state, 4.0, alpha=0.25)  # 1/5 < alpha: alpha's weight
    assert state.sample_mean == pytest.approx(4.0)
    assert rate_update(None, 7.0).rate() == Rate(1, 7.0, 0.0, 7.0)
    assert Rate(10, 2.0, 0.25).cv == pytest.approx(0.25)


def test_the_rate_is_the_ratio_of_the_sums_so_a_long_clip_counts_for_its_length():
    """Two clips, 1 s of video in 1 s and 10 s in 30 s: 31 s for 11 s is
    2.82 s a second, where the mean of the two ratios says 2."""
    state = rate_update(rate_update(None, 1.0, 1.0), 30.0, 10.0)
    assert state.rate().mean == pytest.approx(31 / 11)
    assert state.sample_mean == pytest.approx(2.0)


@pytest.mark.parametrize(("n", "dt", "weight"), [
    (2, 0.0, 1 / 2),  # few samples: a plain mean whatever the time
    (1000, 0.25, 1 - math.exp(-0.25 / RATE_TAU_S)),  # images a few a second: about a minute of them
    (200, 600.0, RATE_ALPHA),  # a sample ten minutes after the last: RATE_ALPHA at most
    (200, -5.0, 1 / 200),  # a clock that went back: no time passed
])
def test_a_sample_weighs_by_the_time_since_the_last_between_1_over_n_and_alpha(n, dt, weight):
    assert time_weight(n, dt) == pytest.approx(weight)


def test_images_a_few_a_second_remember_about_a_minute_not_the_last_32():
    """A burst of slow files (the machine's load) for 10 s among fast ones:
    the rate by time moves a little; the per-sample mean, weighted 1/32,
    jumps to the burst."""
    state, at = None, 0.0
    for i in range(1000):
        state = rate_update(state, 2.0 if 600 <= i < 640 else 1.0, at=at)
        at += 0.25
        if i == 639:
            during = state
    assert during.sample_mean > 1.7
    assert during.rate().mean < 1.2


def test_redis_keeps_the_same_rate_as_the_specification(redis_client, monkeypatch):
    """The script is rate_update. With a tau that makes every sample's
    weight its count's (1/n, then RATE_ALPHA: whatever Redis's clock does
    between two calls), the numbers are exactly the specification's."""
    samples = [(0.8, 2.0), (1.0, 2.0), (0.9, 2.0), (2.4, 2.0), (0.82, 2.0), (0.78, 2.0), (1.2, 2.0)] * 8
    for tau, user in ((1e12, 7), (1e-12, 9)):  # the weight 1/n; RATE_ALPHA from the 33rd sample on
        monkeypatch.setattr(rates, "RATE_TAU_S", tau)
        spec = None
        for i, (seconds, units) in enumerate(samples):  # Redis's clock moves on between two calls
            spec = rate_update(spec, seconds, units, tau=tau, at=float(i))
            rates.rates_record(user_id=user, seconds=seconds, samples=[("image", units)])
        got = rates.rates_for(user_id=user)[0]["image"]
        want = spec.rate()
        assert got.n == want.n == len(samples)
        assert got.mean == pytest.approx(want.mean, rel=1e-9)
        assert got.sample_mean == pytest.approx(want.sample_mean, rel=1e-12)
        assert got.var == pytest.approx(want.var, rel=1e-9)
        redis_client.delete(f"{rates._PREFIX}{rates.LANE_WIDE}")
    assert 0 < redis_client.ttl(f"{rates._PREFIX}7") <= rates.RATE_TTL_S
    assert rates.rates_for(user_id=8)[0] == {}  # another user's own: nothing


def test_a_key_stored_before_the_sums_starts_them_from_its_mean(redis_client):
    redis_client.hset(f"{rates._PREFIX}5", mapping={"image|n": 40, "image|m": 0.5, "image|v": 0.01})
    assert rates.rates_for(user_id=5)[0]["image"] == Rate(40, 0.5, 0.01, 0.5)
    rates.rates_record(user_id=5, seconds=1.5, samples=[("image", 1.0)])
    got = rates.rates_for(user_id=5)[0]["image"]
    b = 1 / 41  # no last time stored: no time passed, the weight is 1/n
    assert got.n == 41 and got.mean == pytest.approx((1 - b) * 0.5 + b * 1.5, rel=1e-9)


T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


@pytest.mark.parametrize(("waiting_since", "started", "finished", "previous_end", "seconds"), [
    # the slot's first job: its own time
    (at(0), at(1), at(3), None, 2.0),
    # waiting when the slot's last job ended 0.3 s before it started: the handover counts
    (at(0), at(10.3), at(11), at(10), 1.0),
    # it arrived after the slot's last job ended: the slot was idle, not handing over
    (at(10.1), at(10.3), at(11), at(10), 0.7),
    # a gap longer than a handover (a held backlog): its own time
    (at(0), at(13), at(14), at(10), 1.0),
    # clocks that disagree (started before the previous end): its own time
    (at(0), at(9.9), at(11), at(10), 1.1),
])
def test_a_jobs_slot_time_includes_the_handover_only_when_it_was_waiting(waiting_since, started, finished,
                                                                        previous_end, seconds):
    assert slot_seconds(waiting_since=waiting_since, started_at=started, finished_at=finished,
                        previous_end=previous_end) == pytest.approx(seconds)


@pytest.mark.django_db
def test_a_succeeded_job_is_measured_for_its_owner_and_everyone_and_a_failed_one_is_not(make_user, redis_client):
    owner = make_user("alice")
    now = dj_timezone.now()
    rates._last_end.clear()

    def finished(status: str, filename: str) -> Job:
        upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename=filename, file="u/x", size=6 * MB)
        return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", kind="video", status=status,
                                  media_info=VIDEO_720, cost_estimate=5.0, started_at=now - timedelta(seconds=3),
                                  finished_at=now)

    failed = finished(Job.Status.FAILED, "a.mp4")
    rates.job_measured(JobFinished(job_id=str(failed.id), owner_id=owner.pk, status=Job.Status.FAILED))
    assert rates.rates_for(user_id=owner.pk) == ({}, {})
    done = finished(Job.Status.SUCCEEDED, "b.mp4")
    rates.job_measured(JobFinished(job_id=str(done.id), owner_id=owner.pk, status=Job.Status.SUCCEEDED))
    mine, everyone = rates.rates_for(user_id=owner.pk)
    # 3 s of slot (the failed job ended at the same moment: no handover) for 12 s of 720p, 6 MB
    assert mine == everyone == {"video:720": Rate(1, 0.25, 0.0, 0.25), "pre:video": Rate(1, 0.5, 0.0, 0.5)}
