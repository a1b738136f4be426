"""`python -m tests.chaos.promise_probe <job id>...`: tests.promise.promise_kept
in the database and storage of the environment it runs in (a `make run`'s:
tests/chaos/make_run.py); prints the summary row as JSON, or fails with the
broken promise."""
from __future__ import annotations

import json
import sys

import django

if __name__ == "__main__":
    django.setup()
    from tests.promise import promise_kept

    print(json.dumps(promise_kept(sys.argv[1:])))
