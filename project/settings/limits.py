"""Per-user limits and the defaults of every plan's own (project/plans.py,
uploads/limits.py): upload sizes and counts, uploads in progress, queued
jobs, API rates. Each bounds what one user can take of something every
user shares."""
from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from project.settings.environ import env

# Upload limits, enforced while the request streams in (uploads/upload_limits.py):
# Content-Length first, then bytes per file, bytes and files per request,
# and bytes per user in flight across every web process (Redis). A file may
# be 4 GiB: a half-hour of 1080p from a phone, which plays within seconds
# of its upload (transcoding/streamed.py).
FAIRLANE_MAX_UPLOAD_BYTES = int(env("FAIRLANE_MAX_UPLOAD_BYTES", str(4 * 1024**3)))
FAIRLANE_MAX_REQUEST_BYTES = int(env("FAIRLANE_MAX_REQUEST_BYTES", str(4 * 1024**3)))
FAIRLANE_MAX_FILES_PER_REQUEST = int(env("FAIRLANE_MAX_FILES_PER_REQUEST", "500"))
FAIRLANE_MAX_USER_INFLIGHT_BYTES = int(env("FAIRLANE_MAX_USER_INFLIGHT_BYTES", str(8 * 1024**3)))
# Uploads a user may have in progress (started, not yet claimed into a
# batch: a 2,000-file drop fits) and the bytes they may hold (declared, or
# what a deferred length's part URLs were signed for). The defaults of the
# plan's own limits (uploads/limits.py), as are the next.
FAIRLANE_MAX_PENDING_UPLOADS = int(env("FAIRLANE_MAX_PENDING_UPLOADS", "5000"))
FAIRLANE_MAX_USER_PENDING_BYTES = int(env("FAIRLANE_MAX_USER_PENDING_BYTES", str(8 * 1024**3)))
# Jobs a user may have queued, scheduled or running at once. The dispatcher
# holds each in Redis until it runs (~2.1 KB): 10,000 is ~21 MB of a
# `noeviction` Redis per user at most, and takes two full claims of
# FAIRLANE_MAX_PENDING_UPLOADS, or five 2,000-file drops, at once.
FAIRLANE_MAX_QUEUED_JOBS = int(env("FAIRLANE_MAX_QUEUED_JOBS", "10000"))
# An upload not claimed by then is given up (410 from then on); its row
# stays as a tombstone this much longer, so late requests learn why.
FAIRLANE_UPLOAD_EXPIRE_S = int(env("FAIRLANE_UPLOAD_EXPIRE_S", str(24 * 3600)))
FAIRLANE_UPLOAD_TOMBSTONE_S = int(env("FAIRLANE_UPLOAD_TOMBSTONE_S", str(7 * 24 * 3600)))
# A part URL's lifetime (never past its upload's expiry); a client asks for
# new ones when they lapse.
FAIRLANE_UPLOAD_URL_TTL_S = int(env("FAIRLANE_UPLOAD_URL_TTL_S", "3600"))
# How often beat sweeps expired uploads and orphaned multipart uploads.
FAIRLANE_UPLOAD_SWEEP_S = float(env("FAIRLANE_UPLOAD_SWEEP_S", "600"))
# Django's own count (a plain 400) stays one above ours, which answers first
# with the API's JSON 413.
DATA_UPLOAD_MAX_NUMBER_FILES = FAIRLANE_MAX_FILES_PER_REQUEST + 1
# The defaults of each plan's API rates, requests a minute (uploads/throttling.py).
# The upload page polls at most ~3 reads a second while files move (its
# lists every 1 s, its batches every 2 s), so one user's four open pages fit
# under the reads; a 2,000-file drop is a few requests (one create per 500
# files, a claim) but a reload resumes each file with one read.
FAIRLANE_API_READS_PER_MIN = int(env("FAIRLANE_API_READS_PER_MIN", "1200"))
FAIRLANE_API_WRITES_PER_MIN = int(env("FAIRLANE_API_WRITES_PER_MIN", "300"))
FAIRLANE_API_UPLOADS_PER_MIN = int(env("FAIRLANE_API_UPLOADS_PER_MIN", "1200"))
# A replay sends a request to a receiver of the user's choosing.
FAIRLANE_API_REPLAYS_PER_MIN = int(env("FAIRLANE_API_REPLAYS_PER_MIN", "60"))
# The web's time for one user's API requests, seconds a minute, all classes
# together (uploads/throttling.py): requests are counted above, but one may
# cost 5 ms and another 5 s. 20 is a third of one web thread on average:
# an upload page's polls take ~2-5 s a minute (estimated), a 2,000-file claim a few
# seconds once, a 5,000-job batch cancel or retry 1-4 s. 60 (a whole
# thread) let one user keep half of a one-core web host busy with its
# batch cancels, retries and polls: the light users' p99 beside it was 3.1x
# quiet in bench-isolation, 1.36x at 10 (docs/benchmarks.md).
FAIRLANE_API_SECONDS_PER_MIN = int(env("FAIRLANE_API_SECONDS_PER_MIN", "20"))
# What share of its wall time a bulk operation of several chunks (a batch's
# cancel or retry, a large submit) may work; it sleeps the rest between
# chunks (project/pacing.py). 1 never pauses.
FAIRLANE_BULK_DUTY = float(env("FAIRLANE_BULK_DUTY", "0.25"))
if not 0 < FAIRLANE_BULK_DUTY <= 1:
    raise ImproperlyConfigured("FAIRLANE_BULK_DUTY must be above 0 and at most 1")
# Anonymous requests (the schema and its docs page; everything else needs a user), per address.
FAIRLANE_API_ANON_PER_MIN = int(env("FAIRLANE_API_ANON_PER_MIN", "60"))
# Like a plan's own limits (project/plans.py), the defaults are at least 1
# (and notifications.py's):
# 0 would shut every user without a plan out.
if min(FAIRLANE_API_READS_PER_MIN, FAIRLANE_API_WRITES_PER_MIN, FAIRLANE_API_UPLOADS_PER_MIN,
       FAIRLANE_API_REPLAYS_PER_MIN, FAIRLANE_API_ANON_PER_MIN, FAIRLANE_API_SECONDS_PER_MIN, FAIRLANE_MAX_QUEUED_JOBS,
       FAIRLANE_MAX_PENDING_UPLOADS, FAIRLANE_MAX_USER_PENDING_BYTES) < 1:
    raise ImproperlyConfigured("the per-user limits (FAIRLANE_API_*_PER_MIN, FAIRLANE_API_SECONDS_PER_MIN, "
                               "FAIRLANE_MAX_QUEUED_JOBS, "
                               "FAIRLANE_MAX_PENDING_UPLOADS, FAIRLANE_MAX_USER_PENDING_BYTES) must be at least 1")
