"""The processes whose threads users share, the web process and the
io-notify worker once ready, freeze what they loaded at start-up, so a full
collection (which stops all of a process's threads, every user's requests
with them) walks only what requests made since (project/gc_pauses.py); and
their threads take short GIL turns, so one back from I/O beside another
that computes waits 0.5 ms for the GIL, not 5 (project/gil_turns.py). Each
check runs in a Python of its own: freezing the test session's objects
would change every other test's collections."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import redis
from django.conf import settings

from bench.harness import ROOT, Worker
from tests.promise import wait_for
from tests.workers import lane_paused
from tests.workers import test_database_url as workers_database_url


def _run(code: str, **environ: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", **environ}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def _python(code: str, **environ: str) -> dict:
    done = _run(code, **environ)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_web_app_as_the_server_loads_it_leaves_a_full_collection_almost_nothing_to_walk():
    seen = _python("import gc, json\n"
                   "import project.asgi\n"
                   "print(json.dumps({'frozen': gc.get_freeze_count(), 'tracked': len(gc.get_objects())}))")
    assert seen["frozen"] > 50_000, seen  # Django, DRF and the project: ~85,000 objects
    assert seen["tracked"] < 1_000, seen


@pytest.mark.parametrize(("environ", "interval"), [({}, 0.0005), ({"FAIRLANE_GIL_SWITCH_MS": "2"}, 0.002)])
def test_the_web_app_as_the_server_loads_it_takes_short_gil_turns(environ, interval):
    """CPython's own 5 ms before, at 0.5 ms by default and as configured."""
    seen = _python("import json, sys\n"
                   "before = sys.getswitchinterval()\n"
                   "import project.asgi\n"
                   "print(json.dumps({'before': before, 'after': sys.getswitchinterval()}))", **environ)
    assert seen["before"] == pytest.approx(0.005), seen
    assert seen["after"] == pytest.approx(interval), seen


@pytest.mark.parametrize("value", ["0", "-1", "101"])
def test_a_gil_turn_out_of_range_stops_the_process_with_a_clear_error(value):
    done = _run("import django; django.setup()", FAIRLANE_GIL_SWITCH_MS=value)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "FAIRLANE_GIL_SWITCH_MS" in done.stderr, done.stderr[-2000:]


def test_freezing_keeps_what_is_alive_and_frees_start_up_garbage_first():
    seen = _python("import gc, json, weakref\n"
                   "from project.gc_pauses import freeze_startup_objects\n"
                   "class Node: pass\n"
                   "kept = Node()\n"
                   "cycle = Node(); cycle.me = cycle; gone = weakref.ref(cycle); del cycle\n"
                   "gc.disable()  # only the freeze's own collection may free the cycle\n"
                   "frozen = freeze_startup_objects()\n"
                   "print(json.dumps({'frozen': frozen, 'count': gc.get_freeze_count(),\n"
                   "                  'cycle_freed': gone() is None, 'tracked': len(gc.get_objects()),\n"
                   "                  'kept_alive': isinstance(kept, Node)}))")
    assert seen["cycle_freed"], seen
    assert seen["kept_alive"], seen
    assert seen["frozen"] == seen["count"] > 0, seen
    assert seen["tracked"] == 0, seen


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_io_notify_worker_freezes_its_start_up_objects_and_takes_short_gil_turns_once_ready(tmp_path):
    """Its threads share one process with every user's deliveries."""
    import dispatcher

    client = redis.Redis.from_url(settings.FAIR_REDIS_URL)
    key = f"test:gc:{uuid.uuid4().hex[:8]}"
    with lane_paused("io-notify"):  # the session's workers leave the lane to this one
        worker = Worker("io-notify", pool="threads", concurrency=4, name="gc", log_dir=tmp_path,
                        suffix=f"gc-{uuid.uuid4().hex[:6]}", include=("tests.project.gc_tasks",),
                        env={"DATABASE_URL": workers_database_url()})
        try:
            worker.wait_ready()
            assert dispatcher.enqueue("bench.io.frozen_objects", [key], task_id=key, fair_key="gc-test", cost=1.0)
            seen = json.loads(wait_for(lambda: client.get(key), 60, worker.log_tail))
        finally:
            worker.stop()
            client.delete(key)
    assert seen["frozen"] > 50_000, seen  # Django, Celery and the project
    assert seen["switch_interval"] == pytest.approx(settings.FAIRLANE_GIL_SWITCH_MS / 1000), seen
