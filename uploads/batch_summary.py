"""What a batch poll shows of each batch: its progress and, while it has
work left, its finish estimate. A large batch's answer is reused for a
moment.

Each of a user's open upload pages polls GET /api/batches/ every 2 s while
a batch moves. Its counts and its estimate's backlog are grouped
aggregates over the user's own jobs (uploads/selectors.py): ~1 ms at ten
files, 40-90 ms each at 10,000. Their cost grows with the user's own work,
not with anyone else's, but on the database that every user shares: one
user's 10,000 files, polled from many pages at the rate the API allows,
kept PostgreSQL busy for ~0.25 of the core it shared with everyone's
requests, and the other users' uploads slowed with it (bench-isolation,
issue 32; the backlog's own reuse, `backlog_until_reused`, does not help
while the batch moves).

So an answer that covers at least FAIRLANE_POLL_REUSE_FILES files is kept
in Redis and reused by every web process for FAIRLANE_ESTIMATE_REUSE_S (2
s, the page's own interval), and one interval more for every
FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL files it covers past that many
(`reuse_for`: its computation's cost grows with its files, and so does the
time it serves); after that one request asks the database again while the
others still get the kept answer (never more than twice its time old). A
user's polls of the same large batches cost one computation per interval,
however many pages poll on however many hosts:
without the one asker, every poll that found the answer just expired
asked at once (~2.6 computations per interval in bench-isolation).

A smaller answer is never kept: a few files' counts cost less than the
bookkeeping, and a person watching three files sees each one end at once.
Whether an answer is kept depends on its files only, never on timing, so
it is the same on every machine. Each kept answer is a few KB for twice
the interval, and a user has at most as many as they may poll in that
time (their read rate). Redis out of reach: every poll asks the database.

A user's own batch writes through the API (rename, cancel, retry, delete)
answer from the database, and they and the user's job and upload writes
(a job's cancel, retry or delete, an upload's delete) start a new
generation of the user's kept answers (`forget`): no poll after a write
of theirs is answered from before it."""
from __future__ import annotations

import hashlib
import logging
import pickle
import time
import uuid
from dataclasses import dataclass

import redis
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from project import redis_clients
from uploads import estimates, selectors
from uploads.estimates import FinishEstimate
from uploads.selectors import BatchProgress

log = logging.getLogger(__name__)
_PREFIX = "fairlane:poll:v2:"  # v2: an answer carries its own reuse time
GENERATION_TTL_S = 86400  # longer than any kept answer
_clock = time.time  # when an answer was computed: the same on every host


@dataclass(frozen=True)
class BatchSummary:
    progress: BatchProgress
    estimate: FinishEstimate | None


def _answer_key(user_id: int, batch_ids: list[uuid.UUID]) -> str:
    return f"{_PREFIX}{user_id}:{hashlib.sha256(repr(batch_ids).encode()).hexdigest()[:32]}"


def _generation_key(user_id: int) -> str:
    return f"{_PREFIX}{user_id}:generation"


def batches_summary(*, user: AbstractBaseUser, batch_ids: list[uuid.UUID], fresh: bool = False
                    ) -> dict[uuid.UUID, BatchSummary]:
    """Each of the user's `batch_ids` (already found to be theirs) with its
    progress and estimate; `fresh` asks the database whatever was kept
    (the answer to a write)."""
    reuse_s = settings.FAIRLANE_ESTIMATE_REUSE_S
    answer_key, generation_key = _answer_key(user.pk, batch_ids), _generation_key(user.pk)
    generation = None
    if reuse_s > 0:
        client = redis_clients.client(settings.REDIS_URL)
        try:
            raw, generation = client.mget(answer_key, generation_key)
            kept = pickle.loads(raw) if raw is not None and not fresh else None
            if kept is not None and kept[0] == generation:
                _, computed_at, kept_s, summaries = kept
                if _clock() - computed_at < kept_s:
                    return summaries
                # Older: one request asks again, the others meanwhile get this one
                # (all of a user's pages asking at once cost as many computations).
                if not client.set(answer_key + ":asking", 1, nx=True, px=int(kept_s * 1000)):
                    return summaries
        except redis.RedisError as exc:
            log.warning("poll answers not read (%s); asking the database", exc)
    at = _clock()
    progress = selectors.batches_progress(owner_id=user.pk, batch_ids=batch_ids)
    unfinished = {batch_id: progress[batch_id].last_created_at for batch_id in batch_ids
                  if progress[batch_id].unfinished}
    seen = [(batch_id, sorted(progress[batch_id].counts.items()), progress[batch_id].progress)
            for batch_id in batch_ids]
    backlogs = selectors.backlog_until_reused(user=user, until=unfinished, seen=seen)
    finish = estimates.batch_estimates(user_id=user.pk, backlogs=backlogs, now=timezone.now())
    summaries = {batch_id: BatchSummary(progress[batch_id], finish.get(batch_id)) for batch_id in batch_ids}
    files = sum(item.files for item in progress.values())
    if reuse_s > 0 and files >= settings.FAIRLANE_POLL_REUSE_FILES:
        kept_s = reuse_for(files=files)
        try:
            with redis_clients.client(settings.REDIS_URL).pipeline() as pipe:
                # Kept twice its time: the second half is what others get while one asks again.
                pipe.set(answer_key, pickle.dumps((generation, at, kept_s, summaries)), px=int(2 * kept_s * 1000))
                pipe.delete(answer_key + ":asking").execute()
        except redis.RedisError as exc:
            log.warning("poll answer not kept (%s)", exc)
    return summaries


def reuse_for(*, files: int) -> float:
    """How long a kept answer covering `files` files is reused: the interval,
    and one more for every FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL files past
    that many. Its counts cost the database time in proportion to the
    files, so a user's polls cost about the same database time a second
    whatever the size of their batches; the page of a 10,000-file batch
    shows its counts up to 8 s late (16 s while one request asks again), a
    few dozen files of ten thousand."""
    return settings.FAIRLANE_ESTIMATE_REUSE_S * max(1.0, files / settings.FAIRLANE_POLL_REUSE_FILES_PER_INTERVAL)


def forget(*, user_id: int) -> None:
    """No answer of the user's kept before now is used again (after a
    write of theirs): the next poll of every process asks the database."""
    generation_key = _generation_key(user_id)
    try:
        with redis_clients.client(settings.REDIS_URL).pipeline() as pipe:
            pipe.incr(generation_key).expire(generation_key, GENERATION_TTL_S).execute()
    except redis.RedisError as exc:
        log.warning("poll answers of user %s not forgotten (%s); each ends within twice its reuse time", user_id,
                    exc)
