"""One HTTP POST to a checked webhook target, and nothing more.

The connection goes to the address notify/ssrf.py checked, never to a fresh
DNS answer; the Host header and TLS SNI/certificate check use the hostname.
http.client never follows redirects, and only a small prefix of the
response is read. Connect and read have their own short timeouts, and the
whole exchange a total deadline (notify/deadline.py): a receiver that
trickles its answer cannot hold an io thread longer than that.

The receiver may answer anything (any bytes in the status line, headers and
body, any length, any pace): `post` never raises for what it answers, it
reports it. What it reports is not yet fit to store (NUL bytes, any
length): the caller makes it so (notify.services._record).
"""
from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from notify import deadline
from notify.ssrf import Target

USER_AGENT = "Fairlane-Webhooks/1"


@dataclass(frozen=True)
class Response:
    status: int | None  # None: no HTTP answer (see error)
    latency_ms: int
    error: str = ""
    body_prefix: str = ""
    retry_after: str | None = None


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, target: Target, *, connect_timeout: float, read_timeout: float):
        super().__init__(target.host, target.port, timeout=read_timeout)
        self._address, self._connect_timeout = target.address, connect_timeout

    def _open(self) -> socket.socket:
        sock = deadline.bounded(socket.create_connection((self._address, self.port), self._connect_timeout))
        sock.settimeout(self.timeout)
        return sock

    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    _context = deadline.ssl_context()

    def connect(self) -> None:
        self.sock = self._context.wrap_socket(self._open(), server_hostname=self.host)


def post(target: Target, *, body: bytes, headers: dict[str, str], connect_timeout: float, read_timeout: float,
         total_timeout: float, prefix_bytes: int) -> Response:
    """POST `body`; never raises for what the network or the receiver does,
    which is reported in `error`. `total_timeout` bounds the whole exchange,
    from connecting to the last byte read."""
    cls = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    conn = cls(target, connect_timeout=connect_timeout, read_timeout=read_timeout)
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        with deadline.deadline(total_timeout):
            conn.request("POST", target.path, body=body, headers={
                "Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
            resp = conn.getresponse()
            prefix = resp.read(prefix_bytes)
        return Response(status=resp.status, latency_ms=elapsed(), body_prefix=prefix.decode("utf-8", "replace"),
                        retry_after=resp.getheader("Retry-After"))
    except deadline.DeadlineExceeded:
        return Response(status=None, latency_ms=elapsed(), error=f"timeout: no complete answer within the "
                        f"{total_timeout:g} s deadline")
    except TimeoutError:
        return Response(status=None, latency_ms=elapsed(), error="timeout")
    except ssl.SSLError as exc:
        return Response(status=None, latency_ms=elapsed(), error=f"tls: {exc.reason or exc}")
    except (OSError, http.client.HTTPException) as exc:
        return Response(status=None, latency_ms=elapsed(), error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - whatever else a malformed answer makes the parser raise
        return Response(status=None, latency_ms=elapsed(), error=f"unreadable answer: {type(exc).__name__}: {exc}")
    finally:
        conn.close()
