"""Free TCP ports for the servers that the benchmarks and the tests start
(Redis, SeaweedFS, PostgreSQL, gunicorn, SMTP receivers): the one helper for
both. Standard library only, so that tests/services_plugin.py can import it
before Django reads its settings."""
from __future__ import annotations

import socket


def free_ports(n: int, address: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports free on `address` now. They are bound all at once
    and then released, so no two are the same; another process may still
    take one before the caller's server binds it (the usual race of this
    trick: start the server at once)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((address, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(address: str = "127.0.0.1") -> int:
    """One port free on `address` now (see free_ports)."""
    return free_ports(1, address)[0]


def free_port_range(n: int, address: str = "127.0.0.1", *, lowest: int = 20000, highest: int = 30000) -> int:
    """The first port of `n` consecutive ports free on `address` now, below
    the kernel's ephemeral range (servers that take a base port and count up
    from it: SeaweedFS). The same race as free_ports."""
    import random

    for base in random.Random().sample(range(lowest, highest - n, n), (highest - lowest) // n - 1):
        socks = []
        try:
            for port in range(base, base + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind((address, port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports between {lowest} and {highest}")
