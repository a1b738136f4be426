"""Where webhooks may go: the URL rules as pure logic (an injected resolver
stands in for DNS), and registration through the API with the real resolver."""
from __future__ import annotations

import pytest

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
