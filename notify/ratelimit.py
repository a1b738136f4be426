"""Per-endpoint rate limit, shared by every worker on every host: a token
bucket in Redis, one Lua script call per delivery.

The bucket is kept as GCRA's "theoretical arrival time" (tat): the time at
which the bucket would be full again. A call always takes a token, possibly
one that is not there yet, and returns how long to wait for it: 0 while
fewer than `burst` are outstanding, else when its token is due. Reserving
instead of refusing matters at scale: 10,000 deliveries throttled at once get
10,000 distinct due times, instead of all coming back together, failing
again and churning through the dispatcher. The script reads Redis's clock,
so workers with skewed clocks still share one bucket.
"""
from __future__ import annotations

import os
import threading

import redis
from django.conf import settings

# KEYS[1] bucket; ARGV rate (tokens/s), burst. Returns the wait in
# microseconds (integer: Lua numbers become integers in replies).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local interval = 1 / rate
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local new_tat = math.max(tat, now) + interval
local wait = new_tat - burst * interval - now
if wait < 0 then wait = 0 end
redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'PX', math.ceil((new_tat - now) * 1000) + 1000)
return math.floor(wait * 1e6)
"""

_clients: dict[int, tuple[redis.Redis, object]] = {}
_lock = threading.Lock()


def _script():
    pid = os.getpid()
    with _lock:
        if pid not in _clients:
            client = redis.Redis.from_url(settings.FAIR_REDIS_URL, socket_timeout=5)
            _clients[pid] = (client, client.register_script(_TAKE))
        return _clients[pid][1]


def bucket_key(endpoint_id: str) -> str:
    return f"notify:rate:{endpoint_id}"


def take(*, endpoint_id: str, rate_per_s: float, burst: int) -> float:
    """Take one token for `endpoint_id`; seconds until it may be used (0: now).
    A rate of 0 or less means no limit."""
    if rate_per_s <= 0:
        return 0.0
    return _script()(keys=[bucket_key(endpoint_id)], args=[rate_per_s, max(1, burst)]) / 1e6
