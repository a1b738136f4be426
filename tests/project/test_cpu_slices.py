"""Short CPU slices for the processes that answer people (project/cpu_slices.py):
the web's processes as bin/web serves them, the embedded Redis and the
store `make run` starts, and a process the benchmarks tune as the
database host is told to be. Each is checked in a real process, by asking
the kernel what slice its threads hold (sched_getattr(2)); threads and
children started afterwards inherit it. On a kernel without such slices
(before Linux 6.12's EEVDF custom slices) the same calls change nothing
and fail nothing, which the last test checks wherever it runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import children_of, web_command
from bench.ports import free_port
from project import embedded_redis
from project.cpu_slices import ask_for_short_slices, slice_of
from tests.promise import wait_for
from tests.workers import test_database_url as database_url

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DEFAULT = slice_of(os.getpid())
# A custom slice reads back as asked where the kernel has them (6.12+).
HAS_SLICES = bool(KERNEL_DEFAULT) and os.uname().machine in ("x86_64", "aarch64")


def _python(code: str, **environ: str) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", **environ}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _slices(pid: int) -> set[int | None]:
    return {slice_of(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


needs_slices = pytest.mark.skipif(not HAS_SLICES, reason="a kernel without custom slices: "
                                  "test_asking_never_fails_a_process checks that nothing changes")

_WEB_APP = ("import json, os, threading\n"
            "from project.cpu_slices import slice_of\n"
            "import project.asgi\n"
            "seen = {}\n"
            "t = threading.Thread(target=lambda: seen.update(later=slice_of(threading.get_native_id())))\n"
            "t.start(); t.join()\n"
            "print(json.dumps({'threads': sorted({slice_of(int(x)) for x in os.listdir('/proc/self/task')}),\n"
            "                  'later': seen['later']}))")


@needs_slices
@pytest.mark.parametrize(("environ", "ns"), [({}, 100_000), ({"FAIRLANE_CPU_SLICE_US": "500"}, 500_000)])
def test_the_web_app_as_the_server_loads_it_asks_for_short_slices_for_all_its_threads(environ, ns):
    """Every thread the process has once the app is loaded, and one it starts later."""
    seen = _python(_WEB_APP, **environ)
    assert seen == {"threads": [ns], "later": ns}, seen
    assert ns != KERNEL_DEFAULT


@needs_slices
def test_a_slice_of_0_leaves_the_web_at_the_kernels_own():
    seen = _python(_WEB_APP, FAIRLANE_CPU_SLICE_US="0")
    assert seen == {"threads": [KERNEL_DEFAULT], "later": KERNEL_DEFAULT}, seen


@pytest.mark.parametrize("value", ["50", "100001", "-1"])
def test_a_slice_out_of_the_kernels_bounds_stops_the_process_with_a_clear_error(value):
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings",
                               "FAIRLANE_CPU_SLICE_US": value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "FAIRLANE_CPU_SLICE_US" in done.stderr, done.stderr[-2000:]


@needs_slices
def test_another_process_is_given_the_slice_and_what_it_starts_afterwards_inherits_it(tmp_path):
    """As the benchmarks give it to their PostgreSQL: a running process's
    threads, then a child it forks and execs after."""
    go, report, grandchild = tmp_path / "go", tmp_path / "child.json", tmp_path / "grandchild.py"
    grandchild.write_text("import json, os, sys\n"
                          "from project.cpu_slices import slice_of\n"
                          "open(sys.argv[1], 'w').write(json.dumps(slice_of(os.getpid())))\n")
    code = ("import os, subprocess, sys, time\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
            f"subprocess.run([sys.executable, {str(grandchild)!r}, {str(report)!r}], check=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert _slices(proc.pid) == {KERNEL_DEFAULT}
        assert ask_for_short_slices(250, proc.pid) >= 1
        assert _slices(proc.pid) == {250_000}
        go.touch()
        assert proc.wait(60) == 0
        assert json.loads(report.read_text()) == 250_000
    finally:
        proc.kill()
        proc.wait()
    assert slice_of(os.getpid()) == KERNEL_DEFAULT  # the asking process keeps its own


@needs_slices
def test_the_embedded_redis_that_make_run_starts_holds_the_short_slice(tmp_path):
    """Started as bin/run starts it: before the store is up, so with
    FAIRLANE_STORAGE=s3 and no endpoint yet (Django's settings would refuse
    that; the start must not need them)."""
    data_dir, port = tmp_path / "var" / "redis", free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("FAIRLANE_S3_ENDPOINT", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run([sys.executable, "-m", "project.embedded_redis", "start", str(data_dir), str(port)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**env, "FAIRLANE_STORAGE": "s3", "FAIRLANE_CPU_SLICE_US": "300"})
    assert done.returncode == 0, done.stderr
    pid = int((data_dir / "redis.pid").read_text())
    try:
        assert _slices(pid) == {300_000}
    finally:
        embedded_redis.stop(data_dir, port)


@needs_slices
def test_the_web_as_bin_web_serves_it_holds_the_short_slice_in_each_worker(tmp_path):
    argv, web_env = web_command(f"127.0.0.1:{free_port()}", workers=2)
    env = {**os.environ, **web_env, "DJANGO_SETTINGS_MODULE": "project.settings", "DATABASE_URL": database_url()}
    log = tmp_path / "web.log"
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        def workers() -> list[int]:
            kids = children_of(proc.pid)
            return kids if len(kids) == 2 and all(_slices(k) == {100_000} for k in kids) else []

        wait_for(workers, 60, lambda: f"two workers of bin/web at 100 us: {log.read_text()[-2000:]}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_asking_never_fails_a_process():
    """Wherever it runs: a slice of 0 asks nothing, a process gone is no
    error, and a live one goes on as before."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        before = _slices(proc.pid)
        assert ask_for_short_slices(0, proc.pid) == 0
        assert _slices(proc.pid) == before
        took = ask_for_short_slices(100, proc.pid)
        assert took == (1 if HAS_SLICES else 0)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert ask_for_short_slices(100, proc.pid) == 0
