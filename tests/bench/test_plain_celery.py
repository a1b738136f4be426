"""The fairness benchmark's baselines are plain Celery: a worker of their
apps, started where DJANGO_SETTINGS_MODULE is set (as the benchmark sets it
for the fair mode's worker), loads neither Django nor Fairlane's task hooks,
which would add a dispatcher round trip to every baseline job."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.harness import ROOT


@pytest.mark.parametrize("app", ["fifo_app", "per_user_app"])
def test_a_plain_worker_loads_no_django_and_no_fairlane_hooks(app, tmp_path):
    probe = (f"import sys; from bench.plain_celery import {app} as app; "
             "app.loader.import_default_modules(); "  # what a worker does at start: the fixups' hook
             "print(sorted(m for m in ('django.apps', 'dispatcher.worker') if m in sys.modules))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "FAIRLANE_VAR_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
