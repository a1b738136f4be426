"""io-notify: email and signed webhooks (notify/): backends, deadlines,
retries, per-endpoint rates and the per-user cap on the io lane."""
from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from project.settings.environ import PRODUCTION, VAR_DIR, env, env_bool, env_list

EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
# Django's SMTP backend bounds each socket operation (EMAIL_TIMEOUT), not the
# conversation: a server that trickles its replies holds an io thread for
# days. notify.smtp's is the same backend with a total deadline
# (NOTIFY_EMAIL_DEADLINE_S), so it replaces it whoever configured it.
if EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
    EMAIL_BACKEND = "notify.smtp.EmailBackend"
# Per socket operation (Django's default is none at all: a silent server would hang forever).
EMAIL_TIMEOUT = float(env("EMAIL_TIMEOUT", "10"))
EMAIL_FILE_PATH = env("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = int(env("EMAIL_PORT", "25"))
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "Fairlane <noreply@fairlane.localhost>")

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
NOTIFY_WEBHOOK_CONNECT_TIMEOUT_S = float(env("NOTIFY_WEBHOOK_CONNECT_TIMEOUT_S", "3"))
NOTIFY_WEBHOOK_READ_TIMEOUT_S = float(env("NOTIFY_WEBHOOK_READ_TIMEOUT_S", "10"))
# The whole exchange (connect, send, every read) ends within this, however the
# receiver paces its bytes: one byte every 9 s never trips the read timeout.
# 15 s: the connect and read timeouts' worth for an honest receiver, and an
# io thread comes back within it from any receiver.
NOTIFY_WEBHOOK_DEADLINE_S = float(env("NOTIFY_WEBHOOK_DEADLINE_S", "15"))
# The whole SMTP conversation (connect, EHLO, STARTTLS, AUTH, MAIL, RCPT,
# DATA, QUIT: about ten round trips) ends within this. 30 s leaves room for a
# server's greeting delay (anti-spam "greet pause", often 5-10 s).
NOTIFY_EMAIL_DEADLINE_S = float(env("NOTIFY_EMAIL_DEADLINE_S", "30"))
# Only this much of a response is read and stored (enough for an error message).
NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES = int(env("NOTIFY_WEBHOOK_RESPONSE_PREFIX_BYTES", "512"))
# Retries (notify/retry.py): the first after RETRY_FIRST_S (at once: most
# failures of a healthy receiver are one request's), then base x 2^(n-2)
# +-20% jitter, at most RETRY_MAX_S; after a 408/429 the backoff starts at
# once. 11 attempts (0 s, 30 s, 1 min, ...) span about 4 h 15 min before a
# delivery is given up.
NOTIFY_MAX_ATTEMPTS = int(env("NOTIFY_MAX_ATTEMPTS", "11"))
NOTIFY_RETRY_FIRST_S = float(env("NOTIFY_RETRY_FIRST_S", "0"))
NOTIFY_RETRY_BASE_S = float(env("NOTIFY_RETRY_BASE_S", "30"))
NOTIFY_RETRY_MAX_S = float(env("NOTIFY_RETRY_MAX_S", str(6 * 3600)))
# An endpoint is disabled (and its owner emailed) after this many failed
# attempts in a row spanning at least DISABLE_AFTER_S: a receiver that is down
# for a deploy recovers, one that is gone for a day stops costing retries.
NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES = int(env("NOTIFY_WEBHOOK_DISABLE_AFTER_FAILURES", "30"))
NOTIFY_WEBHOOK_DISABLE_AFTER_S = float(env("NOTIFY_WEBHOOK_DISABLE_AFTER_S", str(24 * 3600)))
# Per-endpoint rate limit (token bucket in Redis, shared by every worker);
# an endpoint's own rate in the admin overrides it.
NOTIFY_WEBHOOK_RATE_PER_S = float(env("NOTIFY_WEBHOOK_RATE_PER_S", "10"))
NOTIFY_WEBHOOK_BURST = int(env("NOTIFY_WEBHOOK_BURST", "10"))
# Most io-notify tasks one user may have in flight at once (a plan's
# notify_cap overrides it). Without a cap, one user whose endpoints answer
# slowly holds every io thread (64 per worker) for a deadline each, and
# stops email and webhooks for everyone. 16 leaves three quarters of one
# worker to others, and is no limit for a user alone with a healthy
# receiver: at 20 ms a delivery, 16 in flight is 800 deliveries/s, well past
# a worker's ~100/s (README, bench-notify).
NOTIFY_USER_CAP = int(env("NOTIFY_USER_CAP", "16"))
# Webhook endpoints a user may register. Every event becomes a delivery
# per endpoint, held in Redis until sent: 10 keeps a batch of 500 files to
# at most 5,010 deliveries (issue 32's review: 1,000 endpoints made one
# job's ending 1,000 deliveries, 1.6 MiB of Redis).
NOTIFY_MAX_WEBHOOK_ENDPOINTS = int(env("NOTIFY_MAX_WEBHOOK_ENDPOINTS", "10"))
# The defaults obey what plans must (project/plans.py): to the dispatcher a
# cap of 0 means no cap, to the rate limit a rate of 0 means no limit.
# Like the per-user limits (limits.py), the endpoint count is at least 1.
if (NOTIFY_USER_CAP < 1 or not NOTIFY_WEBHOOK_RATE_PER_S > 0 or NOTIFY_WEBHOOK_BURST < 1
        or NOTIFY_MAX_WEBHOOK_ENDPOINTS < 1):
    raise ImproperlyConfigured("NOTIFY_USER_CAP, NOTIFY_WEBHOOK_BURST and NOTIFY_MAX_WEBHOOK_ENDPOINTS must be "
                               "at least 1 and NOTIFY_WEBHOOK_RATE_PER_S above 0")
# A delivery claimed by a worker that died (or could not record the answer)
# is offered again after this, as a counted try. It must outlast a try that
# is still running, or the reconciler would send the event a second time
# beside it: longer than the deadlines above, with room to record.
NOTIFY_SENDING_LEASE_S = float(env("NOTIFY_SENDING_LEASE_S", "120"))
if NOTIFY_SENDING_LEASE_S <= max(NOTIFY_WEBHOOK_DEADLINE_S, NOTIFY_EMAIL_DEADLINE_S) + 30:
    raise ImproperlyConfigured("NOTIFY_SENDING_LEASE_S must exceed NOTIFY_WEBHOOK_DEADLINE_S and "
                               "NOTIFY_EMAIL_DEADLINE_S by more than 30 s")
# Batch summaries list at most this many failed files (the counts cover all,
# the one link goes to the batch's page): short enough to read at 2,000 files.
NOTIFY_BATCH_FAILURES_LISTED = int(env("NOTIFY_BATCH_FAILURES_LISTED", "20"))
