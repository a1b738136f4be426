"""Upload benchmark: `python -m bench.upload` (`make bench-upload`). What a
web host spends on uploads, before and after issue 31. Writes
bench/results/upload.json and .png and prints a table.

Two versions of the web tier in the same run, each a real gunicorn (as the
Procfile runs it: 2 workers x 4 threads) with its own SQLite database and
var/ folder, on one private SeaweedFS (object storage, as production) and
one private Redis:

- `today`: main before issue 31 (BASELINE, from `git archive`, with drf-tus
  installed beside it): resumable uploads over tus, every byte through the
  web's threads into a file on the web host, copied into the store when the
  batch is claimed.
- `direct`: this checkout: parts PUT straight to the store at presigned
  URLs; the web only signs, records and claims.

Workloads, the same for both: 2,000 files of 50 KB from one client as one
batch (4 client threads), and one file of 2 GiB (BENCH_UPLOAD_LARGE_BYTES).
Measured per version and workload: wall time from the first request to the
claim's answer; the web host's CPU seconds (user + system of gunicorn's
processes, from /proc) per GiB uploaded; the web host's peak disk use
(its var/ folder and temporary folder, sampled every 0.1 s). Targets
(issue 31): direct under 5% of today's web CPU per GiB, 0 bytes of web-host
disk, and the 2,000 files as one batch in under 40 s.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from bench.ports import free_port, free_ports

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BASELINE = "81f7b78"  # main before issue 31: tus uploads through the web tier
# What the baseline needs that this checkout no longer installs.
BASELINE_DEPS = ("drf-tus==2.0.3", "django-fsm==2.8.1", "jsonfield==3.2.0")
SMALL_FILES, SMALL_BYTES = 2000, 50 * 1024
LARGE_BYTES = int(os.environ.get("BENCH_UPLOAD_LARGE_BYTES", str(2 * 1024**3)))
CLIENT_THREADS = 4
TUS_CHUNK = 8 * 1024 * 1024  # the upload page's chunk before issue 31
GIB = 1024**3


# --- the web tier under test ---------------------------------------------------------


class Web:
    """gunicorn for one version, with its database, var/ and temp folder."""

    def __init__(self, name: str, code: Path, work: Path, env: dict[str, str]):
        self.name, self.code = name, code
        self.var = work / name / "var"
        self.tmp = work / name / "tmp"
        self.var.mkdir(parents=True)
        self.tmp.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # The database is a service of its own in production, not the web host's disk: outside var/.
        self.env = {**env, "FAIRLANE_VAR_DIR": str(self.var), "TMPDIR": str(self.tmp),
                    "DATABASE_URL": f"sqlite:///{work / name / 'db.sqlite3'}",
                    "FAIRLANE_BASE_URL": self.url, "DJANGO_DEBUG": "0", "LOG_LEVEL": "WARNING"}
        python = str(Path(sys.executable))
        for argv in (["manage.py", "migrate", "--noinput", "-v0"], ["manage.py", "storage_setup"]):
            if argv[1] == "storage_setup" and not (code / "media" / "management").exists():
                continue  # the baseline has no CORS to set (its uploads go through the web)
            subprocess.run([python, *argv], cwd=code, env=self.env, check=True, capture_output=True)
        out = subprocess.run([python, "manage.py", "create_api_user", "bench"], cwd=code, env=self.env, check=True,
                             capture_output=True, text=True).stdout
        self.token = out.strip().splitlines()[-1]
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "project.wsgi", "--bind", f"127.0.0.1:{self.port}",
             "--workers", "2", "--threads", "4", "--timeout", "600"],
            cwd=code, env=self.env, stdout=open(work / name / "web.log", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.request("GET", "/api/batches/")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def pids(self) -> list[int]:
        found = [self.proc.pid]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.proc.pid:  # pgid: the session's processes
                found.append(int(stat.parent.name))
        return sorted(set(found))

    def cpu_s(self) -> float:
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks

    def disk_bytes(self) -> int:
        total = 0
        for folder in (self.var, self.tmp):
            for root, _, files in os.walk(folder):
                for name in files:
                    try:
                        total += os.lstat(os.path.join(root, name)).st_blocks * 512
                    except OSError:
                        pass
        return total

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                conn: http.client.HTTPConnection | None = None) -> tuple[int, dict, bytes]:
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request(method, path, body=body, headers={"Authorization": f"Token {self.token}", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            if own:
                conn.close()

    def api(self, method: str, path: str, payload=None, conn=None) -> dict:
        status, _, raw = self.request(method, path, None if payload is None else json.dumps(payload).encode(),
                                      {"Content-Type": "application/json"}, conn)
        if status >= 300:
            raise RuntimeError(f"{self.name}: {method} {path} -> {status} {raw[:300]!r}")
        return json.loads(raw) if raw else {}

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


class _Connections:
    """One keep-alive connection per client thread and server."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, host: str, port: int) -> http.client.HTTPConnection:
        conns = self._local.__dict__.setdefault("conns", {})
        if (host, port) not in conns:
            conns[(host, port)] = http.client.HTTPConnection(host, port, timeout=600)
        return conns[(host, port)]


# --- the two clients -----------------------------------------------------------------------


def tus_upload(web: Web, files: list[tuple[str, bytes | Path]]) -> dict:
    """Today's path: tus create + PATCHes per file, then one claim."""
    connections = _Connections()

    def one(item: tuple[str, bytes | Path]) -> str:
        name, content = item
        size = len(content) if isinstance(content, bytes) else content.stat().st_size
        meta = f"filename {base64.b64encode(name.encode()).decode()}"
        status, headers, raw = web.request("POST", "/api/uploads/resumable/", headers={
            "Tus-Resumable": "1.0.0", "Upload-Length": str(size), "Upload-Metadata": meta}, conn=connections.get("127.0.0.1", web.port))
        if status != 201:
            raise RuntimeError(f"tus create -> {status} {raw[:200]!r}")
        location = headers.get("Location") or headers.get("location")
        offset = 0
        source = content if isinstance(content, bytes) else open(content, "rb")
        try:
            while offset < size:
                chunk = source[offset:offset + TUS_CHUNK] if isinstance(source, bytes) else source.read(TUS_CHUNK)
                status, _, raw = web.request("PATCH", location, chunk, {
                    "Tus-Resumable": "1.0.0", "Upload-Offset": str(offset),
                    "Content-Type": "application/offset+octet-stream"}, conn=connections.get("127.0.0.1", web.port))
                if status != 204:
                    raise RuntimeError(f"tus patch -> {status} {raw[:200]!r}")
                offset += len(chunk)
        finally:
            if not isinstance(source, bytes):
                source.close()
        return location.rstrip("/").rsplit("/", 1)[1]

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        guids = list(pool.map(one, files))
    return web.api("POST", "/api/uploads/", {"resumable": guids})


def direct_upload(web: Web, files: list[tuple[str, bytes | Path]]) -> dict:
    """The new path: create in batches, PUT every part to the store, one claim (which completes)."""
    created = []
    for start in range(0, len(files), 500):
        chunk = files[start:start + 500]
        created += web.api("POST", "/api/uploads/direct/", {"files": [
            {"filename": name, "size": len(c) if isinstance(c, bytes) else c.stat().st_size} for name, c in chunk]}
        )["uploads"]
    connections = _Connections()

    def put(url: str, headers: dict, body: bytes) -> None:
        target = urlsplit(url)
        conn = connections.get(target.hostname, target.port)
        conn.request("PUT", url[len(f"{target.scheme}://{target.netloc}"):], body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"PUT -> {resp.status}")

    jobs = []
    for upload, (name, content) in zip(created, files):
        urls = {u["number"]: u for u in upload["urls"]}
        missing = [n for n in range(1, upload["parts"] + 1) if n not in urls]
        for start in range(0, len(missing), 64):
            for u in web.api("POST", f"/api/uploads/direct/{upload['id']}/parts/",
                             {"parts": missing[start:start + 64]})["urls"]:
                urls[u["number"]] = u
        for number, u in sorted(urls.items()):
            jobs.append((content, (number - 1) * upload["part_size"], u["size"], u["url"], u["headers"]))

    def send(job) -> None:
        content, start, size, url, headers = job
        if isinstance(content, bytes):
            body = content[start:start + size]
        else:
            with open(content, "rb") as fh:
                fh.seek(start)
                body = fh.read(size)
        put(url, headers, body)

    with ThreadPoolExecutor(CLIENT_THREADS if len(files) == 1 else 8) as pool:
        list(pool.map(send, jobs))
    return web.api("POST", "/api/uploads/", {"direct": [u["id"] for u in created]})


# --- a run ---------------------------------------------------------------------------------------


def measure(web: Web, client, files: list[tuple[str, bytes | Path]], total_bytes: int) -> dict:
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], web.disk_bytes())
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    base_disk = web.disk_bytes()
    cpu0, t0 = web.cpu_s(), time.monotonic()
    sampler.start()
    try:
        answer = client(web, files)
    finally:
        stop.set()
        sampler.join()
    wall, cpu = time.monotonic() - t0, web.cpu_s() - cpu0
    assert len(answer["uploads"]) == len(files), answer.get("uploads", [])[:1]
    return {"wall_s": round(wall, 2), "web_cpu_s": round(cpu, 2),
            "web_cpu_s_per_gib": round(cpu / (total_bytes / GIB), 3),
            "peak_web_disk_bytes": max(0, peak[0] - base_disk), "files": len(files), "bytes": total_bytes}


def baseline_code(work: Path) -> tuple[Path, str]:
    """The baseline's tree (git archive) and a folder with what it needs installed."""
    code = work / "baseline"
    code.mkdir()
    archive = subprocess.run(["git", "archive", BASELINE], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    deps = work / "baseline-deps"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(deps),
                    *BASELINE_DEPS], check=True)
    return code, str(deps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large-bytes", type=int, default=LARGE_BYTES)
    args = parser.parse_args()
    from project import embedded_redis, embedded_seaweedfs

    work = Path(tempfile.mkdtemp(prefix="bench-upload-"))
    ports = dict(zip(embedded_seaweedfs.PORT_FLAGS, free_ports(len(embedded_seaweedfs.PORT_FLAGS))))
    server, s3_proc = embedded_seaweedfs.spawn(work / "s3", ports)
    redis_port = free_port()
    redis_proc = embedded_redis.spawn(work / "redis", redis_port, persist=False)
    webs: list[Web] = []
    try:
        code, deps = baseline_code(work)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRLANE_", "FAIR_", "DATABASE_URL"))}
        base_env.update(server.env())
        versions = {
            "today": (code, {**base_env, "REDIS_URL": f"redis://127.0.0.1:{redis_port}/1",
                             "PYTHONPATH": f"{code}:{deps}"}),
            "direct": (ROOT, {**base_env, "REDIS_URL": f"redis://127.0.0.1:{redis_port}/2"}),
        }
        rng = random.Random(31)
        small = [(f"scan-{i:04d}.png", rng.randbytes(SMALL_BYTES)) for i in range(SMALL_FILES)]
        large = work / "large.mov"
        with open(large, "wb") as fh:
            block = rng.randbytes(16 * 1024 * 1024)
            for written in range(0, args.large_bytes, len(block)):
                fh.write(block[:min(len(block), args.large_bytes - written)])
        clients = {"today": tus_upload, "direct": direct_upload}
        results: dict[str, dict] = {}
        for name, (version_code, env) in versions.items():
            web = Web(name, version_code, work, env)
            webs.append(web)
            results[name] = {
                "small": measure(web, clients[name], small, SMALL_FILES * SMALL_BYTES),
                "large": measure(web, clients[name], [("large.mov", large)], args.large_bytes),
            }
            web.stop()
            print(f"{name}: {json.dumps(results[name])}", flush=True)
    finally:
        for web in webs:
            web.stop()
        s3_proc.kill()
        redis_proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.large_bytes)


def report(results: dict[str, dict], large_bytes: int) -> None:
    today, direct = results["today"], results["direct"]
    targets = {
        "web CPU per GiB, direct / today < 5% (2,000 files)":
            direct["small"]["web_cpu_s_per_gib"] < 0.05 * today["small"]["web_cpu_s_per_gib"],
        "web CPU per GiB, direct / today < 5% (large file)":
            direct["large"]["web_cpu_s_per_gib"] < 0.05 * today["large"]["web_cpu_s_per_gib"],
        "0 bytes of web-host disk (direct)":
            direct["small"]["peak_web_disk_bytes"] == 0 and direct["large"]["peak_web_disk_bytes"] == 0,
        "2,000 files as one batch in under 40 s (direct)": direct["small"]["wall_s"] < 40,
    }
    out = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "baseline": BASELINE,
           "large_bytes": large_bytes, "results": results, "targets": targets}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "upload.json").write_text(json.dumps(out, indent=2) + "\n")
    rows = [("", "today (tus)", "direct")]
    for workload in ("small", "large"):
        for metric in ("wall_s", "web_cpu_s_per_gib", "peak_web_disk_bytes"):
            rows.append((f"{workload}: {metric}", str(today[workload][metric]), str(direct[workload][metric])))
    width = max(len(r[0]) for r in rows)
    for row in rows:
        print(f"{row[0]:<{width}}  {row[1]:>14}  {row[2]:>14}")
    for target, met in targets.items():
        print(f"{'met' if met else 'MISSED'}: {target}")
    _plot(results)


def _plot(results: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    metrics = [("wall_s", "wall time (s)"), ("web_cpu_s_per_gib", "web CPU s per GiB"),
               ("peak_web_disk_bytes", "peak web-host disk (MiB)")]
    for ax, (metric, label) in zip(axes, metrics):
        for offset, (name, color) in enumerate((("today", "#e07a2f"), ("direct", "#417690"))):
            values = [results[name][w][metric] / (1024**2 if metric == "peak_web_disk_bytes" else 1)
                      for w in ("small", "large")]
            ax.bar([x + offset * 0.38 for x in range(2)], values, width=0.38, color=color,
                   label="today (tus via web)" if name == "today" else "direct to storage")
        ax.set_xticks([0.19, 1.19], ["2,000 x 50 KB", "one large file"])
        ax.set_title(label)
    axes[0].legend()
    fig.suptitle("Uploads: what the web host spends (bench/upload.py)")
    fig.tight_layout()
    fig.savefig(RESULTS / "upload.png", dpi=110)


if __name__ == "__main__":
    main()
