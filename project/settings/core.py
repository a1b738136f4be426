"""Django core: apps, middleware, templates, secret key and hosts, the
production security switches, logging. `FAIRLANE_ENV=production` (environ.py)
turns on the deploy checks' requirements (secret key from the environment,
HTTPS-only cookies, HSTS) and refuses to start without them."""
from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from project.secret_key import install_secret_key
from project.settings.environ import PRODUCTION, VAR_DIR, env, env_bool, env_list

# Off unless asked for (DJANGO_DEBUG=1, development only): with it on, any
# bug answers Django's technical 500 page (settings, paths, source) to
# whoever hit it, and every process keeps a log of its queries in memory.
# Nothing else depends on it: WhiteNoise serves the collected static files
# either way (make run collects them first).
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env("DJANGO_SECRET_KEY", "")
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
    # First, to see everything's time: slow requests logged with where it went.
    "project.request_timing.SlowRequestLog",
    "django.middleware.security.SecurityMiddleware",
    # Each user's plan read once per request, whoever asks (uploads/limits.py).
    "uploads.limits.PlanOncePerRequestMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # An API request refused for a while yet is answered before any of the
    # work below (uploads/throttling.py).
    "uploads.throttling.KnownRefusalMiddleware",
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
# The address people reach the site at: links in email and webhooks, and
# the origin of the upload page (storage.py, FAIRLANE_UPLOAD_CORS_ORIGINS).
FAIRLANE_BASE_URL = env("FAIRLANE_BASE_URL", "http://127.0.0.1:8000")
# --- Security (production) ---------------------------------------------------------
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(env("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True

# --- Logging -------------------------------------------------------------------------
# JSON in production (one object per line, with job_id, user_id, task_id, lane
# and attempt on every line about a job); readable text in development.
LOG_FORMAT = env("LOG_FORMAT", "json" if PRODUCTION else "plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "project.logcontext.ContextFilter"},
                # Signed output links are credentials: masked in every line (project/logmask.py).
                "mask_links": {"()": "project.logmask.MaskSignedLinks"},
                "flower_unanswered": {"()": "project.loglevels.FlowerUnanswered"},
                "rate_refusals": {"()": "project.loglevels.RateRefusals"},
                # The same warning again within this many seconds is counted, not written (0: all written).
                "repeats": {"()": "project.loglevels.RepeatedWarnings",
                            "interval_s": float(env("FAIRLANE_LOG_REPEAT_S", "60"))}},
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
                             "filters": ["repeats", "context", "mask_links"]}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    # Django's own console handlers (on "django" with DEBUG, and runserver's
    # "django.server") would print request lines unmasked and unformatted:
    # their records go to the root's handler instead.
    "loggers": {"django": {"handlers": [], "propagate": True},
                "django.server": {"handlers": ["console"], "propagate": False},
                "django.request": {"filters": ["rate_refusals"]},
                "flower.inspector": {"filters": ["flower_unanswered"]}},
}
# A request that took this long or more is logged ("fairlane.slow") with where
# its time went: the front door's wait, CPU, database (project/request_timing.py); 0: none.
FAIRLANE_SLOW_REQUEST_MS = int(env("FAIRLANE_SLOW_REQUEST_MS", "2000"))
