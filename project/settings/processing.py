"""Media processing: the limits that make a file fail cleanly, ffmpeg and
HLS, chunking long videos, and reliability (leases, attempts, time
limits, graceful shutdown, fault injection, exports)."""
from __future__ import annotations

import socket

from django.core.exceptions import ImproperlyConfigured

from project.settings.environ import PRODUCTION, env, env_bool

# Limits that make a file fail cleanly instead of exhausting the machine.
FAIRLANE_MAX_DURATION_S = float(env("FAIRLANE_MAX_DURATION_S", str(4 * 3600)))
FAIRLANE_MAX_PIXELS = int(env("FAIRLANE_MAX_PIXELS", str(8192 * 8192)))
# Address space a decoding child (Pillow, pdfium, the probe:
# transcoding/sandbox.py) may add to what it starts with; beyond it the file
# fails `resource_limit`. The hungriest legitimate file measured, an RGBA PNG
# at the pixel limit with an ICC profile, peaks at 830 MiB.
FAIRLANE_DECODE_MAX_BYTES = int(env("FAIRLANE_DECODE_MAX_BYTES", str(2 * 1024**3)))
# ffmpeg threads per job: lane concurrency x threads should match the cores.
FAIRLANE_FFMPEG_THREADS = int(env("FAIRLANE_FFMPEG_THREADS", "1"))
# Address space of each ffmpeg (RLIMIT_AS, transcoding/ffmpeg.py): x264 at
# 1080p needs a few hundred MB; 4 GiB leaves room and still stops a decoder
# that runs away on a crafted file.
FAIRLANE_FFMPEG_MAX_BYTES = int(env("FAIRLANE_FFMPEG_MAX_BYTES", str(4 * 1024**3)))
# HLS segment length, seconds (every segment starts with a keyframe): short
# enough to start fast and switch quickly, long enough that 1080p segments
# compress well. A chunk (below) is a whole number of them.
FAIRLANE_HLS_SEGMENT_S = int(env("FAIRLANE_HLS_SEGMENT_S", "4"))
# Signed output links stay valid this long.
FAIRLANE_URL_MAX_AGE_S = int(env("FAIRLANE_URL_MAX_AGE_S", str(3600)))

# --- Chunking long videos (transcoding/chunks.py, docs/chunking.md) -----------------
# A video longer than the threshold is encoded as chunks of about
# FAIRLANE_CHUNK_S (whole segments), each a job of its own, plus one audio job
# and a finalizer. Each part pays a fixed overhead (its own input copy, probe,
# ffmpeg start, upload; measured in docs/chunking.md), small against a 30 s
# chunk of 1080p; below two chunks' worth there is nothing to gain.
FAIRLANE_CHUNKING = env_bool("FAIRLANE_CHUNKING", True)
FAIRLANE_CHUNK_THRESHOLD_S = float(env("FAIRLANE_CHUNK_THRESHOLD_S", "60"))
FAIRLANE_CHUNK_S = float(env("FAIRLANE_CHUNK_S", "30"))

# --- Reliability (uploads/attempts.py, README "Reliability") --------------------------
# This host's stable name among the worker hosts: attempts record it with
# their pid, and each worker registers it with its live processes
# (dispatcher/hosts.py), so a sweep on any host can tell a lost host from a
# crashed process. Unique per host; the default is the host name.
FAIRLANE_HOST_ID = env("FAIRLANE_HOST_ID") or socket.gethostname()
# A running attempt's lease in the database, renewed every third of it. A
# worker that dies or stalls is noticed within this plus FAIR_RECONCILE_S.
FAIRLANE_JOB_LEASE_S = float(env("FAIRLANE_JOB_LEASE_S", "15"))
# How long a worker's start of a job waits for the job's row when another
# transaction holds it (PostgreSQL's lock_timeout): past it the job is handed
# back and the slot takes the next one. A queued job's row is locked by its
# owner's cancel (500 rows to a transaction), and the slot, which other
# users' jobs wait for, must not wait with it (uploads/services.job_start).
FAIRLANE_JOB_START_LOCK_WAIT_MS = int(env("FAIRLANE_JOB_START_LOCK_WAIT_MS", "100"))
# Attempts that ended in a transient error or a lost worker, after which the
# job fails with the last error (a file that kills its worker: resource_limit).
FAIRLANE_MAX_ATTEMPTS = int(env("FAIRLANE_MAX_ATTEMPTS", "3"))
# Retry backoff: base * 2^(n-1), capped, half of it random (jitter).
FAIRLANE_RETRY_BASE_DELAY_S = float(env("FAIRLANE_RETRY_BASE_DELAY_S", "2"))
FAIRLANE_RETRY_MAX_DELAY_S = float(env("FAIRLANE_RETRY_MAX_DELAY_S", "300"))
# At least this long before the next attempt of a job whose attempt met an
# object-storage outage (media.StorageUnavailable): the store's client stops
# retrying inside its calls once its retry quota is spent (uploads/attempts.py).
FAIRLANE_STORAGE_RETRY_MIN_S = float(env("FAIRLANE_STORAGE_RETRY_MIN_S", "10"))
# Celery time limits per attempt: base + per_cost x the job's estimated
# worker seconds, at most max; the hard limit comes this much later. The
# ffmpeg watchdog (transcoding/ffmpeg.py) also limits each run by the media
# duration the probe found.
FAIRLANE_TIME_LIMIT_BASE_S = float(env("FAIRLANE_TIME_LIMIT_BASE_S", "120"))
FAIRLANE_TIME_LIMIT_PER_COST_S = float(env("FAIRLANE_TIME_LIMIT_PER_COST_S", "8"))
FAIRLANE_TIME_LIMIT_MAX_S = float(env("FAIRLANE_TIME_LIMIT_MAX_S", str(4 * 3600)))
FAIRLANE_TIME_LIMIT_HARD_EXTRA_S = float(env("FAIRLANE_TIME_LIMIT_HARD_EXTRA_S", "60"))
# On SIGTERM a worker takes no new job, lets running ones finish for this
# long, then hands them back. Give the process manager's stop timeout at
# least this plus 15 s (Procfile, README "Deploying").
FAIRLANE_SHUTDOWN_GRACE_S = float(env("FAIRLANE_SHUTDOWN_GRACE_S", "30"))
# Fault injection for the reliability suite only (tests/chaos): an upload
# that starts with FAULT_POISON_MARKER kills its worker process. Refused in
# production.
FAIRLANE_FAULT_INJECTION = env_bool("FAIRLANE_FAULT_INJECTION", False)
# ... and the first attempt of an export kills its process after this chunk.
FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK = int(env("FAIRLANE_FAULT_EXPORT_CRASH_AFTER_CHUNK", "0"))
# ... and the web process dies after committing an upload, before enqueueing it.
FAIRLANE_FAULT_KILL_WEB_AFTER_COMMIT = env_bool("FAIRLANE_FAULT_KILL_WEB_AFTER_COMMIT", False)
# Batch exports (exports/services.py) checkpoint after every this many files.
FAIRLANE_EXPORT_CHUNK_FILES = int(env("FAIRLANE_EXPORT_CHUNK_FILES", "50"))
# The ZIP is uploaded in parts of about this size (at least S3's 5 MiB; S3
# allows 10,000 parts, so 16 MiB parts carry exports up to about 160 GB).
FAIRLANE_EXPORT_PART_BYTES = int(env("FAIRLANE_EXPORT_PART_BYTES", str(16 * 1024 * 1024)))
if PRODUCTION and FAIRLANE_FAULT_INJECTION:
    raise ImproperlyConfigured("FAIRLANE_FAULT_INJECTION must not be set when FAIRLANE_ENV=production")
