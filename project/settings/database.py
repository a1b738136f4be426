"""The database: SQLite as the zero-setup default (WAL, immediate
transactions, a file the tests share with real workers), PostgreSQL in
production (DATABASE_URL), with an optional connection pool per process."""
from __future__ import annotations

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from project.settings.environ import VAR_DIR, env

# SQLite is the zero-setup default; PostgreSQL in production (DATABASE_URL).
DATABASES = {
    "default": dj_database_url.parse(
        env("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=int(env("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Five processes share the file: WAL lets readers run beside the writer,
    # IMMEDIATE takes the write lock at BEGIN (no lock upgrade deadlocks that
    # surface as "database is locked"), and the busy timeout waits instead of
    # failing.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    # Tests share the database with real worker processes: it must be a file.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
    # SQLite cannot make the one unique constraint that treats NULLs as equal
    # (a long video's finalizer and audio part, uploads.Job.Meta); the
    # parent row's lock already makes each part once (uploads/parts.py), and
    # IMMEDIATE transactions write one at a time here. Not a user's to fix.
    SILENCED_SYSTEM_CHECKS = ["models.W047"]
# PostgreSQL's JIT off for the product's connections: its queries are short,
# and one misestimated aggregate was compiled with LLVM for 16 s a poll on the
# database host every user shares (docs/benchmarks.md, isolation). Sent as a
# startup option; "server" sends none, for a pooler that refuses it
# (pgbouncer: set it on the role instead, ALTER ROLE ... SET jit = off).
DATABASE_JIT = env("DATABASE_JIT", "off")
if DATABASE_JIT not in ("on", "off", "server"):
    raise ImproperlyConfigured(f"DATABASE_JIT must be on, off or server, not {DATABASE_JIT!r}")
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DATABASE_JIT != "server":
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = f"-c jit={DATABASE_JIT}"
# A connection pool per process (PostgreSQL), for the processes that run many
# threads: the io-notify worker (Procfile) hands its connection back to the
# pool before every HTTP call, so 64 threads share a few connections instead
# of opening and closing two per delivery. 0 (the default) means no pool:
# prefork children must not inherit a parent's pooled sockets.
DATABASE_POOL_MAX_SIZE = int(env("DATABASE_POOL_MAX_SIZE", "0"))
if DATABASE_POOL_MAX_SIZE and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps the connections, not Django
    # With a pool, CONN_HEALTH_CHECKS (on) makes Django check each connection
    # as it leaves the pool, so one that died with a database restart is
    # replaced instead of failing the next task.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": DATABASE_POOL_MAX_SIZE, "timeout": 30,
    }
