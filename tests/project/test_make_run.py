"""`make run` starts clean: what it prints is what a person needs (the
addresses it really listens on), each worker's banner names its own lane's
exchange, a console email is logged at INFO, and nothing is a warning the
person can do nothing about (SQLite's W047, Celery's superuser warning when
run as root, Flower asking workers that are not up yet). bin/run itself,
with its embedded Redis, on ports of its own (tests/chaos/make_run.py)."""
from __future__ import annotations

import re
import urllib.request

import pytest
from PIL import Image

from tests.chaos.make_run import MakeRun, upload_request
from tests.promise import wait_for

pytestmark = pytest.mark.e2e

# Everything bin/run and its processes printed; a run's log is a few hundred kB.
WHOLE_LOG = 10**8


def test_make_run_starts_and_mails_without_a_warning(tmp_path):
    run = MakeRun(tmp_path / "var", extra_env={"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
                                               "CPU_CONCURRENCY": "1"})
    try:
        run.start()
        token = re.search(r"API token\s+(\w+)", run.log_tail(WHOLE_LOG)).group(1)
        Image.new("RGB", (64, 48), "teal").save(tmp_path / "photo.png")
        with urllib.request.urlopen(upload_request(run.web_url, token, [tmp_path / "photo.png"]), timeout=60) as resp:
            assert resp.status == 202
        # The batch's summary, mailed to the demo user by the console backend.
        wait_for(lambda: "Subject: " in run.log_tail(WHOLE_LOG), 120, lambda: "the summary email: " + run.log_tail())
        log = run.log_tail(WHOLE_LOG)
    finally:
        run.stop()

    warnings = [line for line in log.splitlines() if re.search(r"warn", line, re.IGNORECASE)]
    assert not warnings, "\n".join(warnings)
    assert re.search(r"\.> cpu-transcode +exchange=cpu-transcode\(direct\) key=cpu-transcode", log)
    assert re.search(r"\.> io-notify +exchange=io-notify\(direct\) key=io-notify", log)
    # The console backend writes each email at once: one record of the
    # worker's redirected output, its lines after the first unprefixed.
    printed = [line for line in log.splitlines() if "celery.redirected" in line]
    assert printed and all(" INFO celery.redirected " in line for line in printed), printed
    assert f"upload page   {run.web_url}/" in log and f"curl -H 'Authorization: Token {token}'" in log
    assert f"http://127.0.0.1:{run.flower_port}/" in log
