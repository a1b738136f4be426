"""Simulated hosts on one machine: a Linux bridge with a private /24, and a
network namespace per host, joined to the bridge by a veth pair, each with
its own host name (a UTS namespace per process tree it runs).

Needs root (CI runs as root). Everything made here carries the run's tag in
its name, and `close()` removes every namespace, link and process of the
run; `sweep_leftovers()` removes those of an earlier run that was killed
before it could (names starting with PREFIX only: nothing else on the
machine is touched).

What bit (shared/design/scale-out.md): 127.0.0.1 inside a namespace is the
namespace's own loopback, so shared services listen on the bridge address;
`ip netns del` removes the veth pair but not the processes, so they are
killed first.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import Worker

PREFIX = "flmh"  # every bridge, veth and namespace of these tests starts with it


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]


def namespace_pids(ns: str) -> list[int]:
    return [int(p) for p in ip("netns", "pids", ns, check=False).stdout.split()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in the namespace until none is left."""
    for _ in range(50):
        pids = namespace_pids(ns)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"processes in {ns} survived SIGKILL: {namespace_pids(ns)}")


def sweep_leftovers() -> None:
    """Remove what an earlier, killed run of these tests left behind."""
    for ns in _namespaces():
        if ns.startswith(PREFIX):
            _kill_namespace(ns)
            ip("netns", "del", ns, check=False)
    for line in ip("-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            ip("link", "del", name, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no interface on this machine uses."""
    used = ip("-o", "-4", "addr", "show").stdout
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}.0/24")
        if f" 10.{net.network_address.packed[1]}.{net.network_address.packed[2]}." not in used:
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the test bridge")


@dataclass
class Host:
    """One simulated host: a namespace with an address on the bridge."""

    name: str
    ns: str
    address: str
    veth_outside: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def popen(self, argv: list[str], *, env: dict[str, str], log: Path, wrapper: tuple[str, ...] = ()):
        """Run `argv` on this host: in its namespace, under its host name."""
        command = ["ip", "netns", "exec", self.ns, "unshare", "--uts", "sh", "-c",
                   f'hostname "{self.name}" && exec "$@"', "sh", *wrapper, *argv]
        proc = subprocess.Popen(command, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def command(self, argv: list[str], *, wrapper: tuple[str, ...] = ()) -> list[str]:
        """The command line that runs `argv` on this host (for harnesses that start processes themselves)."""
        return ["ip", "netns", "exec", self.ns, "unshare", "--uts", "sh", "-c",
                f'hostname "{self.name}" && exec "$@"', "sh", *wrapper, *argv]

    def vanish(self) -> None:
        """The host is lost at once: every process on it SIGKILLed, its link cut."""
        ip("link", "set", self.veth_outside, "down", check=False)
        _kill_namespace(self.ns)
        for proc in self.procs:
            proc.wait(10)

    def pids(self) -> list[int]:
        return namespace_pids(self.ns)


class Network:
    """The bridge and the hosts of one test run."""

    def __init__(self) -> None:
        sweep_leftovers()
        self.tag = secrets.token_hex(2)
        self.subnet = _free_subnet()
        addresses = self.subnet.hosts()
        self.bridge = f"{PREFIX}{self.tag}br"
        self.address = str(next(addresses))  # the shared services listen here
        self._addresses = addresses
        self.hosts: dict[str, Host] = {}
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        index = len(self.hosts)
        ns = f"{PREFIX}{self.tag}-{name}"
        outside, inside = f"{PREFIX}{self.tag}h{index}", f"{PREFIX}{self.tag}n{index}"  # at most 15 characters
        address = str(next(self._addresses))
        ip("netns", "add", ns)
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        ip("link", "set", outside, "master", self.bridge, "up")
        ip("link", "set", inside, "netns", ns)
        ip("-n", ns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inside)
        ip("-n", ns, "link", "set", inside, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        host = Host(name, ns, address, outside)
        self.hosts[name] = host
        return host

    def remove_host(self, name: str) -> None:
        host = self.hosts.pop(name)
        _kill_namespace(host.ns)
        for proc in host.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        ip("netns", "del", host.ns, check=False)
        ip("link", "del", host.veth_outside, check=False)

    def close(self) -> None:
        for name in list(self.hosts):
            self.remove_host(name)
        ip("link", "del", self.bridge, check=False)


# What each kind of worker host runs: (queue, pool), as the Procfile does.
LANES = {"cpu": ("cpu-transcode", "prefork"), "io": ("io-notify", "threads")}


class HostWorker(Worker):
    """A Celery worker on a simulated host, as the Procfile starts it, with
    the host's name (its host id) and its own scratch folder; optionally
    pinned to CPUs (`cpus`, taskset: one core per host in the scale
    benchmark) or with its wall clock off by `clock_offset_s`."""

    def __init__(self, host: Host, lane: str, *, concurrency: int, log_dir: Path, database_url: str,
                 scratch_dir: Path, clock_offset_s: int = 0, cpus: str | None = None,
                 env: dict[str, str] | None = None, include: tuple[str, ...] = ("bench.tasks",)):
        self.host = host
        queue, pool = LANES[lane]
        wrapper = ("taskset", "-c", cpus) if cpus else ()
        super().__init__(
            queue, pool=pool, concurrency=concurrency, name=host.name, log_dir=log_dir, suffix="mh",
            loglevel="INFO", extra_args=(), wrapper=host.command([], wrapper=wrapper), clock_offset_s=clock_offset_s,
            include=include,
            env={"DATABASE_URL": database_url, "FAIRLANE_SCRATCH_DIR": str(scratch_dir),
                 **(env or {})})
        host.procs.append(self.proc)
