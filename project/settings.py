"""Fairlane settings: every value that differs between machines comes from the
environment, here and nowhere else. Grouped by integration.

`FAIRLANE_ENV=production` turns on the deploy checks' requirements (secret
key from the environment, HTTPS-only cookies, HSTS) and refuses to start
without them.
"""
from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FAIRLANE_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# --- Django core -----------------------------------------------------------
PRODUCTION = os.environ.get("FAIRLANE_ENV", "development") == "production"
DEBUG = env_bool("DJANGO_DEBUG", not PRODUCTION)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when FAIRLANE_ENV=production")
    SECRET_KEY = "dev-only-insecure-key-never-used-in-production-0123456789abcdef"
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if not PRODUCTION else "")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_celery_results",
    "dispatcher",
    "uploads",
    "transcoding",
    "exports",
    "notify",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "upload-page"
LOGOUT_REDIRECT_URL = "login"

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
MEDIA_ROOT = Path(os.environ.get("FAIRLANE_MEDIA_ROOT", VAR_DIR / "media"))
# Uploads and outputs are never served from MEDIA_URL: only through signed,
# expiring links (uploads/delivery.py). MEDIA_URL exists for Django's checks.
MEDIA_URL = "/unused-media/"
# Large uploads stream to a temporary file instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
DATA_UPLOAD_MAX_NUMBER_FILES = int(os.environ.get("FAIRLANE_MAX_FILES_PER_REQUEST", "500"))

# --- Database ----------------------------------------------------------------
# SQLite is the zero-setup default; PostgreSQL in production (DATABASE_URL).
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
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
# A connection pool per process (PostgreSQL), for the processes that run many
# threads: the io-notify worker (Procfile) hands its connection back to the
# pool before every HTTP call, so 64 threads share a few connections instead
# of opening and closing two per delivery. 0 (the default) means no pool:
# prefork children must not inherit a parent's pooled sockets.
DATABASE_POOL_MAX_SIZE = int(os.environ.get("DATABASE_POOL_MAX_SIZE", "0"))
if DATABASE_POOL_MAX_SIZE and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps the connections, not Django
    # With a pool, CONN_HEALTH_CHECKS (on) makes Django check each connection
    # as it leaves the pool, so one that died with a database restart is
    # replaced instead of failing the next task.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": DATABASE_POOL_MAX_SIZE, "timeout": 30,
    }

# --- Redis / Celery ------------------------------------------------------------
# Embedded valkey-server on 6390 by default (make run starts it), so a Redis
# already on 6379 is never touched by accident.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6390/0")

# https://docs.celeryq.dev/en/stable/userguide/configuration.html
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True  # task name, args and worker in TaskResult (admin, Flower)
CELERY_RESULT_EXPIRES = 7 * 24 * 3600
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
# A typo in a queue name must fail, not create a queue nobody consumes.
CELERY_TASK_CREATE_MISSING_QUEUES = False
CELERY_TASK_ROUTES = ("project.routing.route_task",)
# Acknowledge after the task ran: a worker that dies mid-job leaves the message
# to be redelivered, and with prefetch 1 a busy worker holds no extra messages
# that a newcomer's job would wait behind (fairness depends on this).
CELERY_TASK_ACKS_LATE = True
# Off on purpose: with it on, a file that kills its worker child is requeued
# by Celery forever. Instead the parent acknowledges and tells the job's
# lost-handler (dispatcher/worker.py), which counts the attempt in the
# database and requeues with a backoff or fails after FAIRLANE_MAX_ATTEMPTS.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-reject-on-worker-lost
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis redelivers unacknowledged messages after this. It must exceed the
# longest allowed job (FAIRLANE_TIME_LIMIT_MAX_S plus the queue wait) or long
# jobs would be delivered twice; detecting lost jobs is the job lease's work
# (FAIRLANE_JOB_LEASE_S, seconds), never this timeout's. A redelivery after it
# finds the job finished and is dropped.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", str(6 * 3600))),
}
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Fair dispatch (dispatcher/) -----------------------------------------------
# The Celery app that publishes released jobs (by name: the dispatcher does not
# import the project's Celery module).
FAIR_CELERY_APP = "project.celery.app"
FAIR_REDIS_URL = os.environ.get("FAIR_REDIS_URL", REDIS_URL)
# Off only to compare with plain FIFO Celery; the product runs with it on.
FAIR_DISPATCH_ENABLED = env_bool("FAIR_DISPATCH_ENABLED", True)
FAIR_LANES = {
    # headroom: released jobs beyond live worker slots, so a freed slot never
    # waits for a release round trip; small, because a newcomer may have to
    # wait behind each of them.
    # release_lease_s: a released job not started by then is offered again
    # (covers a publisher that died before publishing). Above the longest job
    # a released message may wait behind.
    # run_lease_s: a running job's lease, renewed every third of it; a dead
    # worker's job is offered again within this.
    "cpu-transcode": {
        "headroom": int(os.environ.get("FAIR_CPU_HEADROOM", "1")),
        "default_window": 2,
        "release_lease_s": float(os.environ.get("FAIR_CPU_RELEASE_LEASE_S", "900")),
        "run_lease_s": float(os.environ.get("FAIR_RUN_LEASE_S", "30")),
    },
    "io-notify": {
        "headroom": int(os.environ.get("FAIR_IO_HEADROOM", "8")),
        "default_window": 16,
        "release_lease_s": float(os.environ.get("FAIR_IO_RELEASE_LEASE_S", "120")),
        "run_lease_s": float(os.environ.get("FAIR_RUN_LEASE_S", "30")),
    },
}
# The workers' ticker reaps expired leases and releases delayed and throttled
# jobs at most this often (and sooner when the scheduler says something is due).
FAIR_TICK_S = float(os.environ.get("FAIR_TICK_S", "1.0"))
# Called at worker start, every FAIR_RECONCILE_S by one worker's ticker (a
# Redis lock takes turns), and by beat: each repairs what the database says
# against what the dispatcher holds. jobs_reconcile re-submits queued jobs
# the dispatcher does not know (Redis lost them, or a process died between
# commit and submit: the database row is the outbox) once they are older
# than FAIR_RECONCILE_MIN_AGE_S; jobs_recover_expired offers again the jobs
# whose worker stopped renewing its lease. Each returns a count.
FAIR_RECONCILERS = ["uploads.services.jobs_reconcile", "uploads.attempts.jobs_recover_expired"]
FAIR_RECONCILE_S = float(os.environ.get("FAIR_RECONCILE_S", "5"))
FAIR_RECONCILE_MIN_AGE_S = float(os.environ.get("FAIR_RECONCILE_MIN_AGE_S", "2"))
# Per task: called in the prefork main process when a child died running it
# or was killed at its hard time limit (job_id=, reason="lost"|"timeout").
# Tasks not listed just free their slot.
FAIR_LOST_HANDLERS = {
    "transcoding.job_run": "uploads.attempts.job_worker_lost",
    "exports.job_run": "uploads.attempts.job_worker_lost",
}
# Per task: called when a stopping worker's grace period is over, for each
# job still running (job_id=); hands it back to the front of its backlog.
FAIR_INTERRUPT_HANDLERS = {
    "transcoding.job_run": "uploads.attempts.job_interrupt",
    "exports.job_run": "uploads.attempts.job_interrupt",
}
# Per lane, who used the workers lately: a function returning {key: {share,
# wait_p50_ms, wait_p99_ms}} over the last FAIR_USAGE_MINUTES (staff page).
FAIR_USAGE_PROVIDERS = {"cpu-transcode": "uploads.selectors.transcode_usage_by_user"}
FAIR_USAGE_MINUTES = int(os.environ.get("FAIR_USAGE_MINUTES", "10"))

# --- Email -----------------------------------------------------------------------
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = os.environ.get("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "Fairlane <noreply@fairlane.localhost>")
FAIRLANE_BASE_URL = os.environ.get("FAIRLANE_BASE_URL", "http://127.0.0.1:8000")

# --- API ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "uploads.api_errors.exception_handler",
}

# --- Media processing --------------------------------------------------------------
# Limits that make a file fail cleanly instead of exhausting the machine.
FAIRLANE_MAX_UPLOAD_BYTES = int(os.environ.get("FAIRLANE_MAX_UPLOAD_BYTES", str(2 * 1024**3)))
FAIRLANE_MAX_DURATION_S = float(os.environ.get("FAIRLANE_MAX_DURATION_S", str(4 * 3600)))
FAIRLANE_MAX_PIXELS = int(os.environ.get("FAIRLANE_MAX_PIXELS", str(8192 * 8192)))
# Address space a decoding child (Pillow, pdfium, the probe:
# transcoding/sandbox.py) may add to what it starts with; beyond it the file
# fails `resource_limit`. The hungriest legitimate file measured, an RGBA PNG
# at the pixel limit with an ICC profile, peaks at 830 MiB.
FAIRLANE_DECODE_MAX_BYTES = int(os.environ.get("FAIRLANE_DECODE_MAX_BYTES", str(2 * 1024**3)))
# ffmpeg threads per job: lane concurrency x threads should match the cores.
FAIRLANE_FFMPEG_THREADS = int(os.environ.get("FAIRLANE_FFMPEG_THREADS", "1"))
# Signed output links stay valid this long.
FAIRLANE_URL_MAX_AGE_S = int(os.environ.get("FAIRLANE_URL_MAX_AGE_S", str(3600)))

# --- Reliability (uploads/attempts.py, README "Reliability") --------------------------
# A running attempt's lease in the database, renewed every third of it. A
# worker that dies or stalls is noticed within this plus FAIR_RECONCILE_S.
FAIRLANE_JOB_LEASE_S = float(os.environ.get("FAIRLANE_JOB_LEASE_S", "15"))
# Attempts that ended in a transient error or a lost worker, after which the
# job fails with the last error (a file that kills its worker: resource_limit).
FAIRLANE_MAX_ATTEMPTS = int(os.environ.get("FAIRLANE_MAX_ATTEMPTS", "3"))
# Retry backoff: base * 2^(n-1), capped, half of it random (jitter).
FAIRLANE_RETRY_BASE_DELAY_S = float(os.environ.get("FAIRLANE_RETRY_BASE_DELAY_S", "2"))
FAIRLANE_RETRY_MAX_DELAY_S = float(os.environ.get("FAIRLANE_RETRY_MAX_DELAY_S", "300"))
# Celery time limits per attempt: base + per_cost x the job's estimated
# worker seconds, at most max; the hard limit comes this much later. The
# ffmpeg watchdog (transcoding/ffmpeg.py) also limits each run by the media
# duration the probe found.
FAIRLANE_TIME_LIMIT_BASE_S = float(os.environ.get("FAIRLANE_TIME_LIMIT_BASE_S", "120"))
FAIRLANE_TIME_LIMIT_PER_COST_S = float(os.environ.get("FAIRLANE_TIME_LIMIT_PER_COST_S", "8"))
FAIRLANE_TIME_LIMIT_MAX_S = float(os.environ.get("FAIRLANE_TIME_LIMIT_MAX_S", str(4 * 3600)))
FAIRLANE_TIME_LIMIT_HARD_EXTRA_S = float(os.environ.get("FAIRLANE_TIME_LIMIT_HARD_EXTRA_S", "60"))
# On SIGTERM a worker takes no new job, lets running ones finish for this
# long, then hands them back. Give the process manager's stop timeout at
# least this plus 15 s (Procfile, README "Deploying").
FAIRLANE_SHUTDOWN_GRACE_S = float(os.environ.get("FAIRLANE_SHUTDOWN_GRACE_S", "30"))
# Fault injection for the reliability suite only (tests/chaos): an upload
# that starts with FAULT_POISON_MARKER kills its worker process. Refused in
# production.
FAIRLANE_FAULT_INJECTION = env_bool("FAIRLANE_FAULT_INJECTION", False)
# ... and the first attempt of an export kills its process after this chunk.
FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK = int(os.environ.get("FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK", "0"))
# ... and the web process dies after committing an upload, before enqueueing it.
FAIRLANE_FAULT_KILL_WEB_AFTER_COMMIT = env_bool("FAIRLANE_FAULT_KILL_WEB_AFTER_COMMIT", False)
# Batch exports (exports/services.py) checkpoint after every this many files.
FAIRLANE_EXPORT_CHUNK_FILES = int(os.environ.get("FAIRLANE_EXPORT_CHUNK_FILES", "50"))
if PRODUCTION and FAIRLANE_FAULT_INJECTION:
    raise ImproperlyConfigured("FAIRLANE_FAULT_INJECTION must not be set when FAIRLANE_ENV=production")

# --- Operations ------------------------------------------------------------------------
# /metrics answers only with `Authorization: Bearer <METRICS_TOKEN>`; unset, it is off.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")

# --- Security (production) ---------------------------------------------------------
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }

# --- Logging -------------------------------------------------------------------------
# JSON in production (one object per line, with job_id, user_id, task_id, lane
# and attempt on every line about a job); readable text in development.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "json" if PRODUCTION else "plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "project.logcontext.ContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s %(ctx)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s %(job_id)s %(user_id)s %(task_id)s "
                      "%(lane)s %(attempt)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# --- io-notify: email, webhooks (issue 6) ---
# Which events each channel sends when a user has not chosen (notify/events.py):
# email gets one summary per upload batch, not one message per file.
NOTIFY_DEFAULT_EVENTS = {
    "email": env_list("NOTIFY_EMAIL_DEFAULT_EVENTS", "batch.completed"),
    "webhook": env_list("NOTIFY_WEBHOOK_DEFAULT_EVENTS", "job.succeeded,job.failed,batch.completed"),
}
# Loopback webhook URLs are for tests and local receivers only: production
# refuses to start with them allowed (an SSRF hole otherwise).
NOTIFY_WEBHOOK_ALLOW_LOOPBACK = env_bool("FAIRLANE_WEBHOOK_ALLOW_LOOPBACK", False)
if PRODUCTION and NOTIFY_WEBHOOK_ALLOW_LOOPBACK:
    raise ImproperlyConfigured("FAIRLANE_WEBHOOK_ALLOW_LOOPBACK=1 is refused when FAIRLANE_ENV=production")
# Ports a webhook URL may name (an allowed loopback receiver may use any).
NOTIFY_WEBHOOK_ALLOWED_PORTS = [int(p) for p in env_list("NOTIFY_WEBHOOK_ALLOWED_PORTS", "80,443,8080,8443")]
# Short: a slow receiver must not hold an io thread; 3 s connect covers a
# cross-continent TLS handshake, 10 s read a receiver that does work inline.
NOTIFY_WEBHOOK_CONNECT_TIMEOUT_S = float(os.environ.get("NOTIFY_WEBHOOK_CONNECT_TIMEOUT_S", "3"))
NOTIFY_WEBHOOK_READ_TIMEOUT_S = float(os.environ.get("NOTIFY_WEBHOOK_READ_TIMEOUT_S", "10"))
# Only this much of a response is read and stored (enough for an error message).
NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES = int(os.environ.get("NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES", "512"))
# Retries: delay = base x 2^(attempt-1) +-20% jitter, at most RETRY_MAX_S.
# 10 attempts from 30 s span about 4 h 15 min before a delivery is given up.
NOTIFY_MAX_ATTEMPTS = int(os.environ.get("NOTIFY_MAX_ATTEMPTS", "10"))
NOTIFY_RETRY_BASE_S = float(os.environ.get("NOTIFY_RETRY_BASE_S", "30"))
NOTIFY_RETRY_MAX_S = float(os.environ.get("NOTIFY_RETRY_MAX_S", str(6 * 3600)))
# An endpoint is disabled (and its owner emailed) after this many failed
# attempts in a row spanning at least DISABLE_AFTER_S: a receiver that is down
# for a deploy recovers, one that is gone for a day stops costing retries.
NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES = int(os.environ.get("NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES", "30"))
NOTIFY_WEBHOOK_DISABLE_AFTER_S = float(os.environ.get("NOTIFY_WEBHOOK_DISABLE_AFTER_S", str(24 * 3600)))
# Per-endpoint rate limit (token bucket in Redis, shared by every worker);
# an endpoint's own rate in the admin overrides it.
NOTIFY_WEBHOOK_RATE_PER_S = float(os.environ.get("NOTIFY_WEBHOOK_RATE_PER_S", "10"))
NOTIFY_WEBHOOK_BURST = int(os.environ.get("NOTIFY_WEBHOOK_BURST", "10"))
# A delivery claimed by a worker that died is offered again after this.
NOTIFY_SENDING_LEASE_S = float(os.environ.get("NOTIFY_SENDING_LEASE_S", "120"))
# Batch summaries list at most this many files (the counts cover all).
NOTIFY_BATCH_LIST_MAX = int(os.environ.get("NOTIFY_BATCH_LIST_MAX", "100"))
# Job endings not yet turned into events, and deliveries whose task the
# dispatcher lost, are re-submitted with the jobs'.
FAIR_RECONCILERS = [*FAIR_RECONCILERS, "notify.services.job_notifications_reconcile",
                    "notify.services.deliveries_reconcile"]
