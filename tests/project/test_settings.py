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
                                 {"NOTIFY_WEBHOOK_BURST": "0"}, {"DATABASE_JIT": "maybe"}])
def test_defaults_that_would_silently_mean_no_limit_are_refused(env):
    result = manage("check", **env)
    assert result.returncode != 0 and next(iter(env)) in result.stderr


# Reads of the environment outside project/settings/environ.py, each with
# its reason: none of them is a setting of the running product.
ENV_READS_ALLOWED = {
    ("project/embedded_seaweedfs.py", "FAIRLANE_SEAWEEDFS_IP"),  # a command-line tool bin/run starts before Django
    ("project/cpu_slices.py", "FAIRLANE_CPU_SLICE_US"),  # the same tools' start, before Django's settings are whole
    ("transcoding/ffmpeg.py", "PATH"),  # passed on to ffmpeg's own environment
    ("transcoding/sandbox.py", "GLIBC_TUNABLES"),  # passed on to the decoding child's, extended
}
PRODUCT_PACKAGES = ("project", "dispatcher", "media", "uploads", "organisations", "transcoding", "exports", "notify")


def _environment_reads(path: Path) -> list[str]:
    """The variable names `path` reads with os.environ.get, os.environ[...]
    or os.getenv ("?" when the name is not a literal)."""
    import ast

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"

    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        arg = None
        if isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and is_environ(node.func.value))
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "getenv"
                    and getattr(node.func.value, "id", "") == "os")):
            arg = node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            arg = node.slice
        if arg is not None:
            names.append(arg.value if isinstance(arg, ast.Constant) else "?")
    return names


def test_only_the_settings_read_the_environment():
    """One place reads the environment (project/settings/environ.py): a
    setting read anywhere else would escape docs/configuration.md and the
    settings' checks."""
    found = {(str(path.relative_to(ROOT)), name)
             for package in PRODUCT_PACKAGES for path in (ROOT / package).rglob("*.py")
             if "migrations" not in path.parts and path != ROOT / "project/settings/environ.py"
             for name in _environment_reads(path)}
    assert found - ENV_READS_ALLOWED == set()
    assert _environment_reads(ROOT / "project/settings/environ.py"), "the scan finds the reads it looks for"


@pytest.mark.django_db
def test_the_products_postgresql_connections_do_not_jit_compile_queries():
    """One misestimated query was JIT-compiled with LLVM for 16 s a poll on
    the database host every user shares (bench-isolation, 826c716): the
    product's queries are short, and none is worth compiling."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's JIT")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"


@pytest.mark.parametrize(("asked", "options"), [("off", "-c jit=off"), ("on", "-c jit=on"), ("server", None)])
def test_jit_is_asked_for_as_a_startup_option_unless_the_server_is_to_decide(asked, options):
    """Behind a pooler that refuses startup options (pgbouncer), none is
    sent, and the role carries the setting."""
    result = manage("shell", "-c", "from django.conf import settings; "
                    "print(settings.DATABASES['default'].get('OPTIONS', {}).get('options'))",
                    DATABASE_JIT=asked, DATABASE_URL="postgres://fairlane@db.example/fairlane")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(options)
