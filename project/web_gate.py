"""The web's front door (ASGI, in front of Django's WSGI app): one client's
requests cannot make another's wait, and a refused client waits without
holding a thread.

Django runs in a pool of FAIRLANE_WEB_THREADS threads per web process
(a2wsgi). Under a threaded WSGI server a request takes a thread, or waits
for one in one FIFO, as soon as its connection is read: a user with a
thousand open pages, or a loop that sends its next request the moment it
has an answer, fills the threads and the queue, and a light user's three
requests wait behind all of it (bench-isolation, issue 32). Here, on the
server's event loop, before any thread:

- **Fair turns.** At most FAIRLANE_WEB_THREADS requests are in Django at
  once, and at most FAIRLANE_WEB_THREADS_PER_CLIENT (half) of one client's,
  so a thread is free for another client whatever one client sends; the
  others wait by client (`FairSlots`), and a freed thread goes to the next
  client in turn, not to the oldest request. So a light user's
  request waits for at most one request of each other waiting client,
  whatever their number of requests. A client is the user its credentials
  (Authorization header and session cookie, as sent) were last found to
  be on this process (uploads/throttling.py's `KnownUsers`), else those
  credentials, or its address when it sends neither (behind
  FAIRLANE_API_PROXIES proxies, the address the outermost of them saw, from
  X-Forwarded-For, as the API's throttle counts it: else everyone who is
  not signed in would share the load balancer's one turn); at most
  FAIRLANE_WEB_WAITING_PER_CLIENT of one client's requests wait (past
  that: 429 `busy`, Retry-After 1).
- **Held refusals.** An API request whose credentials are refused for its
  route class for a while yet (uploads/throttling.py's `KnownRefusals`:
  the throttle learned when their next request would pass) is held here,
  for up to FAIRLANE_WEB_REFUSAL_HOLD_S, before its 429, on a timer, not a
  thread; if the refusal ends meanwhile it goes on to Django. A client
  that sends its next request as soon as it has an answer gets at most one
  answer per hold, not hundreds a second. At most
  FAIRLANE_WEB_HELD_PER_CLIENT of a client's requests (and
  FAIRLANE_WEB_HELD_MOST of all) are held at once; past that the 429 is
  sent at once.
- **Bodies first.** A request's body, up to BODY_READ_AHEAD, is read before
  it takes a thread: a client that sends slowly holds a connection, not a
  thread.

Every request's access line is logged here ("fairlane.access", through
settings.LOGGING's console handler, which masks output link tokens).
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from django.http.cookie import parse_cookie
from rest_framework.throttling import BaseThrottle

from project import request_timing

access_log = logging.getLogger("fairlane.access")
_IDENT = BaseThrottle()  # its get_ident: an anonymous client's address
# A request body up to this size is read before the request takes a thread
# (the API's JSON bodies are a few KB; a multipart upload's parts are larger).
BODY_READ_AHEAD = 256 * 1024

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Client = tuple[str, ...]
# (credentials, method, path) -> (seconds the refusal has left, its JSON body
# for a Retry-After of n seconds) or None: uploads.throttling.known_refusal.
Refused = Callable[[tuple[str, str], str, str], "tuple[float, Callable[[int], dict]] | None"]
# credentials -> the user they were found to be, or None: KnownUsers.user_of.
UserOf = Callable[[tuple[str, str]], "int | None"]


class FairSlots:
    """`slots` places, handed out one client at a time: a freed place goes
    to the client whose turn is next (round robin over the clients that
    wait), each client's requests in the order they came; no client holds
    more than `per_client` at once, so a place is free for someone else
    even while one client has requests enough for all. Event loop only.

    Invariant: while a place is free, every client that waits holds its
    `per_client` (so a newcomer under its own bound may take a free place
    at once without passing anyone who could have had it)."""

    def __init__(self, slots: int, per_client: int, waiting_most: int) -> None:
        self.free = slots
        self.per_client = per_client
        self.waiting_most = waiting_most
        self._holding: Counter[Client] = Counter()
        self._waiting: dict[Client, deque[asyncio.Future]] = {}
        self._turns: deque[Client] = deque()  # clients that wait, in turn

    def waiting(self, client: Client) -> int:
        return len(self._waiting.get(client, ()))

    def holding(self, client: Client) -> int:
        return self._holding[client]

    async def enter(self, client: Client) -> bool:
        """Takes a place, waiting for its turn; False (and no place) if the
        client already has `waiting_most` requests waiting."""
        if self.free and self.holding(client) < self.per_client and client not in self._waiting:
            self._take(client)
            return True
        queue = self._waiting.get(client)
        if queue is None:
            queue = self._waiting[client] = deque()
            self._turns.append(client)
        elif len(queue) >= self.waiting_most:
            return False
        turn = asyncio.get_running_loop().create_future()
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # the place came with the cancel: pass it on
                self.leave(client)
            else:
                self._forget(client, turn)
            raise
        return True

    def leave(self, client: Client) -> None:
        """Gives the client's place back, to the next waiting client in turn
        that is under its bound, or free."""
        _count(self._holding, client, -1)
        self.free += 1
        # Clients at their bound keep their turn and are passed over: at most
        # `slots` of them can wait, so this looks at a few clients, not all.
        passed = 0
        while passed < len(self._turns):
            waiter = self._turns.popleft()
            if self.holding(waiter) >= self.per_client:
                self._turns.append(waiter)
                passed += 1
                continue
            queue = self._waiting[waiter]
            turn = queue.popleft()
            if queue:
                self._turns.append(waiter)
            else:
                del self._waiting[waiter]
            if turn.done():  # canceled, its task not yet told: no place for it
                continue
            self._take(waiter)
            turn.set_result(None)
            return

    def _take(self, client: Client) -> None:
        self.free -= 1
        _count(self._holding, client, 1)

    def _forget(self, client: Client, turn: asyncio.Future) -> None:
        queue = self._waiting.get(client)
        if queue is None or turn not in queue:
            return
        queue.remove(turn)
        if not queue:
            del self._waiting[client]
            self._turns.remove(client)


class WebGate:
    """The ASGI app the web server runs: fair turns and held refusals (the
    module's docstring) in front of `app`, Django's WSGI app in a pool of
    `slots` threads."""

    def __init__(self, app: ASGIApp, *, slots: int, slots_per_client: int, refused: Refused, user_of: UserOf,
                 session_cookie: str, hold_s: float, held_per_client: int, held_most: int,
                 waiting_per_client: int) -> None:
        self.app = app
        self.slots = FairSlots(slots, slots_per_client, waiting_per_client)
        self.refused = refused
        self.user_of = user_of
        self.session_cookie = session_cookie
        self.hold_s = hold_s
        self.held_per_client = held_per_client
        self.held_most = held_most
        self._held: Counter[Client] = Counter()  # requests held now, by client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 0, "bytes": 0}

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            elif message["type"] == "http.response.body":
                status["bytes"] += len(message.get("body", b""))
            await send(message)

        headers = _headers(scope)
        try:
            await self._handle(scope, headers, receive, counted)
        finally:
            _log_access(scope, headers, status["code"], status["bytes"], time.perf_counter() - started)

    async def _handle(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        credentials = (headers.get("authorization", ""),
                       parse_cookie(headers.get("cookie", "")).get(self.session_cookie, ""))
        client = self._client(credentials, headers, scope)
        method, path = scope["method"], scope["path"]
        if path.startswith("/api/") and (known := self.refused(credentials, method, path)) is not None:
            if self._held[client] < self.held_per_client and self._held.total() < self.held_most:
                await self._hold(client, min(known[0], self.hold_s))
                known = self.refused(credentials, method, path)
            if known is not None:
                left, body = known
                retry_after = max(1, math.ceil(left))
                await _answer(send, 429, body(retry_after), retry_after)
                return
        receive = await _read_ahead(receive, BODY_READ_AHEAD)
        waiting = time.perf_counter()
        if not await self.slots.enter(client):
            await _answer(send, 429, {"error": {
                "code": "busy", "retry_after": 1,
                "message": "Too many of your requests are waiting for the web; try again in 1 s."}}, 1)
            return
        try:
            await self.app(_with_wait(scope, time.perf_counter() - waiting), receive, send)
        finally:
            self.slots.leave(client)

    def _client(self, credentials: tuple[str, str], headers: dict[str, str], scope: Scope) -> Client:
        if not any(credentials):
            return ("", "", _address(headers, scope))
        user = self.user_of(credentials)
        # A user's key is one string long: no credentials as sent (two) nor address (three) can spell it.
        return credentials if user is None else (f"user:{user}",)

    async def _hold(self, client: Client, seconds: float) -> None:
        _count(self._held, client, 1)
        try:
            await asyncio.sleep(seconds)
        finally:
            _count(self._held, client, -1)


def _address(headers: dict[str, str], scope: Scope) -> str:
    """The client's address as DRF's throttle finds an anonymous one
    (BaseThrottle.get_ident, REST_FRAMEWORK's NUM_PROXIES): the peer's, or
    behind N proxies the one the outermost of them saw, counted from the
    right of X-Forwarded-For. Asked of DRF itself, so the turn and the
    anonymous rate cannot disagree."""
    return _IDENT.get_ident(SimpleNamespace(headers=headers, META={"REMOTE_ADDR": (scope.get("client") or ("",))[0]}))


async def _read_ahead(receive: Receive, most: int) -> Receive:
    """The request's body read before it takes a thread, up to `most`
    bytes (a slow client's small body holds no thread while it trickles
    in), then handed on; the rest, if any, is read by the thread."""
    read: deque[dict] = deque()
    size = 0
    while size <= most:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request" or not message.get("more_body"):
            break
        size += len(message.get("body", b""))

    async def replay() -> dict:  # a coroutine, as a2wsgi needs (granian's receive is not one)
        return read.popleft() if read else await receive()

    return replay


def _count(counts: Counter, key: Client, by: int) -> None:
    """Adds `by` to a count, dropping it at zero (a client seen once is not kept)."""
    counts[key] += by
    if not counts[key]:
        del counts[key]


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (latin-1, as WSGI reads
    them); a repeated header's values joined by commas, as a2wsgi gives
    them to Django (so X-Forwarded-For reads the same here and there)."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key, text = name.decode("latin-1"), value.decode("latin-1")
        headers[key] = f"{headers[key]},{text}" if key in headers else text
    return headers


_WAIT_HEADER = request_timing.GATE_WAIT_HEADER.encode("latin-1")


def _with_wait(scope: Scope, seconds: float) -> Scope:
    """The request as Django gets it: with its wait here for a thread, in
    a header of ours (project/request_timing.py logs it if it is slow), and
    without any the client sent under that name."""
    headers = [(name, value) for name, value in scope.get("headers", ()) if name.lower() != _WAIT_HEADER]
    return {**scope, "headers": [*headers, (_WAIT_HEADER, str(round(seconds * 1000)).encode())]}


async def _answer(send: Send, status: int, body: dict, retry_after: int) -> None:
    content = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
        (b"retry-after", str(retry_after).encode()), (b"x-content-type-options", b"nosniff")]})
    await send({"type": "http.response.body", "body": content})


def _log_access(scope: Scope, headers: dict[str, str], status: int, size: int, seconds: float) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    query = scope.get("query_string", b"").decode("latin-1")
    target = scope["path"] + (f"?{query}" if query else "")
    # The client's address as the turn and the anonymous rate see it: behind
    # proxies, the one the outermost saw, not the balancer's.
    access_log.info('%s "%s %s HTTP/%s" %s %s "%s" "%s" %.3fs', _address(headers, scope) or "-",
                    scope["method"], target, scope.get("http_version", "1.1"), status or "-", size,
                    headers.get("referer", "-"), headers.get("user-agent", "-"), seconds)


__all__ = ["FairSlots", "WebGate"]
