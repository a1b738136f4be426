"""A real HTTP webhook receiver on 127.0.0.1, in a thread: records every
request (arrival time, headers, body) and answers what its responder says
(status, headers, body), after an optional delay. Used by the tests and by
bench/notify.py."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests import promise


@dataclass
class Received:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay_s: float = 0.0


Responder = Callable[[Received], Answer]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = Received(time.time(), self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        server: Receiver = self.server.owner  # type: ignore[attr-defined]
        answer = server.responder(request)
        with server.lock:
            server.requests.append(request)
        if answer.delay_s:
            time.sleep(answer.delay_s)
        try:
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the sender gave up (its read timeout)

    def log_message(self, *args) -> None:
        pass


class Receiver:
    """`with Receiver(responder) as r:` serves on r.url until the block ends."""

    def __init__(self, responder: Responder | None = None):
        self.responder: Responder = responder or (lambda request: Answer())
        self.requests: list[Received] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.requests)

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[Received]:
        promise.wait_for(lambda: len(self.received()) >= count, timeout_s, every=0.05,
                         what=lambda: f"{count} requests (the receiver got {len(self.received())})")
        return self.received()


def scripted(*answers: Answer) -> Responder:
    """Answer with each of `answers` in turn, then repeat the last one."""
    queue = list(answers)
    lock = threading.Lock()

    def respond(request: Received) -> Answer:
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond
