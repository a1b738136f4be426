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
    "uploads",
    "transcoding",
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
        "DIRS": [BASE_DIR / "project" / "templates"],
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
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis redelivers unacknowledged messages after this. It must exceed the
# longest allowed job or long jobs run twice; the fair dispatcher's lease
# (seconds, renewed by heartbeat) is what detects lost jobs quickly.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", str(6 * 3600))),
}
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Fair dispatch (project/fairness, project/dispatch.py) ---------------------
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
# Called at worker start and by beat: each re-submits the unfinished jobs its
# app's database rows say exist but the dispatcher does not know (Redis lost
# them, or a process died between commit and submit). Returns a count.
FAIR_RECONCILERS = ["uploads.services.jobs_reconcile"]
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
# ffmpeg threads per job: lane concurrency x threads should match the cores.
FAIRLANE_FFMPEG_THREADS = int(os.environ.get("FAIRLANE_FFMPEG_THREADS", "1"))
# Signed output links stay valid this long.
FAIRLANE_URL_MAX_AGE_S = int(os.environ.get("FAIRLANE_URL_MAX_AGE_S", str(3600)))

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
