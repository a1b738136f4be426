"""One Redis client per process and URL, for the web's small reads and
writes beside the dispatcher's (rates, uploads in flight, poll answers)."""
from __future__ import annotations

import functools

import redis


@functools.lru_cache(maxsize=8)
def client(url: str, timeout_s: float = 2) -> redis.Redis:
    """A client with a short timeout (a request waits on it). One pool per
    process, URL and timeout: redis-py's pool starts afresh in a forked child."""
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
