"""An autoscaler for the multi-host suite: what KEDA's HPA or ECS service
auto scaling do with `fairlane_suggested_hosts`, small enough to read.

Each `step()` reads /metrics (as Prometheus would scrape it), scales out at
once to the suggestion (up to `max_hosts`), and scales in only after the
suggestion has stayed below the hosts running for `stabilise_s` (the HPA's
stabilisation window), one host at a time, never below `min_hosts`. As ECS
does with task scale-in protection, it stops only a host that is not
protected: each host has its own stand-in ECS agent (tests/
protection_servers.py), the one its worker tells whether it may be stopped
(FAIRLANE_SCALE_PROTECTION=ecs); with none unprotected it waits.
"""
from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.protection_servers import FakeEcsAgent


@dataclass
class ScaledHost:
    name: str
    worker: object  # bench.hosts.HostWorker
    agent: FakeEcsAgent


@dataclass
class Autoscaler:
    # Starts a worker host (name, environment) and returns its HostWorker.
    start_host: Callable[[str, dict[str, str]], object]
    address: str  # where the hosts reach the agents (the bridge)
    lane: str
    max_hosts: int
    min_hosts: int = 1
    stabilise_s: float = 3.0
    worker_env: dict[str, str] = field(default_factory=dict)
    hosts: list[ScaledHost] = field(default_factory=list)
    removed: list[ScaledHost] = field(default_factory=list)
    # (monotonic time, what it did: "out" / "in" / "wait" (all protected), host name or "")
    actions: list[tuple[float, str, str]] = field(default_factory=list)
    # Each scale-in: (the host stopped, the hosts protected (busy) that it passed over)
    passed_over: list[tuple[str, list[str]]] = field(default_factory=list)
    _below_since: float | None = None
    _count: int = 0

    def suggested(self) -> int:
        """`fairlane_suggested_hosts{lane}` from /metrics."""
        resp = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}")
        assert resp.status_code == 200, resp.content
        for family in text_string_to_metric_families(resp.content.decode()):
            if family.name == "fairlane_suggested_hosts":
                for sample in family.samples:
                    if sample.labels.get("lane") == self.lane:
                        return int(sample.value)
        raise AssertionError(f"no fairlane_suggested_hosts for {self.lane}")

    def add_host(self) -> ScaledHost:
        self._count += 1
        name = f"cpu-{self._count}"
        agent = FakeEcsAgent(address=self.address, endpoint_id=f"agent-{name}")
        env = {**self.worker_env, "FAIRLANE_SCALE_PROTECTION": "ecs", "ECS_AGENT_URI": agent.uri}
        host = ScaledHost(name, self.start_host(name, env), agent)
        self.hosts.append(host)
        return host

    def step(self) -> None:
        wanted = min(self.max_hosts, max(self.min_hosts, self.suggested()))
        now = time.monotonic()
        if wanted > len(self.hosts):
            self._below_since = None
            while len(self.hosts) < wanted:
                self.actions.append((now, "out", self.add_host().name))
            return
        if wanted == len(self.hosts):
            self._below_since = None
            return
        if self._below_since is None:
            self._below_since = now
        if now - self._below_since < self.stabilise_s:
            return
        idle = [h for h in self.hosts if not h.agent.protected]
        if not idle:
            self.actions.append((now, "wait", ""))
            return
        self.passed_over.append((idle[0].name, [h.name for h in self.hosts if h.agent.protected]))
        self.remove(idle[0])
        self.actions.append((now, "in", idle[0].name))
        self._below_since = None

    def remove(self, host: ScaledHost) -> None:
        """SIGTERM, as ECS stops a task: the worker drains and exits."""
        self.hosts.remove(host)
        self.removed.append(host)
        host.worker.proc.send_signal(signal.SIGTERM)
        host.worker.proc.wait(60)

    def close(self) -> None:
        for host in self.hosts + self.removed:
            host.agent.close()
