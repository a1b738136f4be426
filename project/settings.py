"""Fairlane settings: every value that differs between machines comes from the
environment, here and nowhere else. Grouped by integration.

`FAIRLANE_ENV=production` turns on the deploy checks' requirements (secret
key from the environment, HTTPS-only cookies, HSTS) and refuses to start
without them.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from project.secret_key import install_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FAIRLANE_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# --- Django core -----------------------------------------------------------
PRODUCTION = os.environ.get("FAIRLANE_ENV", "development") == "production"
# Off unless asked for (DJANGO_DEBUG=1, development only): with it on, any
# bug answers Django's technical 500 page (settings, paths, source) to
# whoever hit it, and every process keeps a log of its queries in memory.
# Nothing else depends on it: WhiteNoise serves the collected static files
# either way (make run collects them first).
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:  # several hosts must share one key, which var/ cannot give them
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when FAIRLANE_ENV=production")
    # A single-machine install (make run, the tests): a random key made once
    # under var/, never one from the repository (project/secret_key.py).
    SECRET_KEY = install_secret_key(VAR_DIR / "secret_key")
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
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI as static files: the docs page loads nothing from a CDN
    "django_celery_results",
    "dispatcher",
    "media",
    "uploads",
    "organisations",
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

# --- Media storage (media/: the one module that knows where files live) ----------
# Uploads and outputs go through Django's STORAGES and nothing else.
# "filesystem" (the zero-setup default): FileSystemStorage under MEDIA_ROOT,
# for one host (or a shared mount). "s3": an S3-compatible object store
# (django-storages + boto3), so web and worker hosts share nothing but it.
FAIRLANE_STORAGE = os.environ.get("FAIRLANE_STORAGE", "filesystem")
MEDIA_ROOT = Path(os.environ.get("FAIRLANE_MEDIA_ROOT", VAR_DIR / "media"))
# Uploads and outputs are never served from MEDIA_URL: only through signed,
# expiring links (uploads/delivery.py). MEDIA_URL exists for Django's checks.
MEDIA_URL = "/unused-media/"
# A worker's private copies (inputs, ffmpeg's outputs, export parts), one
# folder per attempt; never under MEDIA_ROOT, swept at worker start.
FAIRLANE_SCRATCH_DIR = Path(os.environ.get("FAIRLANE_SCRATCH_DIR", VAR_DIR / "scratch"))
# Inputs fetched from object storage, kept on the worker host for the other
# parts of a chunked video (media/input_cache.py); 0 turns the cache off.
FAIRLANE_INPUT_CACHE_BYTES = int(os.environ.get("FAIRLANE_INPUT_CACHE_BYTES", str(4 * 1024**3)))
# Upload limits, enforced while the request streams in (uploads/upload_limits.py):
# Content-Length first, then bytes per file, bytes and files per request,
# and bytes per user in flight across every web process (Redis).
FAIRLANE_MAX_UPLOAD_BYTES = int(os.environ.get("FAIRLANE_MAX_UPLOAD_BYTES", str(2 * 1024**3)))
FAIRLANE_MAX_REQUEST_BYTES = int(os.environ.get("FAIRLANE_MAX_REQUEST_BYTES", str(4 * 1024**3)))
FAIRLANE_MAX_FILES_PER_REQUEST = int(os.environ.get("FAIRLANE_MAX_FILES_PER_REQUEST", "500"))
FAIRLANE_MAX_USER_INFLIGHT_BYTES = int(os.environ.get("FAIRLANE_MAX_USER_INFLIGHT_BYTES", str(8 * 1024**3)))
# Files stream to a temporary file (never memory) past this size.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
# Direct uploads (uploads/direct.py): clients send parts straight to
# storage (presigned URLs; on disk, the web's /store/incoming/), so a web
# host keeps nothing of an upload. Every part but the last is this long
# (S3's minimum is 5 MiB; 10,000 parts at most: 16 MiB parts take files up
# to 156 GiB, and a 2 GiB file is 128 URLs).
FAIRLANE_UPLOAD_PART_BYTES = int(os.environ.get("FAIRLANE_UPLOAD_PART_BYTES", str(16 * 1024**2)))
# Uploads a user may have in progress (started, not yet claimed into a
# batch: a 2,000-file drop fits) and the bytes they may hold (declared, or
# what a deferred length's part URLs were signed for). The defaults of the
# plan's own limits (uploads/limits.py), as are the next.
FAIRLANE_MAX_PENDING_UPLOADS = int(os.environ.get("FAIRLANE_MAX_PENDING_UPLOADS", "5000"))
FAIRLANE_MAX_USER_PENDING_BYTES = int(os.environ.get("FAIRLANE_MAX_USER_PENDING_BYTES", str(8 * 1024**3)))
# Jobs a user may have queued, scheduled or running at once. The dispatcher
# holds each in Redis until it runs (~2.1 KB): 10,000 is ~21 MB of a
# `noeviction` Redis per user at most, and takes two full claims of
# FAIRLANE_MAX_PENDING_UPLOADS, or five 2,000-file drops, at once.
FAIRLANE_MAX_QUEUED_JOBS = int(os.environ.get("FAIRLANE_MAX_QUEUED_JOBS", "10000"))
# An upload not claimed by then is given up (410 from then on); its row
# stays as a tombstone this much longer, so late requests learn why.
FAIRLANE_UPLOAD_EXPIRE_S = int(os.environ.get("FAIRLANE_UPLOAD_EXPIRE_S", str(24 * 3600)))
FAIRLANE_UPLOAD_TOMBSTONE_S = int(os.environ.get("FAIRLANE_UPLOAD_TOMBSTONE_S", str(7 * 24 * 3600)))
# A part URL's lifetime (never past its upload's expiry); a client asks for
# new ones when they lapse.
FAIRLANE_UPLOAD_URL_TTL_S = int(os.environ.get("FAIRLANE_UPLOAD_URL_TTL_S", "3600"))
# How often beat sweeps expired uploads and orphaned multipart uploads.
FAIRLANE_UPLOAD_SWEEP_S = float(os.environ.get("FAIRLANE_UPLOAD_SWEEP_S", "600"))
CELERY_BEAT_SCHEDULE = {
    "fair-reconcile": {"task": "project.fair_reconcile", "schedule": 60.0},
    "direct-upload-sweep": {"task": "uploads.direct_sweep", "schedule": FAIRLANE_UPLOAD_SWEEP_S},
}
# Django's own count (a plain 400) stays one above ours, which answers first
# with the API's JSON 413.
DATA_UPLOAD_MAX_NUMBER_FILES = FAIRLANE_MAX_FILES_PER_REQUEST + 1
_STATICFILES = ("whitenoise.storage.CompressedManifestStaticFilesStorage" if PRODUCTION
                else "django.contrib.staticfiles.storage.StaticFilesStorage")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": _STATICFILES},
}


def s3_storages(env: Mapping[str, str]) -> dict:
    """STORAGES' "default" and "public" for FAIRLANE_STORAGE=s3, from `env`
    (the environment; the tests pass their own SeaweedFS's). Every host
    reaches the store at FAIRLANE_S3_ENDPOINT; browsers and players reach it
    at FAIRLANE_S3_PUBLIC_ENDPOINT (default: the same). Presigned URLs are
    signed for the public name by the "public" storage, whose endpoint is
    that name: SigV4 signs the Host header, so a signed URL's host cannot
    be rewritten afterwards."""
    from botocore.config import Config

    endpoint = env.get("FAIRLANE_S3_ENDPOINT", "")
    if not endpoint:
        raise ImproperlyConfigured("FAIRLANE_STORAGE=s3 needs FAIRLANE_S3_ENDPOINT (e.g. http://s3.internal:8333)")
    options = {
        "bucket_name": env.get("FAIRLANE_S3_BUCKET", "fairlane-media"),
        "region_name": env.get("FAIRLANE_S3_REGION", "us-east-1"),
        # Unset: boto3's own chain (AWS_* variables, instance or pod roles).
        "access_key": env.get("FAIRLANE_S3_ACCESS_KEY_ID") or None,
        "secret_key": env.get("FAIRLANE_S3_SECRET_ACCESS_KEY") or None,
        # botocore's client settings (django-storages ignores its own
        # signature_version/addressing_style options when this is given):
        "client_config": Config(
            # Without it this boto3 signs presigned URLs with SigV2.
            signature_version="s3v4",
            # Bucket in the path: one host name for every bucket (no wildcard
            # DNS for bucket.host names inside a private network).
            s3={"addressing_style": "path"},
            # A store that restarts or sheds load (connection refused, 503
            # SlowDown) is retried with backoff inside each call, about 8 s in
            # all; longer outages fail the attempt as transient
            # (media.StorageUnavailable), and the job is tried again later.
            retries={"mode": "standard", "max_attempts": 6},
            connect_timeout=5, read_timeout=60,
        ),
        # Reads through storage.open() spool to disk past 8 MiB (the default,
        # 0, keeps a whole object in memory).
        "max_memory_size": 8 * 1024 * 1024,
        # Keys are generated (uuid4, attempt numbers) and never reused, so
        # nothing depends on this; False would add a racy HEAD per save.
        "file_overwrite": True,
    }
    backend = "storages.backends.s3.S3Storage"
    return {"default": {"BACKEND": backend, "OPTIONS": {**options, "endpoint_url": endpoint}},
            "public": {"BACKEND": backend, "OPTIONS": {
                **options, "endpoint_url": env.get("FAIRLANE_S3_PUBLIC_ENDPOINT") or endpoint}}}


if FAIRLANE_STORAGE == "s3":
    STORAGES.update(s3_storages(os.environ))
elif FAIRLANE_STORAGE != "filesystem":
    raise ImproperlyConfigured("FAIRLANE_STORAGE is 'filesystem' (the default) or 's3'")

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
    # SQLite cannot make the one unique constraint that treats NULLs as equal
    # (a long video's finalizer and audio part, uploads.Job.Meta); the
    # parent row's lock already makes each part once (uploads/parts.py), and
    # IMMEDIATE transactions write one at a time here. Not a user's to fix.
    SILENCED_SYSTEM_CHECKS = ["models.W047"]
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
# With fair dispatch off (the FIFO comparison), Redis redelivers
# unacknowledged messages after this. It must exceed the longest allowed job
# (FAIRLANE_TIME_LIMIT_MAX_S plus the queue wait) or long jobs would be
# delivered twice; detecting lost jobs is the job lease's work
# (FAIRLANE_JOB_LEASE_S, seconds), never this timeout's. A redelivery after it
# finds the job finished and is dropped.
#
# With fair dispatch on, kombu's acknowledgement emulation is off: every
# message on a fair lane was released by the dispatcher under a lease, and
# the lease is what brings back a job whose worker died holding it (reap),
# so kombu's own copy (a MULTI/ZADD/HSET on every delivery, a MULTI/ZREM/HDEL
# on every ack: 8 of plain Celery's 14 Redis commands per job) would be a
# second mechanism doing the same work. Unacknowledged messages are still
# restored at a warm shutdown (kombu keeps them in memory). The one cost: a
# periodic task published straight to a lane (fair_reconcile,
# backend_cleanup) that a killed worker held is lost, and runs again at its
# next period. docs/reliability.md, "Leases".
# Fair dispatch off only to compare with plain FIFO Celery; the product runs
# with it on.
FAIR_DISPATCH_ENABLED = env_bool("FAIR_DISPATCH_ENABLED", True)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", str(6 * 3600))),
    "ack_emulation": not FAIR_DISPATCH_ENABLED,
}
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_WORKER_SEND_TASK_EVENTS = True
# Task events leave the worker in batches, at most this long after they
# happen (project/event_batching.py): one Redis PUBLISH per batch instead of
# one per event, and none in the loop between a task's end and the next
# fetch. Flower sees a task's state change up to this much later. The same
# period batches the task-sent events of held jobs in every process that
# submits them (dispatcher/monitor.py).
CELERY_WORKER_CONSUMER = "project.event_batching:Consumer"
FAIRLANE_EVENT_FLUSH_S = float(os.environ.get("FAIRLANE_EVENT_FLUSH_S", "0.1"))
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# What a task prints (Django's console email backend, make run's default)
# is logged at INFO, not Celery's default WARNING (one warning per line of
# every email).
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#worker-redirect-stdouts-level
CELERY_WORKER_REDIRECT_STDOUTS_LEVEL = "INFO"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Periodic maintenance (beat, exactly one): the fair dispatcher's reconciler
# and reaper, and the sweep of expired direct uploads and of multipart
# uploads no row knows (uploads/direct.py, FAIRLANE_UPLOAD_SWEEP_S below).

# --- Fair dispatch (dispatcher/) -----------------------------------------------
# The Celery app that publishes released jobs (by name: the dispatcher does not
# import the project's Celery module).
FAIR_CELERY_APP = "project.celery.app"
FAIR_REDIS_URL = os.environ.get("FAIR_REDIS_URL", REDIS_URL)
FAIR_LANES = {
    # headroom: released jobs beyond live worker slots, waiting in the queue;
    # a newcomer may have to wait behind each of them. A finish releases and
    # pushes the next message before the slot asks for it (dispatcher/
    # worker.py), so a lane of long jobs needs none: 0 on cpu-transcode
    # (bench-fairness: a light user behind a flood waits for no queued job).
    # The io lane's 64 threads finish in bursts; 8 keep them fed.
    # release_lease_s: a released job not started by then is offered again.
    # Above the longest job a released message may wait behind (taken by a
    # worker whose slots are busy). A message lost with its worker comes
    # back much sooner (FAIR_RECOVER_LOST_MESSAGES, below).
    # run_lease_s: a running job's lease, renewed every third of it; a dead
    # worker's job is offered again within this.
    "cpu-transcode": {
        "headroom": int(os.environ.get("FAIR_CPU_HEADROOM", "0")),
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
# Worker registrations (slots in the window, a host's live processes) expire
# unless renewed every third of this: a host that vanishes stops counting
# toward the window within it. Shorter than an attempt's lease
# (FAIRLANE_JOB_LEASE_S, renewed every third of it, so it runs out at least
# two thirds of it after the last renewal), so that by the time a sweep finds
# a dead host's lease expired, the host's registration has expired too and
# the job is counted as lost with its host, not as a crash.
FAIR_WORKER_TTL_S = float(os.environ.get("FAIR_WORKER_TTL_S", "8"))
# Each worker process reports which jobs it holds every third of
# FAIR_WORKER_TTL_S; a released job whose message is in no queue and held by
# no live process (lost with a killed worker) is offered again within about
# FAIR_WORKER_TTL_S plus two reports instead of its release lease
# (dispatcher/worker.py). Off only in tests that produce the stall it prevents.
FAIR_RECOVER_LOST_MESSAGES = env_bool("FAIR_RECOVER_LOST_MESSAGES", True)
# A lane with work to move (jobs in flight, or users waiting with room in
# the window) that has released, started, renewed or finished nothing for
# this long is reported stalled by /healthz, /metrics and the fairness page
# (dispatcher/health.py). A healthy lane with work moves at least every
# heartbeat (10 s); 60 s leaves room for a slow release after a restart.
FAIR_STALL_S = float(os.environ.get("FAIR_STALL_S", "60"))
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
# Per lane: a callable(minutes=) -> {"t": [epoch s per minute], "users": {key:
# {"share_pct": [...], "wait_p99_ms": [...]}}}, the staff page's charts.
FAIR_HISTORY_PROVIDERS = {"cpu-transcode": "uploads.selectors.transcode_usage_history"}
FAIR_HISTORY_MINUTES = 60
# callable(user_ids=, lane=) -> {user id: KeyPolicy}: the weight and cap the
# staff page shows for users with nothing on a lane right now.
FAIR_POLICY_PROVIDER = "uploads.services.fair_policies"
# callable(user_ids=) -> {user id: (.key, .name)}: each user's organisation
# (the dispatcher's group), which the staff page groups users under.
FAIR_GROUP_PROVIDER = "organisations.selectors.organisations_of"
# callable(keys=) -> {group key: name}: organisations by name in Flower's
# held jobs (dispatcher/monitor.py); empty: the group keys as they are.
FAIR_GROUP_NAMES = "organisations.selectors.organisation_names"

# --- Email -----------------------------------------------------------------------
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
# Django's SMTP backend bounds each socket operation (EMAIL_TIMEOUT), not the
# conversation: a server that trickles its replies holds an io thread for
# days. notify.smtp's is the same backend with a total deadline
# (NOTIFY_EMAIL_DEADLINE_S), so it replaces it whoever configured it.
if EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
    EMAIL_BACKEND = "notify.smtp.EmailBackend"
# Per socket operation (Django's default is none at all: a silent server would hang forever).
EMAIL_TIMEOUT = float(os.environ.get("EMAIL_TIMEOUT", "10"))
EMAIL_FILE_PATH = os.environ.get("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "Fairlane <noreply@fairlane.localhost>")
FAIRLANE_BASE_URL = os.environ.get("FAIRLANE_BASE_URL", "http://127.0.0.1:8000")


def _site_origins(base_url: str) -> str:
    """The site's origin, and on loopback the same port by its other name
    (a person opens localhost:8000 or 127.0.0.1:8000)."""
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    origins = [f"{url.scheme}://{url.netloc}"]
    if url.hostname in ("127.0.0.1", "localhost"):
        other = "localhost" if url.hostname == "127.0.0.1" else "127.0.0.1"
        origins.append(f"{url.scheme}://{other}" + (f":{url.port}" if url.port else ""))
    return ",".join(origins)


# The origins whose pages upload straight into the bucket: the S3 CORS rule
# `manage.py storage_setup` writes (make run runs it; a deploy runs it as it
# runs migrate). The site's own by default.
FAIRLANE_UPLOAD_CORS_ORIGINS = env_list("FAIRLANE_UPLOAD_CORS_ORIGINS", _site_origins(FAIRLANE_BASE_URL))

# --- API ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Newest first by a cursor on created_at: O(page) at any depth, stable
    # while new rows arrive (uploads/pagination.py).
    "DEFAULT_PAGINATION_CLASS": "uploads.pagination.NewestFirstCursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "uploads.api_errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "uploads.api_schema.AutoSchema",  # adds the common error answers
    # Requests a minute per user and route class, from the user's plan
    # (below), shared by every web host through Redis (uploads/throttling.py).
    "DEFAULT_THROTTLE_CLASSES": ["uploads.throttling.PlanRateThrottle"],
    # Anonymous requests are counted by address: the client's as the last
    # of this many proxies in front of the web hosts saw it (X-Forwarded-For),
    # or REMOTE_ADDR with 0, so a client cannot pick its own.
    "NUM_PROXIES": int(os.environ.get("FAIRLANE_API_PROXIES", "0")),
}
# The defaults of each plan's API rates, requests a minute (uploads/throttling.py).
# The upload page polls at most ~3 reads a second while files move (its
# lists every 1 s, its batches every 2 s), so one user's four open pages fit
# under the reads; a 2,000-file drop is a few requests (one create per 500
# files, a claim) but a reload resumes each file with one read.
FAIRLANE_API_READS_PER_MIN = int(os.environ.get("FAIRLANE_API_READS_PER_MIN", "1200"))
FAIRLANE_API_WRITES_PER_MIN = int(os.environ.get("FAIRLANE_API_WRITES_PER_MIN", "300"))
FAIRLANE_API_UPLOADS_PER_MIN = int(os.environ.get("FAIRLANE_API_UPLOADS_PER_MIN", "1200"))
# A replay sends a request to a receiver of the user's choosing.
FAIRLANE_API_REPLAYS_PER_MIN = int(os.environ.get("FAIRLANE_API_REPLAYS_PER_MIN", "60"))
# Anonymous requests (the schema and its docs page; everything else needs a user), per address.
FAIRLANE_API_ANON_PER_MIN = int(os.environ.get("FAIRLANE_API_ANON_PER_MIN", "60"))
# The OpenAPI 3 schema (/api/schema/) is generated from the views; its docs
# page (/api/docs/, Swagger UI) is served from our static files. Public: the
# schema describes the API, it holds no user data.
SPECTACULAR_SETTINGS = {
    "TITLE": "Fairlane API",
    "DESCRIPTION": "Upload media, follow and control its processing, export and delete it; webhooks and "
                   "notification preferences. Authenticate with `Authorization: Token <token>` (or the "
                   "browser session plus the `X-CSRFToken` header). Every error answers "
                   "`{\"error\": {\"code\", \"message\", ...}}`. See docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"JobStatusEnum": "uploads.models.Job.Status"},
}
# Idempotency-Key answers are kept this long (uploads/idempotency.py): a
# client retrying within a day gets the first answer; after it the key is
# free again. A day is what Stripe keeps and covers any sane retry loop.
FAIRLANE_IDEMPOTENCY_TTL_S = int(os.environ.get("FAIRLANE_IDEMPOTENCY_TTL_S", str(24 * 3600)))

# --- Media processing --------------------------------------------------------------
# Limits that make a file fail cleanly instead of exhausting the machine.
FAIRLANE_MAX_DURATION_S = float(os.environ.get("FAIRLANE_MAX_DURATION_S", str(4 * 3600)))
FAIRLANE_MAX_PIXELS = int(os.environ.get("FAIRLANE_MAX_PIXELS", str(8192 * 8192)))
# Address space a decoding child (Pillow, pdfium, the probe:
# transcoding/sandbox.py) may add to what it starts with; beyond it the file
# fails `resource_limit`. The hungriest legitimate file measured, an RGBA PNG
# at the pixel limit with an ICC profile, peaks at 830 MiB.
FAIRLANE_DECODE_MAX_BYTES = int(os.environ.get("FAIRLANE_DECODE_MAX_BYTES", str(2 * 1024**3)))
# ffmpeg threads per job: lane concurrency x threads should match the cores.
FAIRLANE_FFMPEG_THREADS = int(os.environ.get("FAIRLANE_FFMPEG_THREADS", "1"))
# HLS segment length, seconds (every segment starts with a keyframe): short
# enough to start fast and switch quickly, long enough that 1080p segments
# compress well. A chunk (below) is a whole number of them.
FAIRLANE_HLS_SEGMENT_S = int(os.environ.get("FAIRLANE_HLS_SEGMENT_S", "4"))
# Signed output links stay valid this long.
FAIRLANE_URL_MAX_AGE_S = int(os.environ.get("FAIRLANE_URL_MAX_AGE_S", str(3600)))

# --- Chunking long videos (transcoding/chunks.py, docs/chunking.md) -----------------
# A video longer than the threshold is encoded as chunks of about
# FAIRLANE_CHUNK_S (whole segments), each a job of its own, plus one audio job
# and a finalizer. Each part pays a fixed overhead (its own input copy, probe,
# ffmpeg start, upload; measured in docs/chunking.md), small against a 30 s
# chunk of 1080p; below two chunks' worth there is nothing to gain.
FAIRLANE_CHUNKING = env_bool("FAIRLANE_CHUNKING", True)
FAIRLANE_CHUNK_THRESHOLD_S = float(os.environ.get("FAIRLANE_CHUNK_THRESHOLD_S", "60"))
FAIRLANE_CHUNK_S = float(os.environ.get("FAIRLANE_CHUNK_S", "30"))

# --- Reliability (uploads/attempts.py, README "Reliability") --------------------------
# This host's stable name among the worker hosts: attempts record it with
# their pid, and each worker registers it with its live processes
# (dispatcher/hosts.py), so a sweep on any host can tell a lost host from a
# crashed process. Unique per host; the default is the host name.
FAIRLANE_HOST_ID = os.environ.get("FAIRLANE_HOST_ID") or socket.gethostname()
# A running attempt's lease in the database, renewed every third of it. A
# worker that dies or stalls is noticed within this plus FAIR_RECONCILE_S.
FAIRLANE_JOB_LEASE_S = float(os.environ.get("FAIRLANE_JOB_LEASE_S", "15"))
# Attempts that ended in a transient error or a lost worker, after which the
# job fails with the last error (a file that kills its worker: resource_limit).
FAIRLANE_MAX_ATTEMPTS = int(os.environ.get("FAIRLANE_MAX_ATTEMPTS", "3"))
# Retry backoff: base * 2^(n-1), capped, half of it random (jitter).
FAIRLANE_RETRY_BASE_DELAY_S = float(os.environ.get("FAIRLANE_RETRY_BASE_DELAY_S", "2"))
FAIRLANE_RETRY_MAX_DELAY_S = float(os.environ.get("FAIRLANE_RETRY_MAX_DELAY_S", "300"))
# At least this long before the next attempt of a job whose attempt met an
# object-storage outage (media.StorageUnavailable): the store's client stops
# retrying inside its calls once its retry quota is spent (uploads/attempts.py).
FAIRLANE_STORAGE_RETRY_MIN_S = float(os.environ.get("FAIRLANE_STORAGE_RETRY_MIN_S", "10"))
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
# The ZIP is uploaded in parts of about this size (at least S3's 5 MiB; S3
# allows 10,000 parts, so 16 MiB parts carry exports up to about 160 GB).
FAIRLANE_EXPORT_PART_BYTES = int(os.environ.get("FAIRLANE_EXPORT_PART_BYTES", str(16 * 1024 * 1024)))
if PRODUCTION and FAIRLANE_FAULT_INJECTION:
    raise ImproperlyConfigured("FAIRLANE_FAULT_INJECTION must not be set when FAIRLANE_ENV=production")

# --- Operations ------------------------------------------------------------------------
# /metrics answers only with `Authorization: Bearer <METRICS_TOKEN>`; unset, it is off.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# /metrics names this many organisations per lane, those with the largest
# share of its worker time lately, and sums the rest as "other": a series
# per organisation would grow Prometheus's storage with every customer.
FAIRLANE_METRICS_ORGANISATIONS = int(os.environ.get("FAIRLANE_METRICS_ORGANISATIONS", "20"))

# --- Autoscaling (dispatcher/autoscale.py, dispatcher/protection.py; docs/scale-out.md) ---
# /metrics suggests per lane the worker hosts that clear its work (waiting
# and in flight, in cost-corrected worker-seconds) within this many seconds
# (fairlane_suggested_hosts). 5 minutes: about what a new host takes to start
# and warm up, so a burst is asked for in one step, not chased.
FAIRLANE_SCALE_TARGET_S = float(os.environ.get("FAIRLANE_SCALE_TARGET_S", "300"))
# Slots of one worker host for that suggestion; 0: the live workers' mean
# (1 while none is live, so set it when the lane scales from zero).
FAIRLANE_SCALE_HOST_SLOTS = int(os.environ.get("FAIRLANE_SCALE_HOST_SLOTS", "0"))
# Scale-in protection of each worker host: "none", "ecs" (the ECS agent's
# task-protection endpoint, $ECS_AGENT_URI, which ECS sets in every task) or
# "kubernetes" (the pod's controller.kubernetes.io/pod-deletion-cost, patched
# through the API server with the pod's service account).
FAIRLANE_SCALE_PROTECTION = os.environ.get("FAIRLANE_SCALE_PROTECTION", "none")
# A host stays protected while it has fetched or running work, and this long
# after its last; then it is unprotected. Far longer than the gap between two
# jobs of a busy lane (milliseconds), which a per-job toggle would leave open.
FAIRLANE_IDLE_UNPROTECT_S = float(os.environ.get("FAIRLANE_IDLE_UNPROTECT_S", "60"))
ECS_AGENT_URI = os.environ.get("ECS_AGENT_URI", "")
# ECS protection expires by itself after this (so a wedged worker cannot
# hold its task forever); renewed at half of it while protected.
FAIRLANE_ECS_PROTECTION_MINUTES = int(os.environ.get("FAIRLANE_ECS_PROTECTION_MINUTES", "30"))
# Kubernetes: the API server as every pod sees it, the pod's own service
# account (token re-read on every call: projected tokens rotate) and the
# pod's name (HOSTNAME, unless the downward API gives FAIRLANE_POD_NAME).
_K8S_SA = "/var/run/secrets/kubernetes.io/serviceaccount"
FAIRLANE_K8S_API_URL = os.environ.get("FAIRLANE_K8S_API_URL") or (
    f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
    if os.environ.get("KUBERNETES_SERVICE_HOST") else "")
FAIRLANE_K8S_TOKEN_FILE = os.environ.get("FAIRLANE_K8S_TOKEN_FILE", f"{_K8S_SA}/token")
FAIRLANE_K8S_CA_FILE = os.environ.get("FAIRLANE_K8S_CA_FILE", f"{_K8S_SA}/ca.crt")
FAIRLANE_K8S_NAMESPACE_FILE = os.environ.get("FAIRLANE_K8S_NAMESPACE_FILE", f"{_K8S_SA}/namespace")
FAIRLANE_POD_NAME = os.environ.get("FAIRLANE_POD_NAME") or os.environ.get("HOSTNAME", "")
if FAIRLANE_SCALE_PROTECTION not in ("none", "ecs", "kubernetes"):
    raise ImproperlyConfigured("FAIRLANE_SCALE_PROTECTION must be none, ecs or kubernetes")

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

# --- Logging -------------------------------------------------------------------------
# JSON in production (one object per line, with job_id, user_id, task_id, lane
# and attempt on every line about a job); readable text in development.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "json" if PRODUCTION else "plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "project.logcontext.ContextFilter"},
                # Signed output links are credentials: masked in every line (project/logmask.py).
                "mask_links": {"()": "project.logmask.MaskSignedLinks"},
                "flower_unanswered": {"()": "project.loglevels.FlowerUnanswered"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s %(ctx)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s %(job_id)s %(user_id)s %(task_id)s "
                      "%(lane)s %(attempt)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "filters": ["context", "mask_links"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # Django's own console handlers (on "django" with DEBUG, and runserver's
    # "django.server") would print request lines unmasked and unformatted:
    # their records go to the root's handler instead.
    "loggers": {"django": {"handlers": [], "propagate": True},
                "django.server": {"handlers": ["console"], "propagate": False},
                "flower.inspector": {"filters": ["flower_unanswered"]}},
}

# --- io-notify: email, webhooks (issue 6) ---
# Which events each channel sends when a user has not chosen (notify/events.py):
# email gets one summary per upload batch, not one message per file.
NOTIFY_DEFAULT_EVENTS = {
    "email": env_list("NOTIFY_EMAIL_DEFAULT_EVENTS", "batch.completed"),
    "webhook": env_list("NOTIFY_WEBHOOK_DEFAULT_EVENTS", "job.playable,job.succeeded,job.failed,batch.completed"),
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
# The whole exchange (connect, send, every read) ends within this, however the
# receiver paces its bytes: one byte every 9 s never trips the read timeout.
# 15 s: the connect and read timeouts' worth for an honest receiver, and an
# io thread comes back within it from any receiver.
NOTIFY_WEBHOOK_DEADLINE_S = float(os.environ.get("NOTIFY_WEBHOOK_DEADLINE_S", "15"))
# The whole SMTP conversation (connect, EHLO, STARTTLS, AUTH, MAIL, RCPT,
# DATA, QUIT: about ten round trips) ends within this. 30 s leaves room for a
# server's greeting delay (anti-spam "greet pause", often 5-10 s).
NOTIFY_EMAIL_DEADLINE_S = float(os.environ.get("NOTIFY_EMAIL_DEADLINE_S", "30"))
# Only this much of a response is read and stored (enough for an error message).
NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES = int(os.environ.get("NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES", "512"))
# Retries (notify/retry.py): the first after RETRY_FIRST_S (at once: most
# failures of a healthy receiver are one request's), then base x 2^(n-2)
# +-20% jitter, at most RETRY_MAX_S; after a 408/429 the backoff starts at
# once. 11 attempts (0 s, 30 s, 1 min, ...) span about 4 h 15 min before a
# delivery is given up.
NOTIFY_MAX_ATTEMPTS = int(os.environ.get("NOTIFY_MAX_ATTEMPTS", "11"))
NOTIFY_RETRY_FIRST_S = float(os.environ.get("NOTIFY_RETRY_FIRST_S", "0"))
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
# Most io-notify tasks one user may have in flight at once (a plan's
# notify_cap overrides it). Without a cap, one user whose endpoints answer
# slowly holds every io thread (64 per worker) for a deadline each, and
# stops email and webhooks for everyone. 16 leaves three quarters of one
# worker to others, and is no limit for a user alone with a healthy
# receiver: at 20 ms a delivery, 16 in flight is 800 deliveries/s, well past
# a worker's ~100/s (README, bench-notify).
NOTIFY_USER_CAP = int(os.environ.get("NOTIFY_USER_CAP", "16"))
# Webhook endpoints a user may register. Every event becomes a delivery
# per endpoint, held in Redis until sent: 10 keeps a batch of 500 files to
# at most 5,010 deliveries (issue 32's review: 1,000 endpoints made one
# job's ending 1,000 deliveries, 1.6 MiB of Redis).
NOTIFY_MAX_WEBHOOK_ENDPOINTS = int(os.environ.get("NOTIFY_MAX_WEBHOOK_ENDPOINTS", "10"))
# Like a plan's own limits (project/plans.py), the defaults are at least 1:
# 0 would shut every user without a plan out.
if min(FAIRLANE_API_READS_PER_MIN, FAIRLANE_API_WRITES_PER_MIN, FAIRLANE_API_UPLOADS_PER_MIN,
       FAIRLANE_API_REPLAYS_PER_MIN, FAIRLANE_API_ANON_PER_MIN, FAIRLANE_MAX_QUEUED_JOBS,
       FAIRLANE_MAX_PENDING_UPLOADS, FAIRLANE_MAX_USER_PENDING_BYTES, NOTIFY_MAX_WEBHOOK_ENDPOINTS) < 1:
    raise ImproperlyConfigured("the per-user limits (FAIRLANE_API_*_PER_MIN, FAIRLANE_MAX_QUEUED_JOBS, "
                               "FAIRLANE_MAX_PENDING_UPLOADS, FAIRLANE_MAX_USER_PENDING_BYTES, "
                               "NOTIFY_MAX_WEBHOOK_ENDPOINTS) must be at least 1")
# The defaults obey what plans must (project/plans.py): to the dispatcher a
# cap of 0 means no cap, to the rate limit a rate of 0 means no limit.
if NOTIFY_USER_CAP < 1 or not NOTIFY_WEBHOOK_RATE_PER_S > 0 or NOTIFY_WEBHOOK_BURST < 1:
    raise ImproperlyConfigured("NOTIFY_USER_CAP and NOTIFY_WEBHOOK_BURST must be at least 1 and "
                               "NOTIFY_WEBHOOK_RATE_PER_S above 0")
# A delivery claimed by a worker that died (or could not record the answer)
# is offered again after this, as a counted try. It must outlast a try that
# is still running, or the reconciler would send the event a second time
# beside it: longer than the deadlines above, with room to record.
NOTIFY_SENDING_LEASE_S = float(os.environ.get("NOTIFY_SENDING_LEASE_S", "120"))
if NOTIFY_SENDING_LEASE_S <= max(NOTIFY_WEBHOOK_DEADLINE_S, NOTIFY_EMAIL_DEADLINE_S) + 30:
    raise ImproperlyConfigured("NOTIFY_SENDING_LEASE_S must exceed NOTIFY_WEBHOOK_DEADLINE_S and "
                               "NOTIFY_EMAIL_DEADLINE_S by more than 30 s")
# Batch summaries list at most this many failed files (the counts cover all,
# the one link goes to the batch's page): short enough to read at 2,000 files.
NOTIFY_BATCH_FAILURES_LISTED = int(os.environ.get("NOTIFY_BATCH_FAILURES_LISTED", "20"))
# Job endings not yet turned into events, and deliveries whose task the
# dispatcher lost, are re-submitted with the jobs'.
FAIR_RECONCILERS = [*FAIR_RECONCILERS, "notify.services.job_notifications_reconcile",
                    "notify.services.deliveries_reconcile"]
