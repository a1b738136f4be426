"""A hostile server for the notify tests: a raw TCP listener on 127.0.0.1
that says exactly the bytes its script gives, at the pace it gives them.

tests/notify/receiver.py speaks correct HTTP; a receiver (or a mail server)
on the internet may answer anything: a broken status line, NUL bytes, huge
or endless headers, invalid UTF-8, a body that never ends, one byte every
few seconds. Each connection runs `script(conn, server)` in its own thread;
the helpers below build the usual scripts.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable

Script = Callable[[socket.socket, "HostileServer"], None]

# A trickle that nobody stops ends after this many seconds anyway, so a test
# that fails (the client never gives up) still ends.
TRICKLE_CAP_S = 60.0


class HostileServer:
    """`with HostileServer(script) as s:` listens on s.port until the block ends.

    `requests`: the raw requests read by `http_request`; `cut_off`: how many
    times the client hung up while the script was still sending (the client
    gave up first)."""

    def __init__(self, script: Script):
        self.script = script
        self.requests: list[bytes] = []
        self.cut_off = 0
        self.lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.script(conn, self)
            except OSError:  # the client hung up on us
                with self.lock:
                    self.cut_off += 1

    def stopped(self) -> bool:
        return self._stop.is_set()


def http_request(conn: socket.socket, server: HostileServer) -> bytes:
    """Read one HTTP request (headers and a Content-Length body) and record it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    with server.lock:
        server.requests.append(head + b"\r\n\r\n" + body)
    return data


def send_trickle(conn: socket.socket, server: HostileServer, chunks: Iterable[bytes], *, every_s: float) -> None:
    """Send `chunks` one at a time, `every_s` apart, until they run out, the
    client hangs up (OSError) or TRICKLE_CAP_S has passed."""
    give_up = time.monotonic() + TRICKLE_CAP_S
    for chunk in chunks:
        if server.stopped() or time.monotonic() > give_up:
            return
        conn.sendall(chunk)
        time.sleep(every_s)


def answer(raw: bytes, *, hold_open: bool = False) -> Script:
    """Read the request, send `raw` as it is, then close (or keep the
    connection open, silent, until the client leaves)."""

    def script(conn: socket.socket, server: HostileServer) -> None:
        http_request(conn, server)
        conn.sendall(raw)
        if hold_open:
            conn.settimeout(TRICKLE_CAP_S)
            try:
                while conn.recv(1024):
                    pass
            except TimeoutError:
                pass

    return script


def trickle_answer(head: bytes, *, every_s: float, byte: bytes = b"x") -> Script:
    """Read the request, send `head`, then one `byte` every `every_s` seconds:
    never a read timeout, never an end."""

    def script(conn: socket.socket, server: HostileServer) -> None:
        http_request(conn, server)
        conn.sendall(head)
        send_trickle(conn, server, iter(lambda: byte, None), every_s=every_s)

    return script
