"""What a refused request costs the web host, by WSGI server:
`python -m bench.web_server` (`make bench-web-server`). Writes
bench/results/web_server.json and .png and prints a table.

bench-isolation found the light users' requests waiting behind a hostile
user's 1,000 polling pages, every one of them refused (429), at ~1 ms of
the web host's CPU each (issue 32). This splits that millisecond: the
server's own work per connection (a bare WSGI app that answers 429) and
the whole request through Django (`project.wsgi`, a token whose read rate
is spent, so `KnownRefusalMiddleware` answers it), under gunicorn as the
Procfile ran it before bin/web (gthread, here one worker of 4 threads) against granian
(Rust) and uWSGI (C), each with one process of 4 threads.

Each request is a new connection (`Connection: close`, as the hostile
pages send them), from a client niced to 19, 50 at a time. The server's CPU
(its processes and their children, user + system, from /proc) over
REQUESTS requests after WARMUP, the median of REPEATS runs.

granian and uWSGI are not Fairlane's dependencies: they are installed for
this run into var/bench-tools/web-servers (pinned below), and run on this
virtualenv's Python and packages.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import cpu_ticks, process_tree, stop_process_group, web_command
from bench.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
TOOLS = ROOT / "var" / "bench-tools" / "web-servers"
PINS = ("granian==2.8.9", "uWSGI==2.0.31")
REQUESTS = int(os.environ.get("BENCH_WEB_SERVER_REQUESTS", "5000"))
WARMUP = 500
REPEATS = 3
IN_FLIGHT = 50
THREADS = 4

BARE_APP = '''
def application(environ, start_response):
    start_response("429 Too Many Requests", [("Content-Type", "application/json"), ("Retry-After", "5")])
    return [b'{"error": {"code": "throttled"}}']
'''


def install_tools() -> None:
    """granian and uWSGI (PINS) into TOOLS, once."""
    have = {d.name.lower() for d in TOOLS.glob("*.dist-info")} if TOOLS.is_dir() else set()
    if all(f"{pin.replace('==', '-')}.dist-info".lower() in have for pin in PINS):
        return
    shutil.rmtree(TOOLS, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(TOOLS), *PINS], check=True)


SERVERS = ("gunicorn", "granian", "uwsgi")


def _procfile_web(port: int, workers: int, threads: int) -> list[str]:
    argv, env = web_command(f"127.0.0.1:{port}", workers=workers, threads=threads)
    return ["env", *(f"{name}={value}" for name, value in env.items()), *argv]


def server_argv(name: str, port: int, module: str, cwd: Path, *, workers: int = 1,
                threads: int = THREADS) -> list[str]:
    """A server's command line (granian and uWSGI need TOOLS on PYTHONPATH:
    install_tools). bench-isolation runs its web with these too, or with the
    Procfile's bin/web (which serves project.asgi whatever `module` says)."""
    return {
        "gunicorn": [str(BIN / "gunicorn"), module, "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                     "--threads", str(threads), "--chdir", str(cwd)],
        "granian": [sys.executable, "-m", "granian", "--interface", "wsgi", module, "--host", "127.0.0.1",
                    "--port", str(port), "--workers", str(workers), "--blocking-threads", str(threads),
                    "--working-dir", str(cwd)],
        "bin/web": _procfile_web(port, workers, threads),
        "uwsgi": [str(TOOLS / "bin" / "uwsgi"), "--http-socket", f"127.0.0.1:{port}", "--module", module,
                  "--chdir", str(cwd), "--home", sys.prefix, "--processes", str(workers), "--threads",
                  str(threads), "--disable-logging", "--master", "--die-on-term"],
    }[name]


def _load(port: int, n: int, token: str) -> dict[int, int]:
    """`n` requests, each on a new connection, IN_FLIGHT at a time; the
    statuses answered."""
    request = (f"GET /api/batches/?page_size=10 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
               f"Connection: close\r\n\r\n").encode()
    statuses: dict[int, int] = {}

    async def one(gate: asyncio.Semaphore) -> None:
        async with gate:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(request)
                await writer.drain()
                raw = await reader.read()
            finally:
                writer.close()
            status = int(raw.split(b" ", 2)[1])
            statuses[status] = statuses.get(status, 0) + 1

    async def run() -> None:
        gate = asyncio.Semaphore(IN_FLIGHT)
        await asyncio.gather(*(one(gate) for _ in range(n)))

    asyncio.run(run())
    return statuses


def _wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server ended: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server did not listen: {log.read_text()[-2000:]}")


def _client(n: int = 1):
    """The clients' process: niced to 19, as the hostile pages are (they
    stand for other machines)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=os.nice,
                               initargs=(19,))


def measure(name: str, argv: list[str], port: int, env: dict, token: str, log: Path, client) -> dict:
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_listening(port, proc, log)
        client.submit(_load, port, WARMUP, token).result()
        per_request, statuses = [], {}
        ticks_s = os.sysconf("SC_CLK_TCK")
        for _ in range(REPEATS):
            before, t0 = cpu_ticks(process_tree(proc.pid)), time.monotonic()
            for status, n in client.submit(_load, port, REQUESTS, token).result().items():
                statuses[status] = statuses.get(status, 0) + n
            wall = time.monotonic() - t0
            per_request.append((cpu_ticks(process_tree(proc.pid)) - before) / ticks_s / REQUESTS * 1e6)
        return {"server": name, "cpu_us_per_request": round(statistics.median(per_request), 1),
                "runs_us": [round(x, 1) for x in per_request], "statuses": statuses,
                "requests_per_s_last_run": round(REQUESTS / wall)}
    finally:
        stop_process_group(proc, 20)


def _django_env(work: Path, redis_url: str) -> tuple[dict, str]:
    """Fairlane zero-setup (SQLite) with a user whose read rate (1 a
    minute) is spent after one request: every later poll is refused."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("FAIRLANE_", "DATABASE_URL", "REDIS_URL"))},
           "FAIRLANE_VAR_DIR": str(work / "var"), "REDIS_URL": redis_url, "DJANGO_DEBUG": "0",
           "DJANGO_SETTINGS_MODULE": "project.settings", "LOG_LEVEL": "WARNING", "FAIRLANE_API_READS_PER_MIN": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(TOOLS)])}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    token = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "from django.contrib.auth import get_user_model\nfrom rest_framework.authtoken.models import Token\n"
         "print(Token.objects.create(user=get_user_model().objects.create_user('poller')).key)"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return env, token


def main() -> None:
    from project import embedded_redis

    install_tools()
    work = Path(tempfile.mkdtemp(prefix="bench-web-server-"))
    redis_port = free_port()
    redis_proc = embedded_redis.spawn(work / "redis", redis_port, persist=False)
    rows = []
    client = _client()
    try:
        (work / "bare_app.py").write_text(BARE_APP)
        bare_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work), str(TOOLS)])}
        django_env, token = _django_env(work, f"redis://127.0.0.1:{redis_port}/0")
        for app, module, cwd, env in (("bare", "bare_app:application", work, bare_env),
                                      ("django", "project.wsgi:application", ROOT, django_env)):
            for name in SERVERS:
                port = free_port()
                row = measure(name, server_argv(name, port, module, cwd), port, env, token, work / f"{app}-{name}.log",
                              client)
                row["app"] = app
                refused = row["statuses"].get(429, 0)
                if refused != REQUESTS * REPEATS:
                    raise RuntimeError(f"{app} on {name}: not every request refused: {row['statuses']}")
                print(f"{app:>6} on {name:<8}: {row['cpu_us_per_request']:>6.0f} us of the server's CPU per refused "
                      f"request (runs {row['runs_us']}), {row['requests_per_s_last_run']:,} a second", flush=True)
                rows.append(row)
    finally:
        client.shutdown()
        redis_proc.terminate()
        redis_proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    report(rows)


def report(rows: list[dict]) -> None:
    by = {(r["app"], r["server"]): r["cpu_us_per_request"] for r in rows}
    out = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
           "requests": REQUESTS, "repeats": REPEATS, "in_flight": IN_FLIGHT, "threads": THREADS,
           "pins": list(PINS), "rows": rows, "load": os.getloadavg(),
           "ratios_to_gunicorn": {f"{app} {server}": round(by[(app, server)] / by[(app, "gunicorn")], 3)
                                  for app, server in by}}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "web_server.json").write_text(json.dumps(out, indent=2) + "\n")
    for key, ratio in out["ratios_to_gunicorn"].items():
        print(f"{key}: {ratio:.2f}x gunicorn's CPU per refused request")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    servers = list(SERVERS)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.38
    for i, (app, colour) in enumerate((("bare", "#9ca3af"), ("django", "#417690"))):
        values = [by[(app, s)] for s in servers]
        bars = ax.bar([x + (i - 0.5) * width for x in range(len(servers))], values, width, color=colour,
                      label="bare WSGI app (the server alone)" if app == "bare" else "Fairlane, a known refusal")
        ax.bar_label(bars, fmt="%.0f")
    ax.set_xticks(range(len(servers)), servers)
    ax.set_ylabel("server CPU per refused request (us)")
    ax.set_title("A refused poll on a new connection, one process of 4 threads")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "web_server.png", dpi=110)


if __name__ == "__main__":
    main()
