"""bench/skewed_clock.py: a program run under it sees a wall clock off by
the offset, in forked children too, with monotonic time and sleeps intact."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

PROGRAM = """
import json, os, sys, time, datetime
start = time.monotonic()
time.sleep(0.2)
read, write = os.pipe()
if os.fork() == 0:
    os.write(write, json.dumps(time.time()).encode())
    os._exit(0)
os.wait()
child = json.loads(os.read(read, 100))
print(json.dumps({"time": time.time(), "now": datetime.datetime.now(datetime.timezone.utc).timestamp(),
                  "child": child, "slept": time.monotonic() - start}))
"""


@pytest.mark.parametrize("offset_s", [120, -120])
def test_the_program_s_wall_clock_is_off_and_its_monotonic_clock_is_not(tmp_path, offset_s):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    before = time.time()
    out = subprocess.run([sys.executable, "-m", "bench.skewed_clock", f"{offset_s:+d}", str(program)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    after = time.time()
    seen = json.loads(out)
    for key in ("time", "now", "child"):
        assert before + offset_s <= seen[key] <= after + offset_s, (key, seen, before, after)
    assert 0.2 <= seen["slept"] < after - before


def test_without_a_program_it_says_how_to_run_it():
    done = subprocess.run([sys.executable, "-m", "bench.skewed_clock", "+5"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "usage" in done.stderr
