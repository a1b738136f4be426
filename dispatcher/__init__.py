"""The fair dispatcher: hold jobs per fairness key, release them fairly into
Celery lanes. Its one home: the scheduling core, its Lua, its Celery wiring
and its staff page.

Layout
------
- `scheduler.py` and `lua/`: the core, Redis and Lua only, nothing about
  Django or Celery. A job is submitted with its serialized Celery message as
  an opaque payload, which `release` pushes into the lane's queue (a Redis
  list) in the same script call; the caller reports `start`, `heartbeat`
  and `finish`.
- `message.py`: that payload, built at submit exactly as kombu's Redis
  transport would push the task (pinned by a test against the installed
  kombu).
- `service.py`: the Celery side of a submit, and the public functions below
  (the one way work enters a lane).
- `worker.py`: the worker side, wired through Celery signals (start/finish
  reports, heartbeats, the ticker, draining); `project/celery.py` imports it.
- `hosts.py`: which worker hosts are alive and which of their processes, as
  the hosts say (a sweep elsewhere tells a lost host from a crash).
- `autoscale.py`: a lane's work in worker-seconds and the worker hosts
  that clear it within a target, for /metrics and autoscalers.
- `protection.py`: a worker host's scale-in protection (ECS, Kubernetes,
  none), kept by `worker.py` while the host has work.
- `health.py`: whether a lane moves (a stalled lane has work and has moved
  nothing for FAIR_STALL_S), for /healthz, /metrics and the staff page.
- `admin_page.py` (+ `templates/`): the staff page `/admin/fairness/`.

Callers use this package's namespace (`from dispatcher import enqueue`), never
its modules. Nothing here imports the Django project's Celery app or URL
configuration; `project/` imports the dispatcher, not the other way round
(only `project.lanes` and `project.routing`, which say which lane a task is
on, are read from here).

The algorithm (hierarchical start-time fair queueing, per lane)
----------------------------------------------------------------
Two levels: the lane shares its worker time between groups (organisations)
by their weights, and each group shares what it gets between its members
(fairness keys: users) by theirs, so that an organisation with 50 busy
members gets one organisation's share, not 50 users' (the KeyPolicy's
group, which the caller takes from the account, never from the client). A
key submitted without a group is a group of its own, weighing what the key
does: one level, exactly the dispatcher as it was before groups.

Each fairness key has a FIFO backlog (a
list; a job that leaves from its middle, canceled or started after a reap,
leaves a stale entry the release drops when it reaches it, so cancelling N
jobs costs O(N), whatever the backlog's length: lua/_lib.lua,
`push_backlog`). Groups with an eligible key sit in the lane's sorted set
scored by the group's virtual start time; a group's eligible keys in the
group's own sorted set (a field, for the common group of one eligible key)
scored by the key's virtual start time within the group. Releasing takes
the group with the smallest score, within it the key with the smallest,
and charges the key's head job at both levels:

    start_G = max(vt[G], V);    V = start_G;    vt[G] = start_G + cost / w[G]
    start_k = max(vt[k], V_G);  V_G = start_k;  vt[k] = start_k + cost / w[k]

and re-scores both. V, the lane's virtual clock, and V_G, each group's,
only move forward, and a group (key) that (re)activates starts at
max(vt, V) (max(vt, V_G)): time spent idle earns no credit to burst with
later, at either level, and one that got ahead keeps its debt. Both levels
are work-conserving: a group alone with work gets the whole lane, a key
alone in its group all of the group's share. `finish` corrects both
virtual times by (actual - estimated) / weight once the real cost is
known, so worker time, not job count, is what is shared.

The bound is start-time fair queueing's (Goyal, Vin and Cheng 1996), at
each level (Goyal, Guo and Vin 1996, hierarchical SFQ): over any interval
in which groups A and B stay backlogged, the worker time W they receive
satisfies |W_A / w_A - W_B / w_B| <= c_A / w_A + c_B / w_B (c: the largest
job of each), whatever the other groups do, and within a group the same
holds between its backlogged keys, of the time the group received. A
newcomer group starts at V, the start of the job released last, at most
one job's charge behind every busy group, so its first job is released
next and starts after at most about one window of completions, however
many jobs or members the others hold; the same holds for a newcomer key
within its group. Caps and token-bucket rates apply at both levels: a key
at its cap or out of tokens leaves its group's eligible keys (its group
stays eligible while another key can go), a group at its cap or out of
tokens leaves the lane's sorted set with all its keys; a finish or a token
puts each back. A named group's member costs a job two or three commands
more (its group's sorted set of members read and written, and its place
there corrected by its finish: O(log groups) + O(log members)), nothing
more for a key of its own group.

Only a window of jobs is released at a time: the live workers' slots plus a
headroom of queued jobs, none on the cpu lane (a finish releases into its
own slot and pushes the message before the slot asks for one, so no slot
waits and a newcomer queues behind no released job), a few on the io lane.
Releases happen where the room or the eligible keys may have changed: a
finish, a submit that made its key eligible (a job joining a key eligible
already changes neither: the last release left the window full or no key
eligible), and the workers' ticker after registrations, reaps and due
times. A submit for an idle key that finds the window with room and no key
eligible (a lane that keeps up) releases its job at once, charged as
above, without passing its key and group through the sorted sets: they
would be the only eligible ones. A call reads the lane's state with one HMGET (two
in a release) and writes it with one HSET: the lane's numbers, each key's
fields and each job's record and message share one hash (lua/_lib.lua,
H). A no-op job costs 19 Redis commands in all, Celery's included
(`make bench-fairness`), for a key without a group; a member of an
organisation of one costs about one more, of a busy organisation three
(`make bench-redis-cost`). Every state change (submit, release, start, heartbeat, finish,
requeue, reap, cancel) is one call of a Lua function
(a Redis 7 function library, loaded on first use) over keys sharing the hash
tag "{fair:<lane>}", so it is atomic for any number of web
processes and workers; a job id is accepted once, popped once, hence released
once. Released jobs are leased (`release_lease_s` until a worker starts them,
`run_lease_s` renewed by heartbeats while they run); `reap` puts expired ones
back at the front of their backlog, so a process killed at any point loses no
job. A released job's message that a worker took and died with (killed
before it started the job, or unable to put it back at a warm shutdown
because Redis was down) would hold its window slot for the whole release
lease; instead every worker process says which jobs it holds (`holding`,
every third of the workers' registration TTL), and a released job found in
no queue and held by no live process, at two looks a margin apart, is put
back within about that TTL (lua/_lib.lua, `recover_orphans`). Each lane
also keeps when it last moved (a release, start, heartbeat or finish), so a
health check can tell a lane that holds work and moves nothing
(`health.py`). They are the only redelivery a fair lane needs, so kombu's emulation of
acknowledgements (a copy of every delivered message in Redis until its ack)
is off while fair dispatch is on (project/settings/). Concurrency caps
and token-bucket rate limits park a key (in its group's `mc:` set, in
`mthrottled`) or a group (in `capped` / `throttled`) until a finish or a
token makes it eligible again; delayed jobs wait in a due-time
set, not in Celery ETAs (which sit in worker memory and fight the broker's
visibility timeout). Every hot-path operation is O(log keys); nothing scans
or polls: `next_wakeup` tells the ticker how long it may sleep.

Redis is not the source of truth: the database's job rows are. After Redis
loses data, `clear` and resubmitting the unfinished rows rebuild the lane.

Why hold-and-release, not the doorbell variant
----------------------------------------------
The design notes (shared/design/fair-dispatch.md) weigh a late-binding
"doorbell": argument-less tasks that claim the fairest job when a slot frees.
We chose hold-and-release because:

- Operators see the real task in Flower, with its name, arguments and id, the
  moment it is released; doorbell tasks would all look alike and need the
  claimed job smuggled into results or state metadata.
- Retries, revokes and admin actions keep working through Celery's ordinary
  paths, since the message is the job's own.
- The window is small (slots + headroom, 0 or a few), so the only cost of
  binding a job to a slot early is that a newcomer may wait behind the
  headroom jobs; the
  prototype measured light users' worst wait at 0.12 s against 2.27 s FIFO.
- Leases give what the doorbell's claim lease gives: a job lost with its
  publisher or worker is offered again, and `start` refuses finished jobs, so
  a redelivered message does not run a finished job again.

The doorbell remains the better fit if long jobs meet kombu's visibility
timeout; the lease layout here (inflight set, heartbeats) would carry over.
"""
from dispatcher.autoscale import LaneWork, lane_work, slots_per_host, suggested_hosts
from dispatcher.health import LaneHealth, lane_health
from dispatcher.hosts import host_processes, register_host, unregister_worker_of_host
from dispatcher.protection import (
    EcsAgentProtection, HostProtection, KubernetesPodProtection, NoProtection, ProtectionError, ProtectionProvider,
)
from dispatcher.scheduler import NO_RATE_LIMIT, FairScheduler, Released
from dispatcher.service import (
    HANDED_BACK, KeyPolicy, Submission, after_commit, cancel, enqueue, enqueue_many, finish, hand_back, is_draining,
    is_fair, job_id_of, release_all, scheduler, set_draining,
)

__all__ = (
    "HANDED_BACK", "NO_RATE_LIMIT", "EcsAgentProtection", "FairScheduler", "HostProtection", "KeyPolicy",
    "KubernetesPodProtection", "LaneHealth", "LaneWork", "NoProtection", "ProtectionError", "ProtectionProvider",
    "Released", "Submission", "after_commit", "cancel", "enqueue", "enqueue_many", "finish", "hand_back",
    "host_processes", "is_draining", "is_fair", "job_id_of", "lane_health", "lane_work", "register_host",
    "release_all", "scheduler", "set_draining", "slots_per_host", "suggested_hosts", "unregister_worker_of_host",
)
