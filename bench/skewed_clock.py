"""Run a Python program with its wall clock off by some seconds, as on a
host whose clock drifted: `python -m bench.skewed_clock +120 PROGRAM ARGS...`.

The clock-skew tests (tests/e2e/test_clock_skew.py, tests/multihost) run
workers this way. Only Python's wall clock moves (time.time, time_ns,
clock_gettime(CLOCK_REALTIME), datetime.now, through time-machine), which is
what any comparison of instants in Fairlane reads; the monotonic clock, every
timed wait and every other program (ffmpeg) are untouched. It replaced
libfaketime, whose LD_PRELOAD also rewrote the process's timed waits: with
0.9.10 a job's wait could become endless (wolfcw/libfaketime#469), and a 3 s
video's job ran into its 121 s time limit in CI. Forked children (Celery's
prefork pool) keep the offset.
"""
from __future__ import annotations

import runpy
import sys
import time

import time_machine


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: python -m bench.skewed_clock OFFSET_S PROGRAM [ARGS...]")
    offset_s = float(argv[0])
    time_machine.travel(time.time() + offset_s, tick=True).start()
    sys.argv = argv[1:]
    runpy.run_path(argv[1], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
