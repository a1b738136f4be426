"""A total deadline on a conversation with a remote server (a webhook
receiver, an SMTP server), on top of the per-operation socket timeouts.

A socket timeout bounds one send or one receive, not the exchange: a server
that sends one byte every 9 s never trips a 10 s read timeout, and holds the
io thread for as long as it likes (an HTTP status line may be 64 KiB long).
Inside `with deadline(seconds):`, every send and receive on a
`BoundedSocket` or `BoundedSSLSocket` waits at most until the deadline:
before each call the socket's timeout becomes min(its own, the time left),
and a call once the time is up raises `DeadlineExceeded` (a TimeoutError,
which every caller already handles as a timeout).

The deadline is a context variable, so each io thread has its own, and
sockets that a library makes from ours (smtplib's STARTTLS wraps the socket
in TLS: `ssl_context()` makes that a BoundedSSLSocket) obey it without being
told. A TLS handshake is bounded as a whole: CPython runs it under one
deadline equal to the socket's timeout, which `arm` has just set to at most
the time left. Name resolution (getaddrinfo) is not a socket operation and
is bounded by the system resolver's own timeouts.
"""
from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("fairlane_io_deadline", default=None)


class DeadlineExceeded(TimeoutError):
    """The conversation's total deadline passed."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Bound every bounded socket operation of this thread to `seconds` from now."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


class _Bounded:
    """Mixed into a socket class: each send and receive first `arm`s the socket."""

    _own_timeout: float | None = None

    def settimeout(self, value: float | None) -> None:
        self._own_timeout = value  # the per-operation timeout the caller asked for
        super().settimeout(value)

    def arm(self) -> None:
        """Set the timeout of the next operation: its own, or the time left if shorter."""
        at = _deadline.get()
        if at is None:
            return
        left = at - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("total deadline exceeded")
        own = self._own_timeout
        super().settimeout(left if own is None else min(own, left))

    def _bounded(self, operation, *args, **kwargs):
        self.arm()
        try:
            return operation(*args, **kwargs)
        except TimeoutError as exc:  # the deadline's share of the timeout ran out, or the operation's own
            at = _deadline.get()
            if at is not None and time.monotonic() >= at:
                raise DeadlineExceeded("total deadline exceeded") from exc
            raise

    def recv(self, *args, **kwargs):
        return self._bounded(super().recv, *args, **kwargs)

    def recv_into(self, *args, **kwargs):
        return self._bounded(super().recv_into, *args, **kwargs)

    def send(self, *args, **kwargs):
        return self._bounded(super().send, *args, **kwargs)

    def sendall(self, *args, **kwargs):
        # A plain socket's sendall is bounded by its timeout as a whole
        # (Python >= 3.5); an SSL socket's loops over send, bounded each time.
        return self._bounded(super().sendall, *args, **kwargs)


class BoundedSocket(_Bounded, socket.socket):
    pass


class BoundedSSLSocket(_Bounded, ssl.SSLSocket):
    def do_handshake(self, *args, **kwargs):
        return self._bounded(super().do_handshake, *args, **kwargs)


def bounded(sock: socket.socket) -> socket.socket:
    """The same connection as a BoundedSocket (same timeout)."""
    if isinstance(sock, _Bounded):
        return sock
    if isinstance(sock, ssl.SSLSocket):
        raise TypeError("wrap TLS with ssl_context()'s context, which makes bounded SSL sockets")
    timeout = sock.gettimeout()
    new = BoundedSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    new.settimeout(timeout)
    return new


def ssl_context(context: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """`context` (default: the system's verifying one) made to wrap into BoundedSSLSockets."""
    context = context or ssl.create_default_context()
    context.sslsocket_class = BoundedSSLSocket
    return context
