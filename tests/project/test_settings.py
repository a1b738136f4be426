"""Production settings pass Django's deploy checks and demand their secrets."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    # The test run allows loopback webhooks and fault injection; production refuses both.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "FAIRLANE_ENV", "FAIRLANE_WEBHOOK_ALLOW_LOOPBACK", "FAIRLANE_FAULT"))}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


def test_check_deploy_passes_in_production():
    result = manage("check", "--deploy", "--fail-level", "WARNING", FAIRLANE_ENV="production",
                    DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_ALLOWED_HOSTS="fairlane.example.com")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    result = manage("check", FAIRLANE_ENV="production", DJANGO_ALLOWED_HOSTS="fairlane.example.com")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr
