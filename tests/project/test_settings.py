"""Production settings pass Django's deploy checks and demand their secrets."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_djangos_smtp_backend_is_replaced_by_the_one_with_a_total_deadline():
    result = manage("shell", "-c", "from django.conf import settings; print(settings.EMAIL_BACKEND, "
                    "settings.EMAIL_TIMEOUT)", EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == ["notify.smtp.EmailBackend", "10.0"]


def test_a_sending_lease_shorter_than_a_try_is_refused():
    """The reconciler takes back a claim after NOTIFY_SENDING_LEASE_S: a try
    still running then would be sent twice at once."""
    result = manage("check", NOTIFY_SENDING_LEASE_S="20")
    assert result.returncode != 0 and "NOTIFY_SENDING_LEASE_S" in result.stderr


@pytest.mark.parametrize("env", [{"NOTIFY_USER_CAP": "0"}, {"NOTIFY_WEBHOOK_RATE_PER_S": "0"},
                                 {"NOTIFY_WEBHOOK_BURST": "0"}])
def test_defaults_that_would_silently_mean_no_limit_are_refused(env):
    result = manage("check", **env)
    assert result.returncode != 0 and next(iter(env)) in result.stderr
