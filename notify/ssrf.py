"""Where a webhook may go: globally routable unicast addresses only, checked
when the URL is registered and again right before every connection.

A hostname is resolved, every address it resolves to must be public, and the
connection is then made to the address that was checked (the Host header and
TLS SNI still name the host): a DNS answer that changes between the check and
the connect (DNS rebinding) cannot steer us to an internal service. Redirects
are never followed (notify/transport.py), since a public receiver could
otherwise bounce us to 169.254.169.254.

What is public is decided by a table of its own (DENIED), not by Python's
`ipaddress.is_global` alone, which calls global the IPv6 site-local range
fec0::/10, the documentation range 3fff::/20, IPv4-compatible ::a00:1 and
2002:a00::/24 (6to4 of 10/8). The table holds the IANA special-purpose
registries (RFC 6890 and after), multicast and the reserved ranges, and the
IPv6 forms that carry an IPv4 address: IPv4-mapped and -translated, 6to4 and
Teredo are refused whole (nobody serves webhooks from them; 6to4's relays
are gone, RFC 7526), NAT64 (64:ff9b::/96, what DNS64 answers on an
IPv6-only host) by the IPv4 address it carries. An IPv6 address must also
be in global unicast (2000::/3), and whatever ipaddress calls not global
stays refused too.

A refusal names the rule and never the address: it is shown to the user
who registered the URL, and the address would tell any user what the
server's DNS resolves a name to (an internal-DNS oracle).

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
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

LOOPBACK = "loopback"
# IANA IPv4 Special-Purpose Address Registry, multicast and the reserved
# class E: (network, the rule a refusal names).
_V4 = [
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private-use"),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
    ("127.0.0.0/8", LOOPBACK),
    ("169.254.0.0/16", "link-local"),  # the cloud metadata service, 169.254.169.254, among them
    ("172.16.0.0/12", "private-use"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.31.196.0/24", "AS112 DNS sink"),
    ("192.52.193.0/24", "AMT relay anycast"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private-use"),
    ("192.175.48.0/24", "AS112 DNS sink"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),  # 255.255.255.255, the limited broadcast, among them
]
# IANA IPv6 Special-Purpose Address Registry and the deprecated ranges
# ipaddress does not know; a more specific entry wins (2001:db8::/32 is
# documentation, the rest of 2001::/23 protocol assignments).
_V6 = [
    ("::/128", "unspecified"),
    ("::1/128", LOOPBACK),
    ("::ffff:0:0/96", "IPv4-mapped"),
    ("::ffff:0:0:0/96", "IPv4-translated"),
    ("64:ff9b:1::/48", "NAT64 local use"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "ORCHID"),
    ("2001:20::/28", "ORCHIDv2"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6)"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
]
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address in the last 32 bits
GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")


def _nat64(network: ipaddress.IPv4Network) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network((int(NAT64.network_address) + int(network.network_address), 96 + network.prefixlen))


_DENIED_V4 = [(ipaddress.IPv4Network(net), rule) for net, rule in _V4]
# Most specific first, so that the first network containing an address
# names its rule.
DENIED: list[tuple[Network, str]] = sorted(
    [*_DENIED_V4, *((ipaddress.IPv6Network(net), rule) for net, rule in _V6),
     *((_nat64(net), f"{rule} (in NAT64)") for net, rule in _DENIED_V4)],
    key=lambda entry: -entry[0].prefixlen)


def denied_rule(address: Address) -> str | None:
    """The rule under which `address` is no public unicast server, or None."""
    for network, rule in DENIED:
        if network.version == address.version and address in network:
            return rule
    if isinstance(address, ipaddress.IPv6Address) and address in NAT64:  # carrying an IPv4 address of no rule
        carried = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
        return None if carried.is_global else "not globally routable (in NAT64)"
    if isinstance(address, ipaddress.IPv6Address) and address not in GLOBAL_UNICAST_V6:
        return "reserved (outside IPv6 global unicast)"
    if not address.is_global:  # anything ipaddress learns of that the table does not hold yet
        return "not globally routable"
    return None


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
        literal = None
        try:
            addresses = (resolver or system_resolver)(host, port)
        except (OSError, UnicodeError):
            raise UnsafeURLError("url_unresolvable", f"{host} does not resolve.") from None
    if not addresses:
        raise UnsafeURLError("url_unresolvable", f"{host} does not resolve.")
    parsed = [ipaddress.ip_address(a.split("%")[0]) for a in addresses]
    rules = [denied_rule(address) for address in parsed]
    for rule in rules:
        if rule and not (rule == LOOPBACK and allow_loopback):
            subject = "the name resolves to" if literal is None else "the URL names"
            raise UnsafeURLError("url_not_public", f"Webhook addresses must be public: {subject} an address in a "
                                 f"special-purpose range ({rule}).")
    all_loopback = all(rule == LOOPBACK for rule in rules)
    if port not in settings.NOTIFY_WEBHOOK_ALLOWED_PORTS and not (allow_loopback and all_loopback):
        allowed = ", ".join(map(str, settings.NOTIFY_WEBHOOK_ALLOWED_PORTS))
        raise UnsafeURLError("url_port", f"Port {port} is not allowed (allowed: {allowed}).")
    return Target(scheme=scheme, host=host, port=port, path=path, address=str(parsed[0]))
