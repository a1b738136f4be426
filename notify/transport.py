"""One HTTP POST to a checked webhook target, and nothing more.

The connection goes to the address notify/ssrf.py checked, never to a fresh
DNS answer; the Host header and TLS SNI/certificate check use the hostname.
http.client never follows redirects, and only a small prefix of the
response is read. Connect and read have their own short timeouts.
"""
from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

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
        sock = socket.create_connection((self._address, self.port), self._connect_timeout)
        sock.settimeout(self.timeout)
        return sock

    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    _context = ssl.create_default_context()

    def connect(self) -> None:
        self.sock = self._context.wrap_socket(self._open(), server_hostname=self.host)


def post(target: Target, *, body: bytes, headers: dict[str, str], connect_timeout: float, read_timeout: float,
         prefix_bytes: int) -> Response:
    """POST `body`; never raises for network trouble, which is reported in `error`."""
    cls = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    conn = cls(target, connect_timeout=connect_timeout, read_timeout=read_timeout)
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        conn.request("POST", target.path, body=body, headers={
            "Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
        resp = conn.getresponse()
        prefix = resp.read(prefix_bytes)
        return Response(status=resp.status, latency_ms=elapsed(), body_prefix=prefix.decode("utf-8", "replace"),
                        retry_after=resp.getheader("Retry-After"))
    except (TimeoutError, socket.timeout):
        return Response(status=None, latency_ms=elapsed(), error="timeout")
    except ssl.SSLError as exc:
        return Response(status=None, latency_ms=elapsed(), error=f"tls: {exc.reason or exc}"[:500])
    except (OSError, http.client.HTTPException) as exc:
        return Response(status=None, latency_ms=elapsed(), error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        conn.close()
