"""Where webhooks may go: the URL rules as pure logic (an injected resolver
stands in for DNS), and registration through the API with the real resolver.

Only globally routable unicast addresses pass, whatever Python's ipaddress
calls global (it calls fec0::/10 site-local, 3fff::/20 documentation and
2002:a00::/24, 6to4 of 10/8, global). A refusal names the rule, never the
address: it would tell any user what the server's DNS resolves a name to."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notify import ssrf


def resolving_to(*addresses: str) -> ssrf.Resolver:
    return lambda host, port: list(addresses)


PUBLIC = resolving_to("93.184.216.34")


@pytest.mark.parametrize(("url", "resolver", "code"), [
    ("http://127.0.0.1:8080/hook", None, "url_not_public"),
    ("http://[::1]:8080/hook", None, "url_not_public"),
    ("http://receiver.example:8080/", resolving_to("127.0.0.1"), "url_not_public"),
    ("http://10.0.0.1/hook", None, "url_not_public"),
    ("http://10.255.1.2/hook", None, "url_not_public"),
    ("http://172.16.0.5/", None, "url_not_public"),
    ("http://192.168.1.1/", None, "url_not_public"),
    ("http://169.254.169.254/latest/meta-data/", None, "url_not_public"),
    ("http://100.64.0.1/", None, "url_not_public"),  # CGNAT
    ("http://224.0.0.1/", None, "url_not_public"),
    ("http://0.0.0.0/", None, "url_not_public"),
    ("http://240.0.0.1/", None, "url_not_public"),  # reserved
    ("http://[fd00::1]/hook", None, "url_not_public"),  # IPv6 unique local
    ("http://[fe80::1]/hook", None, "url_not_public"),  # IPv6 link-local
    ("http://[::ffff:10.0.0.1]/", None, "url_not_public"),  # IPv4-mapped
    ("http://[::ffff:93.184.216.34]/", None, "url_not_public"),  # mapped, even when public
    ("http://[64:ff9b::a00:1]/", None, "url_not_public"),  # NAT64 of 10.0.0.1
    ("http://hooks.example/", resolving_to("10.1.2.3"), "url_not_public"),
    ("http://hooks.example/", resolving_to("93.184.216.34", "192.168.0.10"), "url_not_public"),  # any one private
    ("http://hooks.example/", resolving_to("fd12:3456::1"), "url_not_public"),
    ("ftp://hooks.example/", PUBLIC, "url_scheme"),
    ("file:///etc/passwd", PUBLIC, "url_scheme"),
    ("http://hooks.example:22/", PUBLIC, "url_port"),
    ("http://user:pw@hooks.example/", PUBLIC, "url_credentials"),
    ("http:///nohost", PUBLIC, "url_invalid"),
    ("http://hooks.example:99999/", PUBLIC, "url_invalid"),
    ("http://hooks.example/", resolving_to(), "url_unresolvable"),
    # Nothing http.client would refuse to send (it raises, it does not send):
    # spaces and control characters anywhere, non-ASCII outside the host.
    ("http://hooks.example/a\x00b", PUBLIC, "url_invalid"),
    ("http://hoo\x00ks.example/", None, "url_invalid"),
    ("http://hooks.example/a b", PUBLIC, "url_invalid"),
    ("http://hooks.example/?q=\x7f", PUBLIC, "url_invalid"),
    ("http://hooks.example/caf\u00e9", PUBLIC, "url_invalid"),
])
def test_unsafe_urls_are_refused_with_a_reason(url, resolver, code):
    with pytest.raises(ssrf.UnsafeURLError) as refused:
        ssrf.check_url(url, resolver=resolver, allow_loopback=False)
    assert refused.value.code == code


# One address in each kind of range that is not a public unicast server,
# written out here (not read from ssrf's table), with the rule the refusal
# must name. From the IANA special-purpose registries (RFC 6890 and later),
# multicast, and the IPv6 forms that carry an IPv4 address.
NOT_PUBLIC = [
    ("0.1.2.3", "this network"),
    ("10.20.30.40", "private-use"),
    ("100.64.0.1", "shared address space (carrier-grade NAT)"),
    ("127.0.0.2", "loopback"),
    ("169.254.169.254", "link-local"),
    ("172.31.255.255", "private-use"),
    ("192.0.0.9", "IETF protocol assignments"),
    ("192.0.2.10", "documentation"),
    ("192.31.196.1", "AS112 DNS sink"),
    ("192.52.193.1", "AMT relay anycast"),
    ("192.88.99.1", "6to4 relay anycast"),
    ("192.168.0.1", "private-use"),
    ("192.175.48.1", "AS112 DNS sink"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.254", "benchmarking"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("224.0.0.251", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::a00:1", "reserved (outside IPv6 global unicast)"),  # IPv4-compatible 10.0.0.1, deprecated
    ("::ffff:93.184.216.34", "IPv4-mapped"),
    ("::ffff:0:a00:1", "IPv4-translated"),
    ("64:ff9b::a00:1", "private-use (in NAT64)"),  # 10.0.0.1
    ("64:ff9b::a9fe:a9fe", "link-local (in NAT64)"),  # 169.254.169.254
    ("64:ff9b::c000:20a", "documentation (in NAT64)"),  # 192.0.2.10
    ("64:ff9b:1::a00:1", "NAT64 local use"),
    ("100::1", "discard-only"),
    ("2001::a00:1", "Teredo"),
    ("2001:2::1", "benchmarking"),
    ("2001:10::1", "ORCHID"),
    ("2001:20::1", "ORCHIDv2"),
    ("2001:1ff::1", "IETF protocol assignments"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("2002:a00:1::1", "6to4"),  # 10.0.0.1
    ("2002:5db8:d822::1", "6to4"),  # public 93.184.216.34: 6to4 relays are gone (RFC 7526)
    ("5f00::1", "segment routing (SRv6)"),
    ("fc00::1", "unique-local"),
    ("fdff:ffff::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("febf::1", "link-local"),
    ("fec0::1", "site-local"),
    ("feff::1", "site-local"),
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("4000::1", "reserved (outside IPv6 global unicast)"),
    ("e000::1", "reserved (outside IPv6 global unicast)"),
]


@pytest.mark.parametrize(("address", "rule"), NOT_PUBLIC)
def test_an_address_that_is_no_public_unicast_server_is_refused_naming_the_rule_not_the_address(address, rule):
    for url, resolver, subject in [(f"http://{_literal(address)}/", None, "the URL names"),
                                   ("http://hooks.example/", resolving_to(address), "the name resolves to")]:
        with pytest.raises(ssrf.UnsafeURLError) as refused:
            ssrf.check_url(url, resolver=resolver, allow_loopback=False)
        assert refused.value.code == "url_not_public"
        assert refused.value.message == (f"Webhook addresses must be public: {subject} an address in a "
                                         f"special-purpose range ({rule}).")
        _assert_not_named(refused.value.message, ipaddress.ip_address(address))


def test_a_name_with_one_internal_address_among_public_ones_is_refused_without_naming_it():
    with pytest.raises(ssrf.UnsafeURLError) as refused:
        ssrf.check_url("http://hooks.example/", resolver=resolving_to("93.184.216.34", "2606:4700::1", "10.9.8.7"),
                       allow_loopback=False)
    assert refused.value.message == ("Webhook addresses must be public: the name resolves to an address in a "
                                     "special-purpose range (private-use).")


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111",
                                     "2a00:1450:4001:80b::200e", "64:ff9b::5db8:d822"])  # last: NAT64 of a public one
def test_a_public_unicast_address_passes(address):
    assert ssrf.check_url("http://hooks.example/", resolver=resolving_to(address), allow_loopback=False).address == (
        address)


def _literal(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _assert_not_named(message: str, address: ssrf.Address) -> None:
    """Neither the address nor, for one that carries an IPv4 address, that one."""
    forms = {str(address), address.exploded}
    if isinstance(address, ipaddress.IPv6Address):
        forms |= {str(v4) for v4 in (address.ipv4_mapped, address.sixtofour) if v4 is not None}
    assert not any(form in message for form in forms), message


def _in(network: ssrf.Network) -> st.SearchStrategy[ssrf.Address]:
    first = int(network.network_address)
    return st.integers(first, first + network.num_addresses - 1).map(
        lambda n: ipaddress.ip_address(n) if network.version == 4 else ipaddress.IPv6Address(n))


@given(st.sampled_from(ssrf.DENIED).flatmap(lambda entry: _in(entry[0])))
def test_every_address_in_a_denied_network_is_refused_without_being_named(address):
    with pytest.raises(ssrf.UnsafeURLError) as refused:
        ssrf.check_url("http://hooks.example/", resolver=resolving_to(str(address)), allow_loopback=False)
    assert refused.value.code == "url_not_public"
    _assert_not_named(refused.value.message, address)


# Addresses from all of both spaces, and more often from IPv6 global unicast
# (2000::/3), where the special ranges are small and few.
ANY_ADDRESS = st.one_of(_in(ipaddress.ip_network("0.0.0.0/0")), _in(ipaddress.ip_network("::/0")),
                        _in(ipaddress.ip_network("2000::/3")))


@given(ANY_ADDRESS)
def test_whatever_passes_is_global_to_python_too_and_in_no_denied_network(address):
    """The table adds to what ipaddress refuses; it never lets through what
    ipaddress calls not global."""
    try:
        ssrf.check_url("http://hooks.example/", resolver=resolving_to(str(address)), allow_loopback=False)
    except ssrf.UnsafeURLError as refused:
        assert refused.code == "url_not_public"
        _assert_not_named(refused.message, address)
    else:
        assert address.is_global and not address.is_multicast
        assert not any(address in network for network, _ in ssrf.DENIED if network.version == address.version)


def test_a_public_https_url_is_pinned_to_the_address_that_was_checked():
    target = ssrf.check_url("https://Hooks.Example/in?x=1", resolver=PUBLIC, allow_loopback=False)
    assert (target.scheme, target.host, target.port, target.path, target.address) == (
        "https", "Hooks.Example".lower(), 443, "/in?x=1", "93.184.216.34")


def test_loopback_on_any_port_only_when_explicitly_allowed():
    assert ssrf.check_url("http://127.0.0.1:45678/h", allow_loopback=True).address == "127.0.0.1"
    with pytest.raises(ssrf.UnsafeURLError):
        ssrf.check_url("http://127.0.0.1:45678/h", allow_loopback=False)
    # Allowing loopback opens nothing else.
    with pytest.raises(ssrf.UnsafeURLError):
        ssrf.check_url("http://10.0.0.1/", allow_loopback=True)


def test_localhost_resolved_by_the_system_is_refused_when_loopback_is_not_allowed():
    with pytest.raises(ssrf.UnsafeURLError) as refused:
        ssrf.check_url("http://localhost:8080/hook", allow_loopback=False)
    assert refused.value.code == "url_not_public"


@pytest.mark.django_db
@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080/hook", "http://10.0.0.1/hook", "http://169.254.169.254/latest/meta-data/",
    "http://[fd00::1]/hook", "http://localhost:8080/hook",
])
def test_registering_an_internal_url_is_a_400_and_nothing_is_stored(url, make_user, api_client_for, settings):
    settings.NOTIFY_WEBHOOK_ALLOW_LOOPBACK = False
    resp = api_client_for(make_user("mallory")).post("/api/webhooks/", {"url": url, "events": ["job.failed"]},
                                                     format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "url_not_public"
    from notify.models import Endpoint
    assert not Endpoint.objects.exists()


def test_production_settings_refuse_to_start_with_loopback_allowed():
    import os
    import subprocess
    import sys

    env = {**os.environ, "FAIRLANE_ENV": "production", "DJANGO_SECRET_KEY": "x" * 50,
           "DJANGO_ALLOWED_HOSTS": "fairlane.example", "FAIRLANE_WEBHOOK_ALLOW_LOOPBACK": "1"}
    run = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                         text=True, cwd=os.getcwd())
    assert run.returncode != 0
    assert "ImproperlyConfigured" in run.stderr and "FAIRLANE_WEBHOOK_ALLOW_LOOPBACK" in run.stderr
    env["FAIRLANE_WEBHOOK_ALLOW_LOOPBACK"] = "0"
    assert subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                          capture_output=True).returncode == 0
