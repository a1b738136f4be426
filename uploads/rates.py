"""Measured rates: how many seconds of a worker slot a user's files of each
kind take, learned from the jobs that end, for the batch estimate
(uploads/estimates.py).

What a job costs depends on what it is: an image is about one fixed
amount of work, a video's work grows with its length and its frame size.
So each job is measured under a *rate key* with a *unit*:

- once probed (the job runs, or ran): `image` and `pdf` per file, `audio`
  per second of input, `video:<band>` per second of input for the band of
  its frame's short side (360, 720, 1080, 2160: the ladder has a rung more
  per band), `export` per second of its static estimate (`cost_estimate`);
- before the probe, which is all a queued file is, the only facts are its
  name and size: `pre:image` and `pre:pdf` per file, `pre:video`,
  `pre:audio` and `pre:other` per MB, guessed from the name's extension.

A finished job is a sample of both its keys (its name's guess, with its
size; what the probe found, with its media), so the guess for a queued
`clip.mp4` learns from what `.mp4` files of this user really cost.

What is measured is the slot's time, not only the job's: a slot that ends
a job while others wait spends some time before the next one starts
(the dispatcher's release, Celery's delivery, the claim), 13 % of an
image job's in a flood on this 2-core machine (0.87 utilisation). A
worker process remembers when its last job ended (`_last_end`); when the
next job it ends was already waiting then, the sample is the time from
that end to this one (the handover included), else the job's own
processing time.

What a key costs (`Rate.mean`) is a ratio of sums: the slot seconds of
the key's recent jobs over their units, both exponentially weighted, so a
long clip counts for its length (a mean of per-unit ratios leans towards
the short clips, 1-7 % high in bench-estimates). Recent is by time as well
as by count: a sample weighs 1 - exp(-dt / RATE_TAU_S), dt the time since
the key's previous sample (Redis's clock), at most RATE_ALPHA and at least
1/n while the key has few samples. Images end a few a second, so their
rate remembers about a minute of them rather than the last ~10 s (which
followed the machine's load bursts: the estimate jumped by half within a
minute); videos end seldom, so RATE_ALPHA still bounds how far one moves it.
The spread of one job (`var`) and the per-sample mean it is taken around
(`sample_mean`, what the estimate used before) keep RATE_ALPHA's weight.

State is bounded: per user and lane-wide, one Redis hash with six numbers
per rate key (samples; per-sample mean and variance; the weighted sums of
seconds and units; the last sample's time), updated at each job's end by
one script call, and read by a batch poll with one HGETALL of each.
Nothing scans history per request. A user's hash expires after RATE_TTL_S
without a job.
"""
from __future__ import annotations

import logging
import math
import os
import posixpath
from dataclasses import dataclass
from datetime import datetime

import redis
from django.conf import settings
from django.db.models import QuerySet

from project import redis_clients
from uploads.lifecycle import JobFinished
from uploads.models import Job

log = logging.getLogger(__name__)

# Each new sample weighs 1/32 against what was learned: the mean follows a
# change of the machine's speed (load, the other user's kind of files)
# within a few dozen jobs, and one slow job moves it by 3 %. The first
# samples are a plain mean (weight 1/n), so 5 jobs already count fully.
RATE_ALPHA = 1 / 32
# The time over which a key's ratio of sums forgets (see the module's
# docstring): a sample dt seconds after the last weighs 1 - exp(-dt / tau).
RATE_TAU_S = 60.0
RATE_TTL_S = 30 * 86400
# A slot idle longer than this between two jobs was waiting for work (a
# held or scheduled backlog), not handing over: the sample is then the
# job's own time.
MAX_HANDOVER_S = 2.0
MB = 1024 * 1024

EXTENSIONS = {
    "image": ("jpg", "jpeg", "png", "webp", "gif", "tif", "tiff", "heic", "heif", "avif", "bmp"),
    "video": ("mp4", "m4v", "mov", "mkv", "webm", "avi", "mpg", "mpeg", "3gp", "ts", "mts", "m2ts", "wmv", "flv",
              "ogv"),
    "audio": ("mp3", "m4a", "aac", "wav", "flac", "ogg", "oga", "opus", "wma", "aif", "aiff"),
    "pdf": ("pdf",),
}
# Unit of each key: "file", "second" (of input media), "MB" (of input) or
# "cost_s" (the static estimate, for exports).
PER_FILE_GUESSES = ("image", "pdf")
VIDEO_BANDS = (360, 720, 1080)  # short side at most this; above the last: 2160
UNITS = {"image": "file", "pdf": "file", "audio": "second", "export": "cost_s",
         **{f"video:{band}": "second" for band in (*VIDEO_BANDS, 2160)},
         "pre:image": "file", "pre:pdf": "file", "pre:video": "MB", "pre:audio": "MB", "pre:other": "MB"}


# --- what a job is measured as --------------------------------------------------------


def guessed_kind(filename: str) -> str:
    """image, video, audio, pdf or other, from the name's extension alone."""
    ext = posixpath.splitext(filename.lower())[1].lstrip(".")
    return next((kind for kind, exts in EXTENSIONS.items() if ext in exts), "other")


def video_band(width: int | None, height: int | None) -> int:
    short = min(width or 0, height or 0)
    return next((band for band in VIDEO_BANDS if short <= band), 2160)


def probed_key(kind: str, media_info: dict) -> str | None:
    """The key of a probed job; None for a kind without one (unknown)."""
    if kind == Job.Kind.VIDEO:
        return f"video:{video_band(media_info.get('width'), media_info.get('height'))}"
    return kind if kind in UNITS and kind != Job.Kind.UNKNOWN else None


def units_of(key: str, *, media_info: dict, size: int, cost_estimate: float) -> float:
    unit = UNITS[key]
    if unit == "file":
        return 1.0
    if unit == "second":
        return max(0.1, float(media_info.get("duration_s") or 0.0))
    if unit == "MB":
        return max(0.001, size / MB)
    return max(0.05, cost_estimate)


def job_keys(*, kind: str, media_info: dict, filename: str, size: int, cost_estimate: float
             ) -> list[tuple[str, float]]:
    """Every (key, units) a finished job is a sample of: its name's guess
    (an upload's) and what its probe found."""
    keys = []
    if filename:
        keys.append(f"pre:{guessed_kind(filename)}")
    probed = probed_key(kind, media_info)
    if probed:
        keys.append(probed)
    return [(key, units_of(key, media_info=media_info, size=size, cost_estimate=cost_estimate)) for key in keys]


def rate_of(*, kind: str, media_info: dict, filename: str, size: int, cost_estimate: float) -> tuple[str, float]:
    """The (key, units) a job's work is priced at while it waits: the
    probed key when there is one, else the name's guess (job_keys' last).
    Stored on the job (Job.rate_key, rate_units) when it is created and
    when its probe is recorded, so that the batch poll's aggregate over a
    user's unfinished jobs reads two columns of theirs: it had matched each
    job's upload's name against every extension and read its probe's JSON,
    and with a hostile user's 10,000 jobs took most of their polls'
    database time (bench-isolation)."""
    keys = job_keys(kind=kind, media_info=media_info, filename=filename, size=size, cost_estimate=cost_estimate)
    if keys:
        return keys[-1]
    return "pre:other", units_of("pre:other", media_info=media_info, size=size, cost_estimate=cost_estimate)


def rate_keys_fill(jobs: QuerySet[Job]) -> int:
    """Store rate_of on those of `jobs` stored without it (rows from before
    it was kept, or written by an older process during a deploy), once per
    row: the backlog aggregate calls this when it meets such rows. Grouped
    by value, one UPDATE per (key, units) and 1,000 jobs, each only where
    the key is still unset (a probe recorded meanwhile keeps its own)."""
    groups: dict[tuple[str, float], list] = {}
    rows = jobs.filter(rate_key__isnull=True).values_list(
        "id", "kind", "media_info", "upload__filename", "upload__size", "cost_estimate")
    for job_id, kind, media_info, filename, size, cost in rows.iterator(chunk_size=1000):
        priced = rate_of(kind=kind, media_info=media_info or {}, filename=filename or "", size=size or 0,
                         cost_estimate=cost)
        groups.setdefault(priced, []).append(job_id)
    filled = 0
    for (key, units), ids in groups.items():
        for start in range(0, len(ids), 1000):
            filled += Job.objects.filter(id__in=ids[start:start + 1000], rate_key__isnull=True).update(
                rate_key=key, rate_units=units)
    return filled


# --- the slot time of a finished job --------------------------------------------------

# When this process's last job ended (the database's clock): the start of
# the next sample's slot time. A forked worker child inherits the parent's
# (None: the parent runs no jobs).
_last_end: dict[int, datetime] = {}


def slot_seconds(*, waiting_since: datetime | None, started_at: datetime, finished_at: datetime,
                 previous_end: datetime | None) -> float:
    """The slot's time for a job: from this process's previous job's end
    when the job was already waiting then and the handover was short (the
    slot was busy handing over, not idle), else the job's own time."""
    own = (finished_at - started_at).total_seconds()
    if previous_end is None or waiting_since is None or waiting_since > previous_end:
        return own
    handover = (started_at - previous_end).total_seconds()
    if not 0 <= handover <= MAX_HANDOVER_S:
        return own
    return own + handover


# --- state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """Seconds per unit of one key: samples (n), the rate (`mean`: the
    time-weighted ratio of sums), and the spread of one job's seconds per
    unit (`var`, around `sample_mean`, the per-sample weighted mean)."""

    n: int
    mean: float
    var: float
    sample_mean: float | None = None  # None: the same as mean (a rate made before the sums)

    @property
    def cv(self) -> float:
        """Relative spread of one job's seconds per unit."""
        return math.sqrt(max(0.0, self.var)) / self.mean if self.mean > 0 else 0.0


@dataclass(frozen=True)
class RateState:
    """What is stored of a key: Rate's numbers and the weighted sums."""

    n: int
    sample_mean: float
    var: float
    seconds: float  # weighted sum of slot seconds
    units: float  # weighted sum of units
    at: float  # the last sample's time (Redis's clock, s)

    def rate(self) -> Rate:
        mean = self.seconds / self.units if self.units > 0 else self.sample_mean
        return Rate(self.n, mean, self.var, self.sample_mean)


def time_weight(n: int, dt: float, *, alpha: float = RATE_ALPHA, tau: float = RATE_TAU_S) -> float:
    """The weight of the ratio of sums' n-th sample, dt seconds after the last."""
    return max(1 / n, min(alpha, 1 - math.exp(-max(0.0, dt) / tau)))


def rate_update(state: RateState | None, seconds: float, units: float = 1.0, *, at: float = 0.0,
                alpha: float = RATE_ALPHA, tau: float = RATE_TAU_S) -> RateState:
    """One job's `seconds` for its `units` at time `at` (the script below
    does the same in Redis; this is its specification, tested)."""
    x = seconds / units
    if state is None or state.n <= 0:
        return RateState(1, x, 0.0, seconds, units, at)
    n = state.n + 1
    a = max(alpha, 1 / n)
    delta = x - state.sample_mean
    b = time_weight(n, at - state.at, alpha=alpha, tau=tau)
    return RateState(n, state.sample_mean + a * delta, (1 - a) * (state.var + a * delta * delta),
                     (1 - b) * state.seconds + b * seconds, (1 - b) * state.units + b * units, at)


# KEYS: the user's hash, the lane-wide hash. ARGV: ttl_s, alpha, tau_s, then
# key, seconds, units triples. Fields "<key>|n", "|m", "|v" (the per-sample
# mean and variance), "|s", "|u" (the weighted sums), "|t" (the last
# sample's time): rate_update. A key stored before the sums starts them
# from its mean.
_UPDATE = """
local alpha, tau = tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1e6
for h = 1, 2 do
  for i = 4, #ARGV, 3 do
    local key, sec, units = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local x = sec / units
    local got = redis.call('HMGET', KEYS[h], key .. '|n', key .. '|m', key .. '|v', key .. '|s', key .. '|u',
                           key .. '|t')
    local n, m, v = tonumber(got[1]) or 0, tonumber(got[2]) or 0, tonumber(got[3]) or 0
    local s, u, t = tonumber(got[4]), tonumber(got[5]), tonumber(got[6]) or now
    if n <= 0 then
      n, m, v, s, u = 1, x, 0, sec, units
    else
      if not s or not u then s, u = m, 1 end
      n = n + 1
      local a = math.max(alpha, 1 / n)
      local d = x - m
      m, v = m + a * d, (1 - a) * (v + a * d * d)
      local b = math.max(1 / n, math.min(alpha, 1 - math.exp(-math.max(0, now - t) / tau)))
      s, u = (1 - b) * s + b * sec, (1 - b) * u + b * units
    end
    redis.call('HSET', KEYS[h], key .. '|n', n, key .. '|m', string.format('%.17g', m),
               key .. '|v', string.format('%.17g', v), key .. '|s', string.format('%.17g', s),
               key .. '|u', string.format('%.17g', u), key .. '|t', string.format('%.17g', now))
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""
_PREFIX = "fairlane:rates:v1:"
LANE_WIDE = "all"


def _redis() -> redis.Redis:
    return redis_clients.client(settings.FAIR_REDIS_URL)


def rates_record(*, user_id: int, seconds: float, samples: list[tuple[str, float]]) -> None:
    """`seconds` of a slot spent on one finished job of `user_id`, a sample
    of each (key, units) in `samples`, for the user and lane-wide."""
    args: list = [RATE_TTL_S, RATE_ALPHA, RATE_TAU_S]
    for key, units in samples:
        args += [key, seconds, units]
    if len(args) > 3:
        _redis().eval(_UPDATE, 2, f"{_PREFIX}{user_id}", f"{_PREFIX}{LANE_WIDE}", *args)


def _parse(raw: dict) -> dict[str, Rate]:
    fields: dict[str, dict[str, float]] = {}
    for name, value in raw.items():
        key, _, field = (name.decode() if isinstance(name, bytes) else name).rpartition("|")
        fields.setdefault(key, {})[field] = float(value)
    return {key: RateState(int(f.get("n", 0)), f.get("m", 0.0), f.get("v", 0.0), f.get("s", 0.0), f.get("u", 0.0),
                           f.get("t", 0.0)).rate()
            for key, f in fields.items() if f.get("n", 0) > 0 and f.get("m", 0.0) > 0}


def rates_for(*, user_id: int) -> tuple[dict[str, Rate], dict[str, Rate]]:
    """(the user's rates, the lane-wide rates): two HGETALLs in one round
    trip, whatever the number of users. Raises redis.RedisError."""
    pipe = _redis().pipeline(transaction=False)
    pipe.hgetall(f"{_PREFIX}{user_id}")
    pipe.hgetall(f"{_PREFIX}{LANE_WIDE}")
    mine, everyone = pipe.execute()
    return _parse(mine), _parse(everyone)


def job_measured(event: JobFinished) -> None:
    """Receiver of lifecycle.job_finished, in the process that ended the
    job: a succeeded job becomes a sample of its keys. Any job's end moves
    this process's `_last_end` (a failed job held the slot too)."""
    _measured(event, _rows([event.job_id]).get(str(event.job_id)))


def jobs_measured(events: list[JobFinished]) -> None:
    """job_measured for many endings at once (a batch canceled): their rows in one query."""
    rows = _rows([e.job_id for e in events])
    for event in events:
        _measured(event, rows.get(str(event.job_id)))


def _rows(job_ids: list[str]) -> dict[str, dict]:
    return {str(row.pop("id")): row for row in Job.objects.filter(id__in=job_ids).values(
        "id", "kind", "media_info", "cost_estimate", "queued_at", "created_at", "started_at", "finished_at",
        "upload__filename", "upload__size")}


def _measured(event: JobFinished, row: dict | None) -> None:
    if row is None or row["finished_at"] is None:
        return
    pid = os.getpid()
    previous_end = _last_end.get(pid)
    _last_end[pid] = row["finished_at"]
    if event.status != Job.Status.SUCCEEDED or row["started_at"] is None:
        return
    chunks = (row["media_info"] or {}).get("chunks")
    if chunks:  # a chunked video: its parts did the work, each in a slot of its own
        seconds = sum(ms for ms in Job.objects.filter(parent_id=event.job_id).values_list("process_ms", flat=True)
                      if ms) / 1000
    else:
        seconds = slot_seconds(waiting_since=row["queued_at"] or row["created_at"], started_at=row["started_at"],
                               finished_at=row["finished_at"], previous_end=previous_end)
    samples = job_keys(kind=row["kind"], media_info=row["media_info"] or {}, filename=row["upload__filename"] or "",
                       size=row["upload__size"] or 0, cost_estimate=row["cost_estimate"])
    if seconds <= 0 or not samples:
        return
    try:
        rates_record(user_id=event.owner_id, seconds=seconds, samples=samples)
    except redis.RedisError as exc:  # an estimate learns from the next one
        log.warning("job %s not measured for estimates: %r", event.job_id, exc)
