"""Whether a lane moves: the truth a health check must tell.

A lane whose workers are registered can still be stuck: every slot of its
window held by released jobs that nothing will run (their messages were
lost with a killed worker before lost-message recovery existed, or with
recovery off), so nothing is released, started or finished while users
wait. Worker registrations alone say "ok" then. So each lane keeps the time
it last made progress (a release, a start, a running job's heartbeat or a
finish: lua/_lib.lua, `note_progress`), and a lane is stalled when it has
work it should be moving (jobs in flight, or users waiting with room in the
window) and has made no progress for FAIR_STALL_S.

A healthy lane with work makes progress at least every heartbeat (a third
of the run lease, 10 s) while anything runs, and at every finish; waits for
the scheduler (rate limits, caps, delayed jobs) are not work it should be
moving, so they never count as a stall.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dispatcher.service import scheduler
from project.lanes import Lane


@dataclass(frozen=True)
class LaneHealth:
    lane: Lane
    idle_s: float  # seconds since the lane last made progress
    in_flight: int
    window: int
    waiting_users: int  # keys eligible to release now (not capped, throttled or delayed)
    lost_pending: int  # released jobs found in no queue and held by no worker, awaiting recovery

    @property
    def has_work(self) -> bool:
        """Work the lane should be moving now."""
        return self.in_flight > 0 or (self.waiting_users > 0 and self.window > self.in_flight)

    @property
    def stalled(self) -> bool:
        return self.has_work and self.idle_s > settings.FAIR_STALL_S


def lane_health(lane: Lane) -> LaneHealth:
    """One O(1) script call (on Redis's clock)."""
    h = scheduler(lane).health()
    return LaneHealth(lane=lane, idle_s=round(max(0.0, h["now"] - h["progress_at"]), 3), in_flight=h["in_flight"],
                      window=h["window"], waiting_users=h["eligible"], lost_pending=h["missing"])
