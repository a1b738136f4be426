"""Where a webhook may go: public addresses only, checked when the URL is
registered and again right before every connection.

A hostname is resolved, every address it resolves to must be public, and the
connection is then made to the address that was checked (the Host header and
TLS SNI still name the host): a DNS answer that changes between the check and
the connect (DNS rebinding) cannot steer us to an internal service. Redirects
are never followed (notify/transport.py), since a public receiver could
otherwise bounce us to 169.254.169.254.

The resolver is a parameter so that the rules are unit-tested with any DNS
answer; production uses getaddrinfo.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

# Ranges that are never a customer's public server, beyond what
# ipaddress.is_global already excludes (private, loopback, link-local incl.
# the 169.254.169.254 metadata service, CGNAT 100.64/10, documentation,
# benchmarking, reserved, IPv6 ULA fc00::/7 and link-local fe80::/10).
_DENIED_V6 = [
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64: an IPv4 address in disguise
    ipaddress.ip_network("64:ff9b:1::/48"),
    ipaddress.ip_network("2002::/16"),  # 6to4: likewise
    ipaddress.ip_network("2001::/32"),  # Teredo
]
SCHEMES = ("http", "https")
MAX_URL_LENGTH = 2000
# What http.client refuses to put in a request line or Host header (it
# raises instead of sending): refused at registration, with a reason.
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")


class UnsafeURLError(ValueError):
    """The URL may not be called. `code` is stable for the API."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Target:
    """A checked URL: connect to `address`, speak to `host`."""

    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line
    address: str


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def address_problem(address: Address, *, allow_loopback: bool) -> str | None:
    """Why `address` may not be called, or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return "ipv4_mapped"
        if any(address in net for net in _DENIED_V6):
            return "tunnel"
    if address.is_loopback:
        return None if allow_loopback else "loopback"
    if address.is_multicast:
        return "multicast"
    if address.is_link_local:
        return "link_local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "not_global"  # e.g. CGNAT 100.64.0.0/10
    return None


def _split(url: str) -> tuple[str, str, int, str]:
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeURLError("url_too_long", f"The URL is longer than {MAX_URL_LENGTH} characters.")
    if _UNSENDABLE.search(url):
        raise UnsafeURLError("url_invalid", "The URL contains spaces or control characters; percent-encode them.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURLError("url_invalid", f"Not a valid URL: {exc}.") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise UnsafeURLError("url_scheme", "Only http and https URLs are allowed.")
    if parts.username is not None or parts.password is not None:
        raise UnsafeURLError("url_credentials", "Credentials in the URL are not allowed; verify the signature instead.")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeURLError("url_invalid", "The URL has no host.")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    if not path.isascii():
        raise UnsafeURLError("url_invalid", "The URL's path and query must be ASCII; percent-encode the rest.")
    return scheme, host, port or (443 if scheme == "https" else 80), path


def check_url(url: str, *, resolver: Resolver | None = None, allow_loopback: bool | None = None) -> Target:
    """Resolve and check `url`; returns where to connect or raises UnsafeURLError.
    Every address of the host must be allowed, not just the first: a
    receiver's resolver may pick another one."""
    allow_loopback = settings.NOTIFY_WEBHOOK_ALLOW_LOOPBACK if allow_loopback is None else allow_loopback
    scheme, host, port, path = _split(url)
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
        addresses = [str(literal)]
    except ValueError:
        try:
            addresses = (resolver or system_resolver)(host, port)
        except (OSError, UnicodeError):
            raise UnsafeURLError("url_unresolvable", f"{host} does not resolve.") from None
    if not addresses:
        raise UnsafeURLError("url_unresolvable", f"{host} does not resolve.")
    parsed = [ipaddress.ip_address(a.split("%")[0]) for a in addresses]
    for address in parsed:
        problem = address_problem(address, allow_loopback=allow_loopback)
        if problem:
            raise UnsafeURLError("url_not_public", f"{host} resolves to {address} ({problem}); only public "
                                 "addresses can receive webhooks.")
    all_loopback = all(a.is_loopback for a in parsed)
    if port not in settings.NOTIFY_WEBHOOK_ALLOWED_PORTS and not (allow_loopback and all_loopback):
        allowed = ", ".join(map(str, settings.NOTIFY_WEBHOOK_ALLOWED_PORTS))
        raise UnsafeURLError("url_port", f"Port {port} is not allowed (allowed: {allowed}).")
    return Target(scheme=scheme, host=host, port=port, path=path, address=str(parsed[0]))
