"""Redis, Celery and the fair dispatcher's lanes (dispatcher/): the
broker, acknowledgement and prefetch, task events, periodic maintenance,
and each lane's window, leases and the hooks the dispatcher calls."""
from __future__ import annotations

from project.settings.core import TIME_ZONE
from project.settings.environ import VAR_DIR, env, env_bool
from project.settings.limits import FAIRLANE_UPLOAD_SWEEP_S

# Embedded valkey-server on 6390 by default (make run starts it), so a Redis
# already on 6379 is never touched by accident.
REDIS_URL = env("REDIS_URL", "redis://127.0.0.1:6390/0")

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
    "visibility_timeout": int(env("CELERY_VISIBILITY_TIMEOUT", str(6 * 3600))),
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
FAIRLANE_EVENT_FLUSH_S = float(env("FAIRLANE_EVENT_FLUSH_S", "0.1"))
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# What a task prints (Django's console email backend, make run's default)
# is logged at INFO, not Celery's default WARNING (one warning per line of
# every email).
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#worker-redirect-stdouts-level
CELERY_WORKER_REDIRECT_STDOUTS_LEVEL = "INFO"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Periodic maintenance (beat, exactly one): the fair dispatcher's reconciler
# and reaper, and the sweep of expired direct uploads and of multipart
# uploads no row knows (uploads/direct.py, FAIRLANE_UPLOAD_SWEEP_S in limits.py).
CELERY_BEAT_SCHEDULE = {
    "fair-reconcile": {"task": "project.fair_reconcile", "schedule": 60.0},
    "direct-upload-sweep": {"task": "uploads.direct_sweep", "schedule": FAIRLANE_UPLOAD_SWEEP_S},
}

# --- Fair dispatch (dispatcher/) -----------------------------------------------
# The Celery app that publishes released jobs (by name: the dispatcher does not
# import the project's Celery module).
FAIR_CELERY_APP = "project.celery.app"
FAIR_REDIS_URL = env("FAIR_REDIS_URL", REDIS_URL)
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
        "headroom": int(env("FAIR_CPU_HEADROOM", "0")),
        "default_window": 2,
        "release_lease_s": float(env("FAIR_CPU_RELEASE_LEASE_S", "900")),
        "run_lease_s": float(env("FAIR_RUN_LEASE_S", "30")),
    },
    "io-notify": {
        "headroom": int(env("FAIR_IO_HEADROOM", "8")),
        "default_window": 16,
        "release_lease_s": float(env("FAIR_IO_RELEASE_LEASE_S", "120")),
        "run_lease_s": float(env("FAIR_RUN_LEASE_S", "30")),
    },
}
# Worker registrations (slots in the window, a host's live processes) expire
# unless renewed every third of this: a host that vanishes stops counting
# toward the window within it. Shorter than an attempt's lease
# (FAIRLANE_JOB_LEASE_S, renewed every third of it, so it runs out at least
# two thirds of it after the last renewal), so that by the time a sweep finds
# a dead host's lease expired, the host's registration has expired too and
# the job is counted as lost with its host, not as a crash.
FAIR_WORKER_TTL_S = float(env("FAIR_WORKER_TTL_S", "8"))
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
FAIR_STALL_S = float(env("FAIR_STALL_S", "60"))
# The workers' ticker reaps expired leases and releases delayed and throttled
# jobs at most this often (and sooner when the scheduler says something is due).
FAIR_TICK_S = float(env("FAIR_TICK_S", "1.0"))
# Called at worker start, every FAIR_RECONCILE_S by one worker's ticker (a
# Redis lock takes turns), and by beat: each repairs what the database says
# against what the dispatcher holds. jobs_reconcile re-submits queued jobs
# the dispatcher does not know (Redis lost them, or a process died between
# commit and submit: the database row is the outbox) once they are older
# than FAIR_RECONCILE_MIN_AGE_S; jobs_recover_expired offers again the jobs
# whose worker stopped renewing its lease; the notify ones re-submit job
# endings not yet turned into events, and deliveries whose task the
# dispatcher lost. Each returns a count.
FAIR_RECONCILERS = ["uploads.services.jobs_reconcile", "uploads.attempts.jobs_recover_expired",
                    "notify.services.job_notifications_reconcile", "notify.services.deliveries_reconcile"]
FAIR_RECONCILE_S = float(env("FAIR_RECONCILE_S", "5"))
FAIR_RECONCILE_MIN_AGE_S = float(env("FAIR_RECONCILE_MIN_AGE_S", "2"))
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
FAIR_USAGE_MINUTES = int(env("FAIR_USAGE_MINUTES", "10"))
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
