"""Random sequences of every FairScheduler operation against an exact model.

`Model` below is the scheduler's contract written out in Python, rule for rule
with the Lua in dispatcher/lua/: every job's state and flags (`r`:
handed back by its attempt, so a late start() of that attempt is refused;
`f`: a delayed retry that rejoins the front of its backlog), each backlog's
order, the virtual clock and each key's virtual time, the active / capped /
throttled sets with their scores, leases, in-flight counts and token
buckets. The machine runs each operation on both and compares what it
returns; after every step the invariant compares the whole of Redis's state
with the model's. The two agree by construction or the test fails with the
steps that disagree.

Beside the model, contract-level checks that do not trust it: release never
exceeds the window, a cap or a rate, and leaves no slot idle while a key is
eligible; V never goes back; every job is in exactly one place.

Randomness: `make test` runs this derandomized (the `ci` profile in
tests/conftest.py: the same examples every run, so CI cannot fail by luck);
`make test-properties` runs it with fresh seeds, each printed, and a failure
reproduces with `pytest --hypothesis-profile=explore --hypothesis-seed=<seed>`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pytest
import redis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from dispatcher import FairScheduler
from dispatcher.message import RELEASE_TAG

# Few ids and keys, so duplicates, caps and contention happen in most runs.
JOB_ID_POOL = [f"j{i}" for i in range(10)]
JOB_IDS = st.sampled_from(JOB_ID_POOL)
# Keys without a group (a group of their own: one level, as before groups)
# and members of organisations o1 (weight 2, two members of weights 1 and
# 2) and o2 (a cap of 2 and a rate for the whole organisation, one member
# with a cap of its own). `submit_elsewhere` moves keys between groups and
# changes settings at random.
KEY_SETTINGS = {
    "a": {},
    "b": {"weight": 3.0},
    "c": {"cap": 2},
    "r": {"rate": (0.5, 2)},
    "m": {"group": "o1", "group_weight": 2.0},
    "n": {"weight": 2.0, "group": "o1", "group_weight": 2.0},
    "p": {"cap": 1, "group": "o2", "group_cap": 2, "group_rate": (0.5, 3)},
    "q": {"group": "o2", "group_cap": 2, "group_rate": (0.5, 3)},
}
KEYS = sorted(KEY_SETTINGS)
ORGS = ["o1", "o2", "o3"]
# Every group the lane can hold: named ones and each key's own.
GROUPS = [f"@g:{o}" for o in ORGS] + [f"@k:{k}" for k in KEYS]
NO_RATE = (0.0, 0.0)  # scheduler.NO_RATE_LIMIT
HEADROOM, DEFAULT_WINDOW = 1, 2
START_TIME = 1_000.0
TOKEN_EPSILON = 1e-9  # lua/_lib.lua
QUEUE = "prop-celery-queue"
# Worker processes' reports of what they hold (holding): how long one stands,
# the margin between two looks at a lost message, and the processes.
HOLD_TTL_S, HOLD_MARGIN_S = 8.0, 1.0
TOKENS = ["w1", "w2"]


def solo(key: str) -> str:
    return "@k:" + key


def payload_of(job_id: str, label: str, now: float) -> str:
    """A stored message in the form the recovery reads (its task id in the
    headers, as dispatcher/message.py builds it), unique per submit."""
    return json.dumps({"headers": {"id": f"{job_id}@{RELEASE_TAG}"}, "label": f"{label} {now}"})


def message_job_id(message: str) -> str:
    return json.loads(message)["headers"]["id"].rpartition("@")[0]


@dataclass
class Job:
    key: str
    cost: float
    state: str  # "held", "delayed", "released" or "running", as the Lua's job.s
    payload: str
    handed_back: bool = False  # job.r
    front: bool = False  # job.f
    tag: str | None = None  # job.t: the submitter's tag for the next release's message id
    g: int | None = None  # job.g: the number of its live backlog entry (the last one pushed)
    # What job.t holds while the job is released or running: the tag its
    # release used (a release leaves the record as it is), until reap or
    # requeue drops it.
    spent_tag: str | None = None


@dataclass
class Model:
    """The scheduler's state and rules, mirroring lua/_lib.lua and each script.

    Two levels: groups (named organisations "@g:<name>", and "@k:<key>" for
    a key without one) share the lane, keys share their group. Settings,
    counts, virtual times and token buckets are kept per name, keys and
    groups alike, as the Lua keeps them in one hash.

    Floating point agrees exactly: the Lua computes in doubles and writes
    numbers with %.17g, which round-trips, and Python's floats are doubles.
    Sorted-set ties break by member name in Redis, and by name here.
    """

    release_lease_s: float
    run_lease_s: float
    jobs: dict[str, Job] = field(default_factory=dict)
    # Each key's list as Redis holds it: (job, entry number), stale entries
    # included (jobs that left from the middle); `waiting` counts the live
    # ones (b; a group's: its keys'), `stale` the others (x), and `sq`
    # numbers every entry pushed.
    backlogs: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    stale: dict[str, int] = field(default_factory=dict)
    sq: int = 0
    group: dict[str, str] = field(default_factory=dict)  # key -> its named group ("@g:o1"); absent: its own
    active: dict[str, float] = field(default_factory=dict)  # group -> virtual start time
    capped: set[str] = field(default_factory=set)  # groups at their cap
    throttled: dict[str, float] = field(default_factory=dict)  # group -> when its token is due
    solo_on: set[str] = field(default_factory=set)  # groups of their own key whose key is eligible
    # Named group -> its eligible keys -> their score in ma:<group> (the
    # virtual start within the group; a sole member's is not kept up).
    ma: dict[str, dict[str, float]] = field(default_factory=dict)
    capped_members: dict[str, set[str]] = field(default_factory=dict)  # group -> its keys at their cap
    mthrottled: dict[str, float] = field(default_factory=dict)  # key -> when its token is due
    gv: dict[str, float] = field(default_factory=dict)  # group -> its members' virtual clock
    delayed: dict[str, float] = field(default_factory=dict)  # job -> due
    inflight: dict[str, float] = field(default_factory=dict)  # job -> lease deadline
    inflight_n: dict[str, int] = field(default_factory=dict)  # key or group -> jobs in flight
    vt: dict[str, float] = field(default_factory=dict)  # key or group
    V: float = 0.0
    weight: dict[str, float] = field(default_factory=dict)
    cap: dict[str, int] = field(default_factory=dict)
    rate: dict[str, tuple[float, float]] = field(default_factory=dict)
    bucket: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (tokens, updated at)
    workers: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> (slots, expires at)
    policy: dict[str, tuple] = field(default_factory=dict)  # name -> the (weight, cap, rate) last applied
    pushed: list[tuple[str, str]] = field(default_factory=list)  # (job, message) pushed to the queue, in order
    queue: list[str] = field(default_factory=list)  # messages in the queue, oldest (next taken) first
    holds: dict[str, tuple[float, list[str]]] = field(default_factory=dict)  # process -> (reported at, job ids)
    missing: dict[str, tuple[float, float]] = field(default_factory=dict)  # job -> (missing since, its lease then)
    checked: float | None = None  # the last look for lost messages
    progress_at: float | None = None  # lp: the last release, start, heartbeat or finish
    served_ms: int = 0  # sv: the measured worker time of every attempt that ended
    recent: tuple[float, float] = (0.0, 0.0)  # ra, re: measured and estimated, the last finishes weighing most
    woke: bool = False  # whether the last submit made a group eligible

    # --- _lib.lua --------------------------------------------------------------

    def group_of(self, key: str) -> str:
        return self.group.get(key) or solo(key)

    def w(self, name: str) -> float:
        return self.weight.get(name, 1.0)

    def raw(self, key: str) -> list[tuple[str, int]]:
        return self.backlogs.setdefault(key, [])

    def live(self, job_id: str, g: int) -> bool:
        job = self.jobs.get(job_id)
        return job is not None and job.state == "held" and job.g == g

    def backlog(self, key: str) -> list[str]:
        """The jobs waiting in the key's backlog, in order."""
        return [job_id for job_id, g in self.raw(key) if self.live(job_id, g)]

    def count(self, counts: dict[str, int], name: str, n: int) -> None:
        if n > 0:
            counts[name] = n
        else:
            counts.pop(name, None)

    def set_waiting(self, key: str, n: int) -> None:
        was = self.waiting.get(key, 0)
        self.count(self.waiting, key, n)
        if n != was:
            g = self.group_of(key)
            self.count(self.waiting, g, self.waiting.get(g, 0) + max(0, n) - was)
        if n <= 0 and self.stale.get(key, 0) > 0:  # only stale entries are left: the list goes
            self.backlogs[key] = []
            self.stale.pop(key)

    def set_stale(self, key: str, n: int) -> None:
        self.count(self.stale, key, n)

    def set_in_flight(self, key: str, n: int) -> None:
        was = self.inflight_n.get(key, 0)
        n = max(0, n)
        self.count(self.inflight_n, key, n)
        g = self.group_of(key)
        self.count(self.inflight_n, g, max(0, self.inflight_n.get(g, 0) + n - was))

    def push(self, key: str, job_id: str, front: bool) -> None:
        self.sq += 1
        self.jobs[job_id].g = self.sq
        self.raw(key).insert(0, (job_id, self.sq)) if front else self.raw(key).append((job_id, self.sq))
        self.set_waiting(key, self.waiting.get(key, 0) + 1)

    def leave(self, key: str) -> None:
        """A held job leaves from the middle: its entry stays, stale."""
        self.set_stale(key, self.stale.get(key, 0) + 1)
        self.set_waiting(key, self.waiting.get(key, 0) - 1)
        self.untrack_if_empty(key)

    def pop(self, key: str) -> tuple[str, int] | None:
        raw = self.raw(key)
        while raw:
            job_id, g = raw.pop(0)
            if self.live(job_id, g):
                return job_id, g
            self.set_stale(key, self.stale.get(key, 0) - 1)
        return None

    def eligible_count(self, g: str) -> int:
        if g.startswith("@k:"):
            return 1 if g in self.solo_on else 0
        return len(self.ma.get(g, {}))

    def group_start(self, g: str) -> float:
        return max(self.vt.get(g, 0.0), self.V)

    def member_start(self, key: str, g: str) -> float:
        return max(self.vt.get(key, 0.0), self.gv.get(g, 0.0))

    def untrack_group(self, g: str) -> None:
        self.active.pop(g, None)
        self.capped.discard(g)
        self.throttled.pop(g, None)

    def enter_members(self, g: str, key: str) -> bool:
        n = self.eligible_count(g)
        if g.startswith("@k:"):
            self.solo_on.add(g)
        elif n == 1:  # a second one: the first's start is set afresh beside it
            (sole,) = self.ma[g]
            self.ma[g] = {sole: self.member_start(sole, g), key: self.member_start(key, g)}
        else:
            self.ma.setdefault(g, {})[key] = self.member_start(key, g)
        if n == 0:
            self.active[g] = self.group_start(g)
            return True
        return False

    def leave_members(self, g: str, key: str) -> None:
        n = self.eligible_count(g)
        if n == 0:
            return
        if g.startswith("@k:"):
            self.solo_on.discard(g)
        elif key not in self.ma.get(g, {}):
            return
        else:
            del self.ma[g][key]
            if not self.ma[g]:
                del self.ma[g]
        if n == 1:
            self.untrack_group(g)

    def is_eligible(self, key: str, g: str) -> bool:
        return self.eligible_count(g) > 0 and (g.startswith("@k:") or key in self.ma[g])

    def parked(self, key: str) -> bool:
        return key in self.capped_members.get(self.group_of(key), set()) or key in self.mthrottled

    def activate(self, key: str) -> bool:
        if not self.waiting.get(key):
            return False
        g = self.group_of(key)
        if self.is_eligible(key, g) or self.parked(key):
            return False
        return self.enter_members(g, key)

    def reactivate_group(self, g: str) -> None:
        if self.eligible_count(g) > 0:
            self.active[g] = self.group_start(g)

    def unpark_capped(self, g: str, key: str) -> bool:
        members = self.capped_members.get(g, set())
        was = key in members
        members.discard(key)
        if not members:
            self.capped_members.pop(g, None)
        return was

    def untrack_if_empty(self, key: str) -> None:
        if not self.waiting.get(key):
            g = self.group_of(key)
            self.leave_members(g, key)
            self.unpark_capped(g, key)
            self.mthrottled.pop(key, None)

    def adjust_vt(self, key: str, delta: float) -> None:
        g = self.group_of(key)
        self.vt[key] = self.vt.get(key, 0.0) + delta / self.w(key)
        if self.waiting.get(key, 0) > 0 and self.eligible_count(g) >= 2 and key in self.ma.get(g, {}):
            self.ma[g][key] = max(self.vt[key], self.gv.get(g, 0.0))
        self.vt[g] = self.vt.get(g, 0.0) + delta / self.w(g)
        if g in self.active:
            self.active[g] = max(self.vt[g], self.V)

    def leave_flight(self, job_id: str) -> None:
        key = self.jobs[job_id].key
        del self.inflight[job_id]
        self.set_in_flight(key, self.inflight_n.get(key, 0) - 1)
        g = self.group_of(key)
        if self.cap.get(key, 0) > 0 and self.unpark_capped(g, key):
            self.enter_members(g, key)
        if self.cap.get(g, 0) > 0 and g in self.capped:
            self.capped.discard(g)
            self.reactivate_group(g)

    def put_back(self, job_id: str) -> None:
        job = self.jobs[job_id]
        job.state = "held"
        self.push(job.key, job_id, front=True)
        self.activate(job.key)

    def drop_waiting(self, job_id: str) -> None:
        job = self.jobs[job_id]
        if job.state == "delayed":
            del self.delayed[job_id]
        else:
            self.leave(job.key)

    def take_token(self, name: str, now: float, peek: bool = False) -> float:
        if name not in self.rate:
            return 0.0
        per_s, burst = self.rate[name]
        tokens, at = burst, now
        if name in self.bucket:
            t, a = self.bucket[name]
            tokens = min(burst, t + max(0.0, now - a) * per_s)
            at = max(a, now)
        if tokens >= 1 - TOKEN_EPSILON:
            if not peek:
                self.bucket[name] = (max(0.0, tokens - 1), at)
            return 0.0
        if not peek:
            self.bucket[name] = (tokens, at)
        return (1 - tokens) / per_s

    def at_cap(self, name: str) -> bool:
        return self.cap.get(name, 0) > 0 and self.inflight_n.get(name, 0) >= self.cap[name]

    def window(self, now: float) -> int:
        live = [slots for slots, expires in self.workers.values() if expires > now]
        return (sum(live) if live else DEFAULT_WINDOW) + HEADROOM

    def promote_due(self, now: float) -> None:
        for job_id in sorted((j for j, due in self.delayed.items() if due <= now),
                             key=lambda j: (self.delayed[j], j)):
            del self.delayed[job_id]
            job = self.jobs[job_id]
            front = job.front
            if job.front:
                job.front, job.handed_back = False, True
            job.state = "held"
            self.push(job.key, job_id, front=front)
            self.activate(job.key)
        for key in sorted((k for k, ready in self.mthrottled.items() if ready <= now),
                          key=lambda k: (self.mthrottled[k], k)):
            del self.mthrottled[key]
            self.activate(key)
        for g in sorted((g for g, ready in self.throttled.items() if ready <= now),
                        key=lambda g: (self.throttled[g], g)):
            del self.throttled[g]
            self.reactivate_group(g)

    def release(self, now: float, limit: int = 0) -> list[str]:
        self.promote_due(now)
        out: list[str] = []
        room = self.window(now) - len(self.inflight)
        if limit > 0:
            room = min(room, limit)
        tag = str(math.floor(now * 1e6))
        while room > 0 and self.active:
            g = min(self.active, key=lambda x: (self.active[x], x))
            if g.startswith("@k:"):
                key = g[3:]
            else:
                members = self.ma[g]
                key = min(members, key=lambda k: (members[k], k))
            entry = self.pop(key)  # first, stale entries on the way dropped
            if entry is None:  # no live entry though `waiting` said so: set right
                self.set_waiting(key, 0)
                self.untrack_if_empty(key)
                continue
            if self.at_cap(g):
                del self.active[g]
                self.capped.add(g)
                self.raw(key).insert(0, entry)
                continue
            if self.at_cap(key):
                self.leave_members(g, key)
                self.capped_members.setdefault(g, set()).add(key)
                self.raw(key).insert(0, entry)
                continue
            wait = self.take_token(g, now, peek=True)
            if wait > 0:
                del self.active[g]
                self.throttled[g] = now + wait
                self.raw(key).insert(0, entry)
                continue
            wait = self.take_token(key, now)
            if wait > 0:
                self.leave_members(g, key)
                self.mthrottled[key] = now + wait
                self.raw(key).insert(0, entry)
                continue
            self.take_token(g, now)
            job_id = entry[0]
            self.set_waiting(key, self.waiting[key] - 1)
            job = self.jobs[job_id]
            g_finish = self.send(job_id, key, g, job.cost, now)
            if self.waiting.get(key):
                if self.eligible_count(g) >= 2:
                    self.ma[g][key] = self.vt[key]
            else:
                self.leave_members(g, key)
            if self.eligible_count(g) > 0:
                self.active[g] = g_finish
            job.state, job.handed_back = "released", False
            self.pushed.append((job_id, job.payload.replace(RELEASE_TAG, job.tag or tag)))
            self.queue.append(self.pushed[-1][1])
            job.tag, job.spent_tag = None, job.tag
            out.append(job_id)
            room -= 1
        if out:
            self.progress_at = now
        return out

    def send(self, job_id: str, key: str, g: str, cost: float, now: float) -> float:
        """Charged at both levels: the group in the lane, the key in its group."""
        g_start, k_start = self.group_start(g), self.member_start(key, g)
        self.V = g_start
        g_finish = g_start + cost / self.w(g)
        self.vt[g] = g_finish
        if k_start != self.gv.get(g, 0.0):
            self.gv[g] = k_start
        self.vt[key] = k_start + cost / self.w(key)
        self.inflight[job_id] = now + self.release_lease_s
        self.set_in_flight(key, self.inflight_n.get(key, 0) + 1)
        return g_finish

    # --- one method per script ---------------------------------------------------

    def submit(self, job_id: str, key: str, cost: float, payload: str, due: float | None, now: float,
               weight: float | None = None, cap: int | None = None,
               rate: tuple[float, float] | None = None, tag: str = "", group: str | None = None,
               group_weight: float | None = None, group_cap: int | None = None,
               group_rate: tuple[float, float] | None = None) -> bool:
        self.woke = False
        if job_id in self.jobs:
            return False
        wanted = f"@g:{group}" if group else solo(key)
        g = self.group_of(key)
        if g != wanted and not self.waiting.get(key) and not self.inflight_n.get(key):
            # An idle key moves to the group its submit names, and starts there afresh.
            if group:
                self.group[key] = wanted
            else:
                self.group.pop(key, None)
            self.vt.pop(key, None)
            g = wanted
        woke = self.apply_policy(key, (weight, cap, rate))
        # A group of its own weighs what its key does and has no limits.
        woke = self.apply_policy(wanted, (group_weight, group_cap, group_rate) if group else
                                 (weight, 0, NO_RATE)) or woke
        if due is not None and due > now:
            self.jobs[job_id] = Job(key, cost, "delayed", payload, tag=tag or None)
            self.delayed[job_id] = due
        else:
            self.jobs[job_id] = Job(key, cost, "held", payload, tag=tag or None)
            self.push(key, job_id, front=False)
            if self.waiting[key] == 1:
                woke = self.enter_members(g, key) or woke
        self.woke = woke
        return True

    def apply_policy(self, name: str, policy: tuple) -> bool:
        """A key's or group's settings as a submit gives them (None: as they
        are); returns whether un-parking made a group eligible."""
        if policy == (None, None, None) or self.policy.get(name) == policy:  # settings repeated: nothing
            return False
        weight, cap, rate = policy
        may_be_parked = name in self.cap or name in self.rate
        self.policy[name] = policy
        if weight is not None:
            self.weight[name] = weight
        if cap is not None:
            if cap == 0:
                self.cap.pop(name, None)
            else:
                self.cap[name] = cap
        if rate is not None:
            if rate == NO_RATE:
                self.rate.pop(name, None)
                self.bucket.pop(name, None)
            else:
                self.rate[name] = rate
        if not (may_be_parked and (cap is not None or rate is not None)):
            return False
        # New limits apply at once: one parked for its old ones is let out.
        if name.startswith("@"):
            parked = name in self.capped or name in self.throttled
            self.capped.discard(name)
            self.throttled.pop(name, None)
            if parked and self.eligible_count(name) > 0:
                self.active[name] = self.group_start(name)
                return True
            return False
        capped = self.unpark_capped(self.group_of(name), name)
        throttled = self.mthrottled.pop(name, None) is not None
        return (capped or throttled) and self.activate(name)

    def start(self, job_id: str, now: float) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state == "delayed" or job.handed_back:
            return False
        if job.state == "held":  # reaped while its message was on its way: it runs now
            self.leave(job.key)
            self.set_in_flight(job.key, self.inflight_n.get(job.key, 0) + 1)
        self.inflight[job_id] = now + self.run_lease_s
        job.state = "running"
        self.progress_at = now
        return True

    def heartbeat(self, job_ids: list[str], now: float) -> int:
        renewed = 0
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state == "running":
                self.inflight[job_id] = now + self.run_lease_s
                renewed += 1
        if renewed:
            self.progress_at = now
        return renewed

    def finish(self, job_id: str, actual: float | None, now: float) -> list[str]:
        job = self.jobs.get(job_id)
        ran = job is not None and job.state in ("released", "running")
        if job is not None:
            if ran:
                if actual is not None:
                    self.adjust_vt(job.key, actual - job.cost)
                    self.count_served(job, actual, finished=True)
                self.leave_flight(job_id)
            else:
                self.drop_waiting(job_id)
            del self.jobs[job_id]
        released = self.release(now)
        if ran:
            self.progress_at = now
        return released

    def requeue(self, job_id: str, actual: float, due: float | None, now: float, payload: str,
                tag: str = "") -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ("released", "running"):
            return False
        job.tag = job.spent_tag = None  # the scripts drop the record's tag: spent or not, it is not reused
        if payload:
            job.payload, job.tag = payload, tag or None
        self.adjust_vt(job.key, actual - job.cost)
        self.count_served(job, actual, finished=False)
        self.leave_flight(job_id)
        if due is not None and due > now:
            job.state, job.front = "delayed", True
            self.delayed[job_id] = due
        else:
            self.put_back(job_id)
            job.handed_back = True
        return True

    def count_served(self, job: Job, actual: float, *, finished: bool) -> None:
        if actual > 0:
            self.served_ms += math.floor(actual * 1000 + 0.5)
            if finished and job.cost > 0:
                keep = 1 - 1 / 256
                self.recent = (self.recent[0] * keep + actual, self.recent[1] * keep + job.cost)

    def reap(self, now: float) -> list[str]:
        expired = sorted((j for j, deadline in self.inflight.items() if deadline <= now),
                         key=lambda j: (self.inflight[j], j), reverse=True)
        for job_id in expired:
            self.leave_flight(job_id)
            self.jobs[job_id].tag = self.jobs[job_id].spent_tag = None  # as requeue
            self.put_back(job_id)
        return expired

    def holding(self, token: str, job_ids: list[str], now: float, every_s: float) -> list[str]:
        self.holds[token] = (now, list(job_ids))
        if every_s > 0 and self.checked is not None and now >= self.checked and now - self.checked < every_s:
            return []
        self.checked = now
        self.holds = {t: r for t, r in self.holds.items() if r[0] + HOLD_TTL_S > now}
        holder = {j for _, ids in self.holds.values() for j in ids}
        oldest = min((at for at, _ in self.holds.values()), default=math.inf)
        queued = {message_job_id(m) for m in self.queue}
        missing, recovered = {}, []
        for job_id in sorted(self.inflight, key=lambda j: (self.inflight[j], j), reverse=True):
            job = self.jobs[job_id]
            if job.state != "released" or job_id in queued or job_id in holder:
                continue
            mark = self.missing.get(job_id)
            since = mark[0] if mark and mark[1] == self.inflight[job_id] else None
            if since is not None and oldest > since + HOLD_MARGIN_S:
                self.leave_flight(job_id)
                job.tag = job.spent_tag = None  # as reap
                self.put_back(job_id)
                recovered.append(job_id)
            else:
                missing[job_id] = (now if since is None else since, self.inflight[job_id])
        self.missing = missing
        return recovered

    def health(self, now: float) -> dict:
        if self.progress_at is None:
            self.progress_at = now
        return {"eligible": len(self.active), "in_flight": len(self.inflight), "window": self.window(now),
                "progress_at": self.progress_at, "now": now, "missing": len(self.missing)}

    def cancel(self, job_id: str) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ("held", "delayed"):
            return False
        self.drop_waiting(job_id)
        del self.jobs[job_id]
        return True

    def register_worker(self, name: str, slots: int, ttl_s: float, now: float) -> None:
        self.workers = {n: w for n, w in self.workers.items() if w[1] > now}
        self.workers[name] = (slots, now + ttl_s)

    def next_wakeup_in(self, now: float) -> float | None:
        heads = [min(d.values()) for d in (self.delayed, self.throttled, self.mthrottled, self.inflight) if d]
        return max(0.0, min(heads) - now) if heads else None


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        self.client = client
        self.sched = FairScheduler(client, "prop", headroom=HEADROOM, default_window=DEFAULT_WINDOW, queue=QUEUE)
        self.sched.clear()
        client.delete(QUEUE)
        assert client.keys("{fair:prop}*") == []
        self.model = Model(self.sched.release_lease_s, self.sched.run_lease_s)
        self.now = START_TIME
        self.tags = 0
        self.last_v = 0.0

    def check_released(self, released: list[tuple[str, str]], expected: list[str], *, window: int,
                       in_flight_before: int, limit: int = 0, conserving: bool = True) -> None:
        """What release returned is what the model released, with each job's
        message (its release tag filled in), and it keeps the contract
        whatever the model says."""
        assert [job_id for job_id, _ in released] == expected
        assert released == (self.model.pushed[-len(expected):] if expected else [])
        assert len(self.model.inflight) <= max(window, in_flight_before)
        m = self.model
        for name, cap in m.cap.items():
            released_here = sum(name in (m.jobs[j].key, m.group_of(m.jobs[j].key)) for j in expected)
            if released_here:
                assert m.inflight_n.get(name, 0) <= cap, f"{name} released past its cap"
        if conserving and not limit:  # work conservation: a free slot remains only if no group is eligible
            assert len(m.inflight) >= window or not m.active

    def release_and_check(self, call, model_call, *, limit: int = 0) -> None:
        """Run a releasing operation on both; compare what each released."""
        window, before = self.model.window(self.now), len(self.model.inflight)
        released = call()
        self.check_released(released, model_call(), window=window, in_flight_before=before, limit=limit)

    # Rules --------------------------------------------------------------------

    @rule(job_id=JOB_IDS, key=st.sampled_from(KEYS), cost=st.sampled_from([0.5, 1.0, 4.0]),
          delay=st.sampled_from([None, 0.0, 5.0, 50.0]), relative=st.booleans(), tagged=st.booleans())
    def submit(self, job_id, key, cost, delay, relative, tagged):
        due = None if delay is None else self.now + delay
        payload = payload_of(job_id, "payload", self.now)
        when = {"delay_s": delay} if relative else {"due": due}
        tag = self.new_tag() if tagged else ""
        accepted = self.sched.submit(job_id, key, cost=cost, payload=payload, now=self.now, tag=tag, **when,
                                     **KEY_SETTINGS[key])
        assert accepted == self.model.submit(job_id, key, cost, payload, due, self.now, tag=tag,
                                             **KEY_SETTINGS[key])

    def new_tag(self) -> str:
        """A submitter's tag (message.new_tag's form: never digits only)."""
        self.tags += 1
        return f"s{self.tags}"

    @rule(key=st.sampled_from(KEYS), n=st.integers(2, 4))
    def submit_burst(self, key, n):
        """Several jobs of one key at once: what makes caps and rates bind."""
        for job_id in [i for i in JOB_ID_POOL if i not in self.model.jobs][:n]:
            payload = payload_of(job_id, "payload", self.now)
            assert self.sched.submit(job_id, key, payload=payload, now=self.now, **KEY_SETTINGS[key])
            assert self.model.submit(job_id, key, 1.0, payload, None, self.now, **KEY_SETTINGS[key])

    @rule(jobs=st.lists(st.tuples(JOB_IDS, st.sampled_from(KEYS), st.sampled_from([None, 5.0])), max_size=6),
          batch=st.sampled_from([1, 2, 500]))
    def submit_many(self, jobs, batch):
        """A batch's submits, `batch` to a call (enqueue_many): the same as
        one by one, in order (a job named twice is accepted once), several
        keys and delays in one call."""
        calls, expected = [], []
        for job_id, key, delay in jobs:
            payload, tag = payload_of(job_id, "payload", self.now), self.new_tag()
            calls.append((job_id, key, {"payload": payload, "now": self.now, "tag": tag, "delay_s": delay,
                                        **KEY_SETTINGS[key]}))
            expected.append((job_id, key, payload, None if delay is None else self.now + delay, tag))
        assert self.sched.submit_many(calls, batch=batch) == [
            self.model.submit(job_id, key, 1.0, payload, due, self.now, tag=tag, **KEY_SETTINGS[key])
            for job_id, key, payload, due, tag in expected]

    @rule(job_id=JOB_IDS, key=st.sampled_from(KEYS), cost=st.sampled_from([0.5, 4.0]))
    def submit_and_release(self, job_id, key, cost):
        payload, tag = payload_of(job_id, "payload", self.now), self.new_tag()
        accepted, released = self.sched.submit_and_release(job_id, key, cost=cost, payload=payload, now=self.now,
                                                            tag=tag, **KEY_SETTINGS[key])
        window, before = self.model.window(self.now), len(self.model.inflight)
        assert accepted == self.model.submit(job_id, key, cost, payload, None, self.now, tag=tag,
                                             **KEY_SETTINGS[key])
        # It releases only when the submit made a group eligible: otherwise
        # the window was full or nothing was eligible after the last release,
        # unless a plain submit, a registration or a reap left room, which
        # the ticker's release fills (the `release` rule here).
        woke = self.model.woke
        self.check_released(released, self.model.release(self.now) if woke else [], window=window,
                            in_flight_before=before, conserving=woke)

    @rule(job_id=JOB_IDS, key=st.sampled_from(KEYS), group=st.sampled_from([None, *ORGS]),
          weight=st.sampled_from([None, 1.0, 2.5]), cap=st.sampled_from([None, 0, 1, 3]),
          rate=st.sampled_from([None, NO_RATE, (1.0, 1), (0.25, 2)]),
          group_weight=st.sampled_from([None, 0.5, 4.0]), group_cap=st.sampled_from([None, 0, 1, 2]),
          group_rate=st.sampled_from([None, NO_RATE, (1.0, 2)]), release=st.booleans())
    def submit_elsewhere(self, job_id, key, group, weight, cap, rate, group_weight, group_cap, group_rate,
                         release):
        """A key submits with other settings or in another organisation (a
        plan changed, a user moved): it moves only while idle, and new
        limits let parked keys and groups out."""
        payload = payload_of(job_id, "payload", self.now)
        settings = {"weight": weight, "cap": cap, "rate": rate, "group": group}
        if group:
            settings.update(group_weight=group_weight, group_cap=group_cap, group_rate=group_rate)
        window, before = self.model.window(self.now), len(self.model.inflight)
        if release:
            accepted, released = self.sched.submit_and_release(job_id, key, payload=payload, now=self.now,
                                                                **settings)
        else:
            accepted, released = self.sched.submit(job_id, key, payload=payload, now=self.now, **settings), []
        assert accepted == self.model.submit(job_id, key, 1.0, payload, None, self.now, **settings)
        woke = release and self.model.woke
        self.check_released(released, self.model.release(self.now) if woke else [], window=window,
                            in_flight_before=before, conserving=woke)

    @rule(limit=st.sampled_from([0, 0, 1]))
    def release(self, limit):
        self.release_and_check(lambda: self.sched.release(now=self.now, limit=limit or None),
                               lambda: self.model.release(self.now, limit), limit=limit)

    @rule(job_id=JOB_IDS)
    def start(self, job_id):
        assert self.sched.start(job_id, now=self.now) == self.model.start(job_id, self.now)

    @precondition(lambda self: any(j.state == "released" for j in self.model.jobs.values()))
    @rule(data=st.data())
    def start_a_released_job(self, data):
        """What workers mostly do; random ids alone rarely hit a released job."""
        job_id = data.draw(st.sampled_from(sorted(i for i, j in self.model.jobs.items() if j.state == "released")))
        self.start(job_id)

    @rule(job_ids=st.lists(JOB_IDS, max_size=3, unique=True))
    def heartbeat(self, job_ids):
        assert self.sched.heartbeat(job_ids, now=self.now) == self.model.heartbeat(job_ids, self.now)

    @rule(job_id=JOB_IDS, actual=st.sampled_from([None, 0.5, 8.0]), hint=st.sampled_from([None, *KEYS]))
    def finish(self, job_id, actual, hint=None):
        """`hint`: the key the caller names (the worker's, from the message);
        a wrong one must change nothing but the call's cost."""
        self.release_and_check(lambda: self.sched.finish(job_id, actual_cost=actual, key=hint, now=self.now),
                               lambda: self.model.finish(job_id, actual, self.now))

    @precondition(lambda self: self.model.inflight)
    @rule(actual=st.sampled_from([None, 0.5, 8.0]))
    def finish_a_job_in_flight(self, actual):
        """What workers mostly do, naming the job's key."""
        job_id = min(self.model.inflight, key=lambda i: (self.model.inflight[i], i))
        self.finish(job_id, actual, self.model.jobs[job_id].key)

    @rule(job_id=JOB_IDS, actual=st.sampled_from([0.0, 0.5, 8.0]), delay=st.sampled_from([None, 0.0, 5.0]),
          new_payload=st.booleans(), relative=st.booleans())
    def requeue(self, job_id, actual, delay, new_payload, relative=False):
        """A shutdown's hand-back (at once) or a retry's backoff (delayed: as
        a due time, or as a delay the script adds to its clock), with or
        without a new message."""
        due = None if delay is None else self.now + delay
        payload = payload_of(job_id, "retry payload", self.now) if new_payload else ""
        tag = self.new_tag() if new_payload else ""
        when = {"delay_s": delay} if relative else {"due": due}
        assert (self.sched.requeue(job_id, actual_cost=actual, payload=payload, tag=tag, now=self.now, **when)
                == self.model.requeue(job_id, actual, due, self.now, payload, tag))

    @precondition(lambda self: self.model.inflight)
    @rule(data=st.data(), actual=st.sampled_from([0.0, 8.0]), delay=st.sampled_from([None, 5.0]))
    def requeue_a_job_in_flight(self, data, actual, delay):
        self.requeue(data.draw(st.sampled_from(sorted(self.model.inflight))), actual, delay, False,
                     relative=data.draw(st.booleans()))

    @rule()
    def reap(self):
        assert self.sched.reap(now=self.now) == self.model.reap(self.now)

    @rule(job_id=JOB_IDS)
    def cancel(self, job_id):
        assert self.sched.cancel(job_id) == self.model.cancel(job_id)

    @rule(job_ids=st.lists(JOB_IDS, max_size=6), batch=st.sampled_from([1, 2, 500]))
    def cancel_many(self, job_ids, batch):
        """A batch's cancel, `batch` to a call: the same as one by one (a
        job named twice is canceled once)."""
        assert self.sched.cancel_many(job_ids, batch=batch) == [self.model.cancel(j) for j in job_ids]

    @precondition(lambda self: self.model.queue)
    @rule()
    def take_a_message(self):
        """A worker takes the oldest message from the queue (BRPOP's end);
        whether it says so, or dies with it, is up to the `holding` rule."""
        assert self.client.rpop(QUEUE).decode() == self.model.queue.pop(0)

    @rule(token=st.sampled_from(TOKENS), every_s=st.sampled_from([0.0, 2.0]), data=st.data())
    def holding(self, token, every_s, data):
        """A worker process reports what it holds: any of the jobs, held by it
        or not (a message it took and lost is one it does not list)."""
        in_flight = sorted(self.model.inflight)
        job_ids = data.draw(st.lists(st.sampled_from(in_flight) if in_flight and data.draw(st.booleans()) else JOB_IDS,
                                     max_size=2, unique=True))
        assert (self.sched.holding(token, job_ids, ttl_s=HOLD_TTL_S, margin_s=HOLD_MARGIN_S, every_s=every_s,
                                   now=self.now)
                == self.model.holding(token, job_ids, self.now, every_s))

    @rule()
    def clear(self):
        """Everything the lane held goes (the reconciler's rebuild after
        Redis lost data): backlogs with their stale entries, counts, leases."""
        self.sched.clear()
        self.client.delete(QUEUE)
        self.model = Model(self.sched.release_lease_s, self.sched.run_lease_s)
        self.last_v = 0.0

    @rule()
    def health(self):
        assert self.sched.health(now=self.now) == self.model.health(self.now)

    @rule(seconds=st.sampled_from([0.5, 1.5, 3.0, 31.0, 301.0]))
    def advance_time(self, seconds):
        self.now += seconds

    @rule(name=st.sampled_from(["w1", "w2"]), slots=st.integers(1, 3))
    def register_worker(self, name, slots):
        self.sched.register_worker(name, slots, ttl_s=60, now=self.now)
        self.model.register_worker(name, slots, 60, self.now)

    @rule()
    def known_and_next_wakeup(self):
        states = self.sched.known_many(JOB_ID_POOL)
        assert states == [self.model.jobs[i].state if i in self.model.jobs else None for i in JOB_ID_POOL]
        assert self.sched.next_wakeup_in(self.now) == self.model.next_wakeup_in(self.now)

    # Invariants ----------------------------------------------------------------

    @invariant()
    def redis_state_is_the_models(self):
        p, m = self.sched.prefix, self.model
        text = lambda b: b.decode() if isinstance(b, bytes) else b  # noqa: E731
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(p + "h")
        for name in ("active", "throttled", "mthrottled", "delayed", "inflight"):
            pipe.zrange(p + name, 0, -1, withscores=True)
        pipe.smembers(p + "capped")
        pipe.lrange(QUEUE, 0, -1)
        for key in KEYS:
            pipe.lrange(p + "q:" + key, 0, -1)
        for g in GROUPS:
            pipe.zrange(p + "ma:" + g, 0, -1, withscores=True)
            pipe.smembers(p + "mc:" + g)
        h, active, throttled, mthrottled, delayed, inflight, capped, queue, *rest = pipe.execute()
        backlogs, per_group = rest[:len(KEYS)], rest[len(KEYS):]
        ma = dict(zip(GROUPS, per_group[0::2]))
        mc = dict(zip(GROUPS, per_group[1::2]))
        names = [*KEYS, *GROUPS]
        # One hash (lua/_lib.lua, H): "<field>|<key, group or job id>", and the lane's numbers without a "|".
        fields = {tuple(text(f).split("|", 1)) if "|" in text(f) else (text(f),): text(x) for f, x in h.items()}
        per_name = {n: {f[0]: x for f, x in fields.items() if f[1:] == (n,) and f[0] not in ("j", "p")}
                    for n in names}
        jobs = {f"{f[0]}{f[1]}": x for f, x in fields.items() if f[0] in ("j", "p") and len(f) == 2}
        v, in_flight_count = fields.get(("V",)), fields.get(("fl",))
        # The lane's summary (update_summary), kept by every call, is what a
        # scan would find: keys (aw, ak, bt, kb), groups (gw, gk), each
        # group's keys (mw), the keys at their cap (cm).
        millionths = lambda n: math.floor(m.w(n) * 1e6 + 0.5)  # noqa: E731
        busy = [k for k in KEYS if m.waiting.get(k) or m.inflight_n.get(k)]
        busy_groups = [g for g in GROUPS if m.waiting.get(g) or m.inflight_n.get(g)]
        expected = {"aw": sum(millionths(k) for k in busy), "ak": len(busy),
                    "bt": sum(m.waiting.get(k, 0) for k in KEYS), "kb": sum(1 for k in KEYS if m.waiting.get(k)),
                    "gw": sum(millionths(g) for g in busy_groups), "gk": len(busy_groups),
                    "cm": sum(len(c) for c in m.capped_members.values())}
        assert {f: int(fields.get((f,), 0)) for f in expected} == expected
        assert {g: int(per_name[g].get("mw", 0)) for g in GROUPS} == {
            g: sum(millionths(k) for k in busy if m.group_of(k) == g) for g in GROUPS}
        # The work (count_cost, count_served): estimated milliseconds waiting
        # and in flight, measured ones served, the recent ratio's sums.
        ms = lambda job_ids: sum(math.floor(m.jobs[j].cost * 1000 + 0.5) for j in job_ids)  # noqa: E731
        work = {"wc": ms(j for key in KEYS for j in m.backlog(key)), "fc": ms(m.inflight), "sv": m.served_ms}
        assert {f: int(fields.get((f,), 0)) for f in work} == work
        assert (float(fields.get(("ra",), 0)), float(fields.get(("re",), 0))) == pytest.approx(m.recent, rel=1e-12)
        assert not {f for f in fields if len(f) == 2 and f[1] not in names and f[0] not in ("j", "p")}, \
            "a stray field"
        scored = lambda pairs: {text(member): score for member, score in pairs}  # noqa: E731

        records = {text(f)[1:]: json.loads(raw) for f, raw in jobs.items() if text(f).startswith("j")}
        # A release leaves the record as it was held: state and tag.
        assert records == {
            i: {"k": j.key, "c": j.cost, "s": "held" if j.state == "released" else j.state,
                **({"r": 1} if j.handed_back else {}), **({"f": 1} if j.front else {}),
                **({"t": t} if (t := j.tag or j.spent_tag) else {}), **({"g": j.g} if j.g is not None else {})}
            for i, j in m.jobs.items()
        }
        payloads = {text(f)[1:]: text(body) for f, body in jobs.items() if text(f).startswith("p")}
        assert payloads == {i: j.payload for i, j in m.jobs.items()}
        assert {key: list(map(text, q)) for key, q in zip(KEYS, backlogs)} == {
            key: [f"{i}|{g}" for i, g in m.raw(key)] for key in KEYS}
        # The waiting jobs counted beside each list are its live entries (a
        # job counted once whatever stale entries it has), the rest are
        # stale; a group's are its keys'.
        assert {n: int(f["b"]) for n, f in per_name.items() if "b" in f} == m.waiting
        assert {k: m.waiting[k] for k in KEYS if k in m.waiting} == {
            key: len(m.backlog(key)) for key in KEYS if m.backlog(key)}
        assert {g: m.waiting[g] for g in GROUPS if g in m.waiting} == {
            g: n for g in GROUPS if (n := sum(len(m.backlog(k)) for k in KEYS if m.group_of(k) == g))}
        assert {k: int(f["x"]) for k, f in per_name.items() if "x" in f} == m.stale
        assert all(m.stale.get(key, 0) == len(m.raw(key)) - len(m.backlog(key)) for key in KEYS)
        assert scored(active) == m.active
        assert {text(g) for g in capped} == m.capped
        assert scored(throttled) == m.throttled
        assert scored(mthrottled) == m.mthrottled
        assert scored(delayed) == m.delayed
        assert scored(inflight) == m.inflight
        # A named group's eligible keys are the sorted set ma:<group>, with
        # their scores; a group of its own key has none.
        assert {g: scored(ma[g]) for g in GROUPS if ma[g]} == {g: x for g, x in m.ma.items() if x}
        assert {g: int(f["me"]) for g, f in per_name.items() if "me" in f} == {
            g: n for g in GROUPS if (n := m.eligible_count(g))}
        assert {g: {text(k) for k in mc[g]} for g in GROUPS if mc[g]} == {
            g: x for g, x in m.capped_members.items() if x}
        assert {k: text(f["g"]) for k, f in per_name.items() if "g" in f} == m.group
        assert {g: float(f["gv"]) for g, f in per_name.items() if "gv" in f} == m.gv
        assert {n: int(f["n"]) for n, f in per_name.items() if int(f.get("n", 0))} == m.inflight_n
        assert {n: float(f["vt"]) for n, f in per_name.items() if "vt" in f} == m.vt
        assert float(v or 0) == m.V
        # The lane's count of jobs in flight, which sizes the window, is exact.
        assert in_flight_count is None or int(in_flight_count) == len(inflight)
        # LPUSH: the list's tail is the oldest message (BRPOP's end).
        assert [text(message) for message in reversed(queue)] == m.queue
        holds = {text(t): json.loads(r) for t, r in self.client.hgetall(p + "holds").items()}
        assert {t: (float(r["at"]), r["ids"] or []) for t, r in holds.items()} == {
            t: (at, ids) for t, (at, ids) in m.holds.items()}
        missing = {text(j): tuple(map(float, text(x).split())) for j, x in self.client.hgetall(p + "missing").items()}
        assert missing == m.missing
        assert {n: tuple(map(float, f["bucket"].split(":"))) for n, f in per_name.items() if "bucket" in f} == m.bucket

        # Contract checks that do not rely on the model being right.
        places = [*m.delayed, *m.inflight, *(j for key in KEYS for j in m.backlog(key))]
        assert sorted(places) == sorted(m.jobs), "a job in no place or in two"
        for key in KEYS:
            g = m.group_of(key)
            where = m.is_eligible(key, g) + (key in m.capped_members.get(g, ())) + (key in m.mthrottled)
            assert where == (1 if m.waiting.get(key) else 0), f"key {key} tracked {where} times"
        for g in GROUPS:
            where = (g in m.active) + (g in m.capped) + (g in m.throttled)
            assert where == (1 if m.eligible_count(g) else 0), f"group {g} tracked {where} times"
        assert m.V >= self.last_v, "the virtual clock went back"
        self.last_v = m.V
        # Caps: a release never passes one (check_released); more may be in
        # flight only when a submit lowered it, or a reaped job started.


@pytest.mark.slow
# Its time grows with HYPOTHESIS_MAX_EXAMPLES: 300 examples of 60 steps took
# up to 5 minutes on a busy 2-core machine (bin/test-properties).
@pytest.mark.timeout(1800)
def test_random_operation_sequences_keep_every_invariant(redis_client):
    # Examples and randomness come from the Hypothesis profile (tests/conftest.py):
    # derandomized in `make test`, fresh seeds in `make test-properties`.
    run_state_machine_as_test(lambda: SchedulerMachine(redis_client),
                              settings=settings(stateful_step_count=60, deadline=None))
