"""`FairScheduler`: the Python face of one fair lane's Lua functions.

Every rule lives in the Lua in `lua/` (one Redis function library, Redis 7
or Valkey) so that it runs atomically inside Redis, however many web
processes and workers call at once; this module only marshals arguments,
documents the contract and types the results.

One clock: every lease, due time, worker registration and token bucket is
compared against Redis's own clock (`TIME` inside the Lua), never against
the caller's, so hosts whose clocks disagree by minutes neither reap each
other's running jobs nor drop each other's slots. Relative times (a retry's
backoff: `delay_s`) are turned into due times there too. The `now` parameters
(seconds since the epoch) exist for tests that drive time themselves;
production code never passes them.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

# (job_id, message): what release released; the message is already in the
# lane's queue when the scheduler has one (see FairScheduler's `queue`).
Released = tuple[str, str]

_LUA_DIR = Path(__file__).with_name("lua")
# One file per operation; `_lib.lua` holds the helpers they share.
_SCRIPT_NAMES = (
    "submit", "submit_release", "release", "start", "heartbeat", "finish",
    "submit_many", "requeue", "reap", "cancel", "register_worker", "unregister_worker", "snapshot",
    "holding", "inflight", "health", "summary", "share",
)


def _library() -> tuple[str, dict[str, str]]:
    """The Redis function library (its source) and each operation's function name.

    A library, not EVAL scripts: its helpers are defined once when it loads,
    where a script would define all of them again on every call. Its name
    carries a digest of the source, so processes running another version of
    this code (a rolling deploy) call their own functions, never this one's.
    Each function starts the call (`begin`: the lane's key names, empty
    caches) and, however the operation returns, ends it with `flush()`,
    which writes what the call changed (see `_lib.lua`).
    """
    prelude = (_LUA_DIR / "_lib.lua").read_text()
    bodies = {name: (_LUA_DIR / f"{name}.lua").read_text() for name in _SCRIPT_NAMES}
    name = "fairlane_" + hashlib.sha1("\0".join([prelude, *bodies.values()]).encode()).hexdigest()[:16]
    functions = {op: f"{name}_{op}" for op in _SCRIPT_NAMES}
    parts = [f"#!lua name={name}", prelude]
    for op, body in bodies.items():
        parts.append(f"local function op_{op}(KEYS, ARGV)\n{body}\nend\n"
                     f"redis.register_function('{functions[op]}', function(keys, args)\n"
                     f"  begin(keys)\n  local result = op_{op}(keys, args)\n  flush()\n  return result\nend)\n")
    return "\n".join(parts), functions


_LIBRARY, _FUNCTIONS = _library()

# The version of the keys' layout, part of every key name: state written in
# another layout is never misread, it is ignored (and the reconcilers submit
# its jobs again from the database). 2: one hash per fairness key, the lane's
# numbers in one hash, record and message in one hash. 3: all three in one
# hash, and each key's backlog length beside its list (lua/_lib.lua, H).
# 4: backlog entries carry their number ("<id>|<g>", so a cancel leaves a
# stale entry instead of an LREM) and the lane keeps its summary (aw, ak,
# bt, kb), which state written before could not be read with. 5: two
# levels: `active`, `capped` and `throttled` hold groups, each group its
# eligible and capped members (lua/_lib.lua, `members`).
LAYOUT = 5

# Lane names become part of every key and of SCAN patterns in `clear`: no
# braces (they would break the hash tag) and no glob characters.
_LANE_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


def _text(value: bytes | str) -> str:
    """Works with clients created with or without decode_responses."""
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: list[Any]) -> list[Released]:
    return [(_text(flat[i]), _text(flat[i + 1])) for i in range(0, len(flat), 2)]


def _now(now: float | None) -> float | str:
    """A test's explicit time, or "" for Redis's clock."""
    return "" if now is None else now


def _opt(value: float | None) -> float | str:
    return "" if value is None else value


# Pass as `rate` to remove a key's rate limit (as cap=0 removes its cap).
NO_RATE_LIMIT: tuple[float, float] = (0.0, 0.0)


def _limits(weight: float | None, cap: int | None, rate: tuple[float, float] | None) -> tuple:
    """A key's or group's settings as the Lua reads them ("": leave as is)."""
    return ("" if weight is None else weight, "" if cap is None else cap,
            "" if rate is None else "0" if rate == NO_RATE_LIMIT else f"{rate[0]!r}:{rate[1]!r}")


class FairScheduler:
    """Holds a lane's jobs per fairness key and releases them fairly.

    `headroom`: released jobs beyond the live worker slots, so a slot that
    frees up finds a message already waiting in the Celery queue instead of
    idling for a release round trip. None is needed when a finish is
    reported before its slot asks for the next message (the worker does so),
    since finish releases into the freed slot in the same call; at most one
    otherwise.

    `default_window`: slots assumed while no worker has registered (a fresh
    deployment, or all workers restarting), so the first jobs are queued and
    ready when workers come up; small so a newcomer never waits behind much.

    `release_lease_s`: how long a released job may wait in the Celery queue
    for a worker to start it, or may run without reporting its start. With
    a `queue`, the script that releases a job also pushes its message, so no
    publisher can die between the two; without one, the lease also bounds
    how long a job stays lost when the caller dies before publishing. 300 s: with a window of
    slots + 1, a released job waits for at most one running job, so this must
    exceed the longest job that is not heartbeating yet; set it above the
    lane's longest job when its jobs are long.

    `run_lease_s`: a running job's lease, renewed by `heartbeat`. 30 s with a
    heartbeat every 10 s: two missed beats are tolerated, and a dead worker's
    job is offered again within half a minute.

    `queue`: the Redis list every released job's payload is pushed to, in
    the same script call (a kombu Redis queue: dispatcher/message.py builds
    payloads in its format). Its RELEASE_TAG is replaced by the release's
    tag first. None: release only returns the payloads.
    """

    def __init__(
        self,
        client: redis.Redis,
        lane: str,
        *,
        headroom: int = 1,
        default_window: int = 2,
        release_lease_s: float = 300.0,
        run_lease_s: float = 30.0,
        queue: str | None = None,
    ) -> None:
        if not _LANE_NAME.match(lane):
            raise ValueError(f"lane name {lane!r} must match {_LANE_NAME.pattern}")
        self.lane = lane
        self.headroom = headroom
        self.default_window = default_window
        self.release_lease_s = release_lease_s
        self.run_lease_s = run_lease_s
        self._client = client
        # The hash tag keeps every key of the lane in one Redis Cluster slot,
        # which multi-key scripts require.
        self.prefix = f"{{fair:{lane}}}:{LAYOUT}:"
        self.queue = queue
        self._keys = [self.prefix] if queue is None else [self.prefix, queue]
        self._loaded = False  # the function library, as far as this object knows

    @property
    def client(self) -> redis.Redis:
        """The Redis client, for callers that keep small state beside the lane's."""
        return self._client

    def _fcall(self, op: str, args: tuple) -> tuple:
        """FCALL's arguments for operation `op`: function, key count, keys, args."""
        return (_FUNCTIONS[op], len(self._keys), *self._keys, *args)

    def _run(self, op: str, *args: Any) -> Any:
        call = self._fcall(op, args)
        try:
            return self._client.fcall(*call)
        except redis.ResponseError as exc:
            # Not loaded yet, or lost with the server's data (a restart
            # without persistence): load it and call again.
            if "function not found" not in str(exc).lower():
                raise
        self._load()
        return self._client.fcall(*call)

    def _load(self) -> None:
        try:
            self._client.function_load(_LIBRARY)
        except redis.ResponseError as exc:
            if "already exists" not in str(exc):  # another process loaded it first
                raise
        self._loaded = True

    def _release_args(self, now: float | None) -> tuple[float, float, int, int]:
        return (_now(now), self.release_lease_s, self.default_window, self.headroom)

    def submit(
        self,
        job_id: str,
        key: str,
        *,
        cost: float = 1.0,
        payload: str = "",
        weight: float | None = None,
        cap: int | None = None,
        rate: tuple[float, float] | None = None,
        due: float | None = None,
        delay_s: float | None = None,
        tag: str = "",
        group: str | None = None,
        group_weight: float | None = None,
        group_cap: int | None = None,
        group_rate: tuple[float, float] | None = None,
        now: float | None = None,
        client: Any = None,
    ) -> bool:
        """Accept a job into `key`'s backlog (or into `delayed` until `due`,
        an absolute time such as a user's schedule, or for `delay_s` seconds
        from now by Redis's clock).

        False, with nothing changed, when `job_id` is known already in any
        state: duplicate and concurrent submitters are harmless, and a job is
        never released twice. `weight`, `cap` (0 removes it) and `rate`
        ((tokens per second, burst)) update the key's settings when given.
        Does not release: call `release` next, so that a caller submitting a
        batch pays for one release. `client`: a pipeline to queue the call on
        (bulk loads); the result is then the pipeline's. `tag`: the message
        id's suffix on the job's first release (see `message.new_tag`);
        empty, the release's own.

        `group`: the organisation `key` belongs to (None: a group of its
        own, one level, exactly as before groups). The lane shares its
        worker time between groups by `group_weight`, and each group what
        it gets between its keys by their `weight`; `group_cap` and
        `group_rate` limit the whole group as `cap` and `rate` limit a key
        (given, they update the group's settings, as a key's). A key moves
        to another group only while it has no job waiting or in flight:
        until then its jobs join the group it is in.
        """
        args = self._submit_args(job_id, key, cost=cost, payload=payload, weight=weight, cap=cap, rate=rate, due=due,
                                 delay_s=delay_s, tag=tag, group=group, group_weight=group_weight,
                                 group_cap=group_cap, group_rate=group_rate, now=now)
        if client is not None:
            if not self._loaded:  # a pipeline cannot load on a miss and retry
                self._load()
            return client.fcall(*self._fcall("submit", args))
        return bool(self._run("submit", *args))

    def submit_many(self, jobs: list[tuple[str, str, dict[str, Any]]], *, batch: int = 500) -> list[bool]:
        """`submit` for each (job_id, key, `submit`'s keyword arguments), in
        order, `batch` of them per call: the calls share their reads of the
        lane and the keys and write once (a 2,000-file batch: four calls).
        Does not release."""
        done: list[bool] = []
        for start in range(0, len(jobs), batch):
            args = [arg for job_id, key, fields in jobs[start:start + batch]
                    for arg in self._submit_args(job_id, key, **fields)]
            done += [bool(result) for result in self._run("submit_many", *args)]
        return done

    def submit_and_release(self, job_id: str, key: str, **fields: Any) -> tuple[bool, list[Released]]:
        """`submit` then `release`, in one script call: the hot path of a
        single enqueue. The release runs only when the submit made its key
        eligible: a job joining an eligible key cannot make room or a key
        (see the package docstring). Takes the same keyword arguments as
        `submit`."""
        accepted, *released = self._run(
            "submit_release", *self._submit_args(job_id, key, **fields), *self._release_args(None)[1:])
        return bool(accepted), _pairs(released)

    @staticmethod
    def _submit_args(
        job_id: str, key: str, *, cost: float = 1.0, payload: str = "", weight: float | None = None,
        cap: int | None = None, rate: tuple[float, float] | None = None, due: float | None = None,
        delay_s: float | None = None, tag: str = "", group: str | None = None, group_weight: float | None = None,
        group_cap: int | None = None, group_rate: tuple[float, float] | None = None, now: float | None = None,
    ) -> tuple:
        """submit.lua's arguments: job_id, key, cost, payload, weight, cap,
        rate, group, group_weight, group_cap, group_rate, due, now, delay, tag."""
        finite = [cost, weight, group_weight, due, delay_s,
                  *(rate if rate not in (None, NO_RATE_LIMIT) else ()),
                  *(group_rate if group_rate not in (None, NO_RATE_LIMIT) else ())]
        if not all(v is None or math.isfinite(v) for v in finite):
            raise ValueError("cost, weights, rates, due and delay must be finite numbers")
        if cost < 0:
            raise ValueError("cost must be >= 0")
        if key.startswith("@"):
            raise ValueError("a fairness key may not begin with '@' (the lane's names for groups)")
        if group == "":
            raise ValueError("group must be a name, or None for a group of the key's own")
        for name, w, c, r in (("", weight, cap, rate), ("group_", group_weight, group_cap, group_rate)):
            if w is not None and w <= 0:
                raise ValueError(f"{name}weight must be > 0")
            if c is not None and c < 0:
                raise ValueError(f"{name}cap must be >= 0")
            if r is not None and r != NO_RATE_LIMIT and (r[0] <= 0 or r[1] < 1):
                raise ValueError(f"{name}rate needs tokens_per_s > 0 and burst >= 1 (or NO_RATE_LIMIT)")
        return (
            job_id, key, cost, payload, *_limits(weight, cap, rate),
            group or "", *(_limits(group_weight, group_cap, group_rate) if group else ("", "", "")),
            _opt(due),
            _now(now),
            _opt(delay_s),
            tag,
        )

    def release(self, *, now: float | None = None, limit: int | None = None) -> list[Released]:
        """Move jobs into flight while the window has room; publish what it returns.

        Due delayed jobs join their backlogs and throttled keys whose token is
        due become eligible first. Each released job is charged to its key
        (start-time fair queueing) and leased for `release_lease_s`: if the
        caller dies before publishing, the lease expires and reap offers the
        job again.
        """
        return _pairs(self._run("release", *self._release_args(now), limit or 0))

    def start(self, job_id: str, *, now: float | None = None) -> bool:
        """A worker began `job_id`: lease it for `run_lease_s`.

        False means the job is finished or cancelled already (a redelivered
        message) and the worker should skip it. A job that reap had put back
        into its backlog is taken out of it, so it is not released again.
        """
        return bool(self._run("start", job_id, _now(now), self.run_lease_s))

    def heartbeat(self, job_ids: list[str], *, now: float | None = None) -> int:
        """Renew the leases of running jobs; returns how many were renewed."""
        if not job_ids:
            return 0
        return int(self._run("heartbeat", _now(now), self.run_lease_s, *job_ids))

    def finish(
        self, job_id: str, *, actual_cost: float | None = None, key: str | None = None, group: str | None = None,
        now: float | None = None,
    ) -> list[Released]:
        """Forget `job_id` and release into the freed slot, in one call.

        `actual_cost` (the measured cost) corrects the virtual times of the
        job's key and group by (actual - estimated) / their weights, so
        estimates that are off do not skew the shares. `key` and `group`:
        the job's fairness key and group (None: none) when the caller knows
        them, which saves the call a Redis command (a wrong one costs it
        one, nothing else). An unknown job only releases.
        """
        return _pairs(self._run(
            "finish", job_id, "" if actual_cost is None else actual_cost, *self._release_args(now), key or "",
            f"@g:{group}" if group else "",
        ))

    def requeue(
        self, job_id: str, *, actual_cost: float = 0.0, due: float | None = None, delay_s: float | None = None,
        payload: str = "", tag: str = "", now: float | None = None,
    ) -> bool:
        """Put a job in flight back at the front of its backlog (after `due`
        or `delay_s`, for a retry's backoff), its key charged `actual_cost` for the attempt
        instead of the estimate (0: never started, a full refund); a non-empty
        `payload` replaces its message, released first under `tag` if given.

        False when the job is not in flight. Does not release.
        """
        return bool(self._run("requeue", job_id, actual_cost, _opt(due), _now(now), payload, _opt(delay_s), tag))

    def reap(self, *, now: float | None = None) -> list[str]:
        """Put jobs whose lease expired back at the front of their backlogs.

        At most 100 per call (see BATCH in lua/_lib.lua); returns their ids.
        Does not release: the ticker calls release after it.
        """
        return [_text(job_id) for job_id in self._run("reap", _now(now))]

    def holding(
        self, token: str, job_ids: list[str], *, ttl_s: float, margin_s: float = 1.0, every_s: float = 1.0,
        now: float | None = None,
    ) -> list[str]:
        """Worker process `token` holds `job_ids` of this lane (taken from
        the queue: waiting for a pool slot or running), as of now and for
        `ttl_s`. Then, at most once per `every_s` for the lane, released jobs
        whose message is in no queue and held by no live process, at two
        looks `margin_s` apart, go back to the front of their backlogs
        (lua/_lib.lua, `recover_orphans`); returns their ids. Does not
        release: the caller releases next, as after reap.

        A process reports before it takes its first message and then
        every third of `ttl_s`: a message lost with its worker (killed, or
        Redis down at its warm shutdown) is offered again within about
        `ttl_s` plus two reports, not when its release lease runs out."""
        return [_text(job_id) for job_id in self._run(
            "holding", token, ttl_s, _now(now), margin_s, every_s, *job_ids)]

    def inflight(self, *, ttl_s: float, now: float | None = None) -> list[dict[str, Any]]:
        """Every job in flight, for the staff page: {id, key, state
        ("released" or "running"), lease_s (until its lease runs out),
        queued (its message waits in the queue), holder (the worker process
        that says it has it, or ""), missing_s (how long it has been in
        neither, -1 if it has not)}. O(window + queue + workers)."""
        return json.loads(self._run("inflight", _now(now), ttl_s))

    def summary(self, *, now: float | None = None) -> dict[str, Any]:
        """The lane at a glance, in O(1) whatever the number of users (what
        every batch poll and estimate needs): {active_weight, busy_keys,
        waiting, waiting_keys, in_flight, window, eligible, delayed}, and the
        work as an autoscaler sees it: {waiting_cost_s, in_flight_cost_s
        (estimated worker seconds), served_s (measured worker seconds of
        every attempt that ended, a counter), cost_ratio (measured /
        estimated over the last few hundred finishes, 1 before any)}. Kept by
        each call that changes it, not computed by scanning."""
        return json.loads(self._run("summary", _now(now), self.default_window, self.headroom))

    def share_basis(self, key: str) -> dict[str, Any]:
        """What `key`'s share of the lane's worker time is made of, in O(1):
        {weight, cap, busy (it has work), group (None: a group of its own),
        group_weight, group_cap, group_busy_weight (the weights of its
        group's keys with work), lane_busy_weight (the weights of the
        lane's groups with work), share}. `share`: the fraction of the
        lane's worker time the key gets while it and the others with work
        stay busy, counting its own and its group's weight in when they
        are idle (what a job submitted now would get):
        group_weight / lane's * weight / group's."""
        basis = json.loads(self._run("share", key))
        group_busy = basis["group_busy_weight"] + (0.0 if basis["busy"] else basis["weight"])
        # A group is busy when any of its keys is: with this key busy, only the group's weight may be missing.
        lane_busy = basis["lane_busy_weight"]
        if basis["group_busy_weight"] == 0:
            lane_busy += basis["group_weight"]
        basis["share"] = basis["group_weight"] / lane_busy * basis["weight"] / group_busy
        return basis

    def key_policy(self, key: str) -> tuple[float, int, bool] | None:
        """(weight, cap (0: none), has work now) of fairness key `key` as the
        lane holds it; None when the lane holds nothing of it. One HMGET."""
        w, cap, b, n = self._client.hmget(self.prefix + "h", [f"{f}|{key}" for f in ("w", "cap", "b", "n")])
        if w is None and cap is None and b is None and n is None:
            return None
        return float(w or 1), int(cap or 0), bool(int(b or 0) or int(n or 0))

    def keys_with_work(self, *, batch: int = 1000) -> Iterator[tuple[str, int, int]]:
        """Every fairness key with work, waiting or in flight: (key, jobs
        waiting, jobs in flight). For the staff page's ranking, not the hot
        path: read in steps of `batch` fields (HSCAN of the lane's hash for
        the keys' counts, b and n, which every key with work has and no
        other key keeps), so that no single command blocks Redis for long
        however many users have work. Groups' counts are skipped."""
        seen: set[str] = set()
        client, p = self._client, self.prefix

        def counts(keys: list[str]) -> Iterator[tuple[str, int, int]]:
            fresh = [k for k in dict.fromkeys(keys) if k not in seen]
            seen.update(fresh)
            if fresh:
                values = client.hmget(p + "h", [f"{f}|{k}" for k in fresh for f in ("b", "n")])
                for i, k in enumerate(fresh):
                    b, n = int(values[2 * i] or 0), int(values[2 * i + 1] or 0)
                    if b or n:
                        yield k, b, n

        for field in ("b", "n"):
            chunk: list[str] = []
            for name, _ in client.hscan_iter(p + "h", match=f"{field}|*", count=batch):
                k = _text(name)[len(field) + 1:]
                if k.startswith("@"):  # a group's count
                    continue
                chunk.append(k)
                if len(chunk) == batch:
                    yield from counts(chunk)
                    chunk = []
            yield from counts(chunk)

    def keys_info(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """For each of `keys` the lane holds anything of: {state, backlog,
        in_flight, weight, cap, group}, in two round trips. state: active
        (eligible, its group too), capped (at its own or its group's cap),
        throttled (waiting for its own or its group's token),
        in_flight_only or idle."""
        if not keys:
            return {}
        p = self.prefix
        values = self._client.hmget(p + "h", [f"{f}|{k}" for k in keys for f in ("b", "n", "w", "cap", "g")])
        rows = [values[5 * i:5 * i + 5] for i in range(len(keys))]
        groups = [_text(row[4]) if row[4] is not None else f"@k:{k}" for k, row in zip(keys, rows)]
        with self._client.pipeline(transaction=False) as pipe:
            for k, group in zip(keys, groups):
                pipe.zscore(p + "ma:" + group, k)
                pipe.sismember(p + "mc:" + group, k)
                pipe.zscore(p + "mthrottled", k)
                pipe.zscore(p + "active", group)
                pipe.sismember(p + "capped", group)
                pipe.zscore(p + "throttled", group)
            where = pipe.execute()
        info = {}
        for i, (k, group) in enumerate(zip(keys, groups)):
            b, n, w, cap, _ = rows[i]
            if b is None and n is None and w is None and cap is None:
                continue
            scored, capped, throttled, g_active, g_capped, g_throttled = where[6 * i:6 * i + 6]
            # A key of its own group is eligible when its group is in one of the lane's sets.
            eligible = scored is not None or (group.startswith("@k:") and (
                g_active is not None or bool(g_capped) or g_throttled is not None))
            if capped:
                state = "capped"
            elif throttled is not None:
                state = "throttled"
            elif eligible:
                state = ("active" if g_active is not None else "capped" if g_capped else
                         "throttled" if g_throttled is not None else "active")
            else:
                state = "in_flight_only" if int(n or 0) else "idle"
            info[k] = {"state": state, "backlog": int(b or 0), "in_flight": int(n or 0), "weight": float(w or 1),
                       "cap": int(cap or 0), "group": group[3:] if group.startswith("@g:") else None}
        return info

    def parked_counts(self) -> dict[str, int]:
        """How many keys wait at their own cap and for their own rate limit,
        and how many organisations (named groups) at theirs."""
        with self._client.pipeline(transaction=False) as pipe:
            pipe.hget(self.prefix + "h", "cm")
            pipe.zcard(self.prefix + "mthrottled")
            pipe.scard(self.prefix + "capped")
            pipe.zcard(self.prefix + "throttled")
            capped, throttled, capped_groups, throttled_groups = pipe.execute()
        return {"capped_keys": int(capped or 0), "throttled_keys": throttled, "capped_groups": capped_groups,
                "throttled_groups": throttled_groups}

    def worker_clashes(self, *, now: float | None = None) -> dict[str, dict]:
        """Worker names that two live processes claim: name -> {token (the
        refused one), until}; empty normally."""
        now = self.time() if now is None else now
        clashes = {}
        for name, raw in self._client.hgetall(self.prefix + "worker_clash").items():
            clash = json.loads(raw)
            if clash["until"] > now:
                clashes[_text(name)] = clash
        return clashes

    def health(self, *, now: float | None = None) -> dict[str, Any]:
        """What the health check needs, O(1): {eligible (keys waiting their
        turn), in_flight, window, progress_at (the last release, start,
        heartbeat or finish, Redis's clock), now, missing (released jobs
        found in no queue and held by no worker, awaiting recovery)}."""
        return json.loads(self._run("health", _now(now), self.default_window, self.headroom))

    def cancel(self, job_id: str) -> bool:
        """Remove a held or delayed job; False when it is unknown or already released."""
        return bool(self._run("cancel", job_id)[0])

    def cancel_many(self, job_ids: list[str], *, batch: int = 500) -> list[bool]:
        """`cancel` for each job, `batch` of them per call (a 5,000-job
        batch: ten calls, not 5,000), each O(batch): a job's backlog entry
        is left stale and dropped by the release that reaches it
        (lua/_lib.lua), and a call reads the records at once and writes H
        once. A bounded batch keeps any one call short: other users' calls
        wait for it."""
        done: list[bool] = []
        for start in range(0, len(job_ids), batch):
            done += [bool(result) for result in self._run("cancel", *job_ids[start:start + batch])]
        return done

    def register_worker(
        self, name: str, slots: int, *, ttl_s: float = 60, now: float | None = None, token: str = "",
        replaces: str = "",
    ) -> bool:
        """Count `slots` of worker `name` in the window for `ttl_s` (by Redis's
        clock); call again to renew. `token` names the process (the worker
        passes pid@host/start time): while the name's registration is live,
        only the token that made it may renew it. Returns False, counting
        nothing, when another live process holds the name (two workers
        started with the same node name); the clash shows in
        snapshot()["worker_clashes"] until ttl_s after the refused try.
        `replaces`: the holder's token, when the caller knows that process
        is gone (a worker restarted after a crash takes its name over). An
        empty token is never refused (tests, benchmarks)."""
        return bool(self._run("register_worker", name, slots, ttl_s, _now(now), token, replaces))

    def worker_token(self, name: str) -> str | None:
        """The token of the process that holds worker `name`'s registration
        (None: no registration, or one made without a token)."""
        token = self._client.hget(self.prefix + "worker_token", name)
        return None if token is None else _text(token)

    def live_workers(self, *, now: float | None = None) -> dict[str, tuple[int, float]]:
        """Registered workers whose registration has not expired: name ->
        (slots, expires_at). For metrics and the admin, not the hot path."""
        now = self.time() if now is None else now
        with self._client.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(self.prefix + "workers", f"({now!r}", "+inf", withscores=True)
            pipe.hgetall(self.prefix + "slots")
            live, slots = pipe.execute()
        return {_text(name): (int(slots.get(name, 0)), expires) for name, expires in live}

    def unregister_worker(self, name: str, *, token: str = "") -> bool:
        """Stop counting a worker's slots (clean shutdown). With a `token`,
        only the registration that token holds: False, changing nothing
        else, when it is another process's (see register_worker)."""
        return bool(self._run("unregister_worker", name, token))

    def snapshot(self, *, now: float | None = None) -> dict[str, Any]:
        """A consistent view for the admin and metrics (not the hot path).

        {"keys": {key: {state, backlog, in_flight, weight, cap, vt, group}},
         "groups": {name: {state, backlog, in_flight, weight, cap, vt, members}}
                   (organisations with work: keys submitted with a group;
                   a key without one is in none),
         "worker_clashes": {name: {registered, refused}} (tokens of the two
                           live processes that claim one worker name),
         "totals": {active_keys, capped_keys, throttled_keys, active_groups,
                    held, in_flight, delayed, window, V}}

        A key's state is its own (capped, throttled) or, while it is
        eligible in its group, its group's (active, capped, throttled);
        in_flight_only when it has nothing waiting. vt: a key of its own
        group, its virtual time in the lane; a group's member, within its
        group (the group's vt is the lane's).
        """
        return json.loads(self._run("snapshot", _now(now), self.default_window, self.headroom))

    def known(self, job_id: str) -> str | None:
        """The job's state (held, delayed, released, running), or None."""
        return self.known_many([job_id])[0]

    def known_many(self, job_ids: list[str]) -> list[str | None]:
        """`known` for many jobs in one round trip (the reconciler)."""
        return [None if job is None else job["s"] for job in self._records(job_ids)]

    def pending_tags(self, job_ids: list[str]) -> list[tuple[str, str] | None]:
        """(tag, key) for each job whose next message id carries a tag its
        submitter chose (`submit(tag=)`) and that was not released since; else None."""
        return [(job["t"], job["k"]) if job and job["s"] in ("held", "delayed") and job.get("t") else None
                for job in self._records(job_ids)]

    def _records(self, job_ids: list[str]) -> list[dict | None]:
        """The jobs' records, a released job's state named: the scripts
        leave a released job's record as it was held (lua/_lib.lua,
        `load_job`), in `inflight`."""
        if not job_ids:
            return []
        with self._client.pipeline(transaction=True) as pipe:
            pipe.hmget(self.prefix + "h", [f"j|{job_id}" for job_id in job_ids])
            pipe.zmscore(self.prefix + "inflight", job_ids)
            raws, leases = pipe.execute()
        records = [None if raw is None else json.loads(raw) for raw in raws]
        for record, lease in zip(records, leases):
            if record is not None and record["s"] == "held" and lease is not None:
                record["s"] = "released"
        return records

    def time(self) -> float:
        """Redis's clock, the one the scripts compare against."""
        seconds, micros = self._client.time()
        return seconds + micros / 1e6

    def next_wakeup_in(self, now: float | None = None) -> float | None:
        """Seconds until the ticker next has work: a delayed job due, a
        throttled key's or group's token, or a lease deadline; 0 when overdue; None when
        nothing is pending, so the ticker can sleep until a submit wakes it
        instead of polling. Relative, measured on Redis's clock, so a caller
        whose own clock is off still sleeps the right time.
        """
        with self._client.pipeline(transaction=False) as pipe:
            for name in ("delayed", "throttled", "mthrottled", "inflight"):
                pipe.zrange(self.prefix + name, 0, 0, withscores=True)
            pipe.time()
            *heads, (seconds, micros) = pipe.execute()
        now = seconds + micros / 1e6 if now is None else now
        times = [head[0][1] for head in heads if head]
        return max(0.0, min(times) - now) if times else None

    def clear(self) -> None:
        """Delete all of the lane's state (tests, and the reconciler before a rebuild)."""
        batch: list[bytes] = []
        for name in self._client.scan_iter(match=self.prefix + "*", count=500):
            batch.append(name)
            if len(batch) == 500:
                self._client.delete(*batch)
                batch.clear()
        if batch:
            self._client.delete(*batch)
