"""Random sequences of every FairScheduler operation against a Python model.

After each step Redis must agree with the model: every accepted, unfinished job
is in exactly one place (a backlog, delayed or in flight), no job is released
while in flight, the in-flight counts agree, V never goes back, and release
respects the window, caps and rate limits and leaves no slot idle that an
eligible key could fill.
"""
from __future__ import annotations

from dataclasses import dataclass

import redis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test,
)

from project.fairness import FairScheduler

# Few ids and keys, so duplicates, caps and contention happen in most runs.
JOB_ID_POOL = [f"j{i}" for i in range(10)]
JOB_IDS = st.sampled_from(JOB_ID_POOL)
KEY_SETTINGS = {
    "a": {},
    "b": {"weight": 3.0},
    "c": {"cap": 2},
    "r": {"rate": (0.5, 2)},
}
RATE_PER_S, BURST = KEY_SETTINGS["r"]["rate"]
HEADROOM, DEFAULT_WINDOW = 1, 2
START_TIME = 1_000.0


@dataclass
class Job:
    key: str
    state: str  # "held", "delayed" or "flight"
    due: float = 0.0
    deadline: float = 0.0
    running: bool = False


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        self.client = client
        self.sched = FairScheduler(client, "prop", headroom=HEADROOM, default_window=DEFAULT_WINDOW)
        self.sched.clear()
        assert client.keys("{fair:prop}*") == []
        self.now = START_TIME
        self.jobs: dict[str, Job] = {}
        self.workers: dict[str, tuple[int, float]] = {}  # name -> (slots, expires at)
        self.last_v = 0.0
        self.tokens, self.tokens_at = float(BURST), None

    # The model's view of what Redis should do -------------------------------

    def window(self) -> int:
        live = [slots for slots, expires in self.workers.values() if expires > self.now]
        return (sum(live) if live else DEFAULT_WINDOW) + HEADROOM

    def in_flight(self, key: str | None = None) -> list[str]:
        return [i for i, j in self.jobs.items() if j.state == "flight" and key in (None, j.key)]

    def take_rate_token(self) -> None:
        """Refill the model's bucket of key r as the Lua does, and spend one token."""
        if self.tokens_at is not None:
            self.tokens = min(BURST, self.tokens + max(0.0, self.now - self.tokens_at) * RATE_PER_S)
        self.tokens_at = self.now
        assert self.tokens >= 1 - 1e-6, "key r released faster than its rate"
        self.tokens -= 1

    def record_released(self, released: list[tuple[str, str]], *, limit: int | None) -> None:
        window_before = self.window()
        for job_id, payload in released:
            job = self.jobs[job_id]
            assert job.state == "held" or (job.state == "delayed" and job.due <= self.now), (
                f"{job_id} released while {job.state}"
            )
            assert payload == f"payload {job_id}"
            if job.key == "r":
                self.take_rate_token()
            job.state, job.deadline, job.running = "flight", self.now + self.sched.release_lease_s, False
        for job in self.jobs.values():  # due jobs left delayed are promoted too
            if job.state == "delayed" and job.due <= self.now:
                job.state = "held"

        n_in_flight = self.client.zcard(self.sched.prefix + "inflight")
        if released:
            assert n_in_flight <= window_before
        for key in {self.jobs[j].key for j, _ in released}:
            if "cap" in KEY_SETTINGS[key]:
                assert len(self.in_flight(key)) <= KEY_SETTINGS[key]["cap"]
        if limit is None:
            # Work conservation: a free slot remains only if no key is eligible,
            # and a key is parked only while its cap or its rate really holds it.
            p = self.sched.prefix
            assert n_in_flight >= window_before or self.client.zcard(p + "active") == 0
            for key in self.client.smembers(p + "capped"):
                assert len(self.in_flight(key.decode())) >= KEY_SETTINGS[key.decode()]["cap"]
            for _, ready_at in self.client.zrange(p + "throttled", 0, -1, withscores=True):
                assert ready_at > self.now

    # Rules --------------------------------------------------------------------

    @rule(job_id=JOB_IDS, key=st.sampled_from(sorted(KEY_SETTINGS)),
          cost=st.sampled_from([0.5, 1.0, 4.0]), delay=st.sampled_from([None, 0.0, 5.0, 50.0]))
    def submit(self, job_id, key, cost, delay):
        due = None if delay is None else self.now + delay
        accepted = self.sched.submit(job_id, key, cost=cost, payload=f"payload {job_id}", due=due,
                                     now=self.now, **KEY_SETTINGS[key])
        assert accepted == (job_id not in self.jobs)
        if accepted:
            delayed = due is not None and due > self.now
            self.jobs[job_id] = Job(key, "delayed" if delayed else "held", due=due or 0.0)

    @rule(key=st.sampled_from(sorted(KEY_SETTINGS)), n=st.integers(2, 4))
    def submit_burst(self, key, n):
        """Several jobs of one key at once: what makes caps and rates bind."""
        for job_id in [i for i in JOB_ID_POOL if i not in self.jobs][:n]:
            assert self.sched.submit(job_id, key, payload=f"payload {job_id}", now=self.now, **KEY_SETTINGS[key])
            self.jobs[job_id] = Job(key, "held")

    @rule(limit=st.sampled_from([None, None, 1]))
    def release(self, limit):
        self.record_released(self.sched.release(now=self.now, limit=limit), limit=limit)

    @rule(job_id=JOB_IDS)
    def start(self, job_id):
        job = self.jobs.get(job_id)
        assert self.sched.start(job_id, now=self.now) == (job is not None and job.state != "delayed")
        if job and job.state != "delayed":
            job.state, job.deadline, job.running = "flight", self.now + self.sched.run_lease_s, True

    @rule(job_id=JOB_IDS)
    def heartbeat(self, job_id):
        job = self.jobs.get(job_id)
        running = job is not None and job.state == "flight" and job.running
        assert self.sched.heartbeat([job_id], now=self.now) == int(running)
        if running:
            job.deadline = self.now + self.sched.run_lease_s

    @rule(job_id=JOB_IDS, actual=st.sampled_from([None, 0.5, 8.0]))
    def finish(self, job_id, actual):
        self.jobs.pop(job_id, None)
        self.record_released(self.sched.finish(job_id, actual_cost=actual, now=self.now), limit=None)

    @precondition(lambda self: self.in_flight())
    @rule(actual=st.sampled_from([None, 0.5, 8.0]))
    def finish_a_job_in_flight(self, actual):
        """What workers mostly do; random ids alone rarely hit a job in flight."""
        self.finish(min(self.in_flight(), key=lambda i: self.jobs[i].deadline), actual)

    @rule(job_id=JOB_IDS)
    def requeue(self, job_id):
        job = self.jobs.get(job_id)
        assert self.sched.requeue(job_id) == (job is not None and job.state == "flight")
        if job and job.state == "flight":
            job.state = "held"

    @rule()
    def reap(self):
        expected = {i for i in self.in_flight() if self.jobs[i].deadline <= self.now}
        assert set(self.sched.reap(now=self.now)) == expected
        for job_id in expected:
            self.jobs[job_id].state = "held"

    @rule(job_id=JOB_IDS)
    def cancel(self, job_id):
        job = self.jobs.get(job_id)
        waiting = job is not None and job.state in ("held", "delayed")
        assert self.sched.cancel(job_id) == waiting
        if waiting:
            del self.jobs[job_id]

    @rule(seconds=st.sampled_from([0.5, 3.0, 31.0, 301.0]))
    def advance_time(self, seconds):
        self.now += seconds

    @rule(name=st.sampled_from(["w1", "w2"]), slots=st.integers(1, 3))
    def register_worker(self, name, slots):
        self.sched.register_worker(name, slots, ttl_s=60, now=self.now)
        self.workers[name] = (slots, self.now + 60)

    # Invariants ----------------------------------------------------------------

    @invariant()
    def redis_agrees_with_the_model(self):
        p = self.sched.prefix
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(p + "jobs")
        pipe.zrange(p + "delayed", 0, -1)
        pipe.zrange(p + "inflight", 0, -1, withscores=True)
        pipe.hgetall(p + "inflight_n")
        pipe.get(p + "V")
        pipe.zrange(p + "active", 0, -1)
        pipe.smembers(p + "capped")
        pipe.zrange(p + "throttled", 0, -1)
        for key in KEY_SETTINGS:
            pipe.lrange(p + "q:" + key, 0, -1)
        records, delayed, inflight, inflight_n, v, active, capped, throttled, *backlogs = pipe.execute()
        dec = lambda items: [i.decode() for i in items]  # noqa: E731

        # Every known job in exactly one place, the place its state says.
        places = {key: dec(q) for key, q in zip(KEY_SETTINGS, backlogs)}
        places["delayed"], places["inflight"] = dec(delayed), dec(i for i, _ in inflight)
        everywhere = [job_id for ids in places.values() for job_id in ids]
        assert sorted(everywhere) == sorted(self.jobs), places
        for job_id, job in self.jobs.items():
            where = {"held": job.key, "delayed": "delayed", "flight": "inflight"}[job.state]
            assert job_id in places[where], (job_id, job, places)
        assert sorted(dec(records)) == sorted(self.jobs)

        # In-flight bookkeeping and leases.
        counts = {k.decode(): int(n) for k, n in inflight_n.items()}
        assert counts == {k: len(self.in_flight(k)) for k in KEY_SETTINGS if self.in_flight(k)}
        assert sum(counts.values()) == len(inflight)
        for job_id, deadline in inflight:
            assert deadline == self.jobs[job_id.decode()].deadline

        # A key is tracked in exactly one of active/capped/throttled iff it has a backlog.
        tracked = dec(active) + dec(capped) + dec(throttled)
        assert sorted(tracked) == sorted(k for k in KEY_SETTINGS if places[k])

        v = float(v or 0)
        assert v >= self.last_v
        self.last_v = v


def test_random_operation_sequences_keep_every_invariant(redis_client):
    run_state_machine_as_test(
        lambda: SchedulerMachine(redis_client),
        # database=None: no .hypothesis folder in the work tree; a failure
        # prints the steps that reproduce it.
        settings=settings(max_examples=60, stateful_step_count=60, deadline=None, database=None),
    )
