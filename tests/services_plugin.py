"""Pytest plugin (loaded with `-p tests.services_plugin`): real services, set up
before Django reads its settings.

Settings read `REDIS_URL` at import, and pytest-django imports them while
loading conftests, so a fixture is too late. When `REDIS_URL` is not set (the
zero-setup path), this starts an embedded valkey-server on a free port for the
whole run and exports its URL. It also gives the run a private var/ folder.
"""
from __future__ import annotations

import atexit
import os
import socket
import tempfile
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    # Media, mail and the SQLite test database of this run, shared with the
    # worker processes the tests start (they inherit the environment).
    os.environ["FAIRLANE_VAR_DIR"] = tempfile.mkdtemp(prefix="fairlane-test-var-")
    os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
    if os.environ.get("REDIS_URL"):
        return
    from project import embedded_redis

    port = _free_port()
    proc = embedded_redis.spawn(Path(tempfile.mkdtemp(prefix="fairlane-redis-")), port, persist=False)
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    atexit.register(proc.kill)
