"""dispatcher/protection.py: when a worker host asks to be protected from
scale-in, and what each provider sends, against local stand-ins of the ECS
agent and the Kubernetes API server (tests/protection_servers.py)."""
from __future__ import annotations

import threading

import pytest

from dispatcher import EcsAgentProtection, HostProtection, KubernetesPodProtection, NoProtection, ProtectionError
from tests.protection_servers import ANNOTATION, FakeEcsAgent, FakeKubernetesApi


class Recorder:
    """A provider that records what it was asked; `gate`, when set, blocks
    the sending of a protect request until the test lets it go."""

    name, renew_s = "recorder", None

    def __init__(self) -> None:
        self.sent: list[bool] = []
        self.gate: threading.Event | None = None
        self.sending = threading.Event()

    def request(self, protected: bool):
        if protected and self.gate is not None:
            self.sending.set()
            self.gate.wait(30)
        self.sent.append(protected)
        return lambda: None


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def protection(idle_s: float = 60.0, provider=None):
    clock, work = Clock(), {"busy": False}
    provider = provider or Recorder()
    return HostProtection(provider, busy=lambda: work["busy"], idle_s=idle_s, clock=clock), provider, clock, work


# (seconds since start, busy at that moment) -> what the host asks for, if anything
LIFE = [
    (0, False, True),      # the worker can take work: protected at once
    (30, False, None),     # idle, but within idle_s of its start
    (61, False, False),    # idle for idle_s: unprotected
    (70, True, True),      # a job fetched: protected
    (71, False, None),     # between two jobs: stays protected (no per-job toggle)
    (72, True, None),
    (131, False, None),    # 59 s after the last job: still protected
    (133, False, False),   # 61 s: unprotected
    (500, False, None),    # idle: nothing more to say
]


def test_a_host_is_protected_while_busy_or_busy_within_idle_s_and_unprotected_after():
    host, provider, clock, work = protection()
    for at, busy, asked in LIFE:
        clock.t, work["busy"] = 1000.0 + at, busy
        before = len(provider.sent)
        host.step()
        assert provider.sent[before:] == ([] if asked is None else [asked]), (at, busy)


def test_after_shutdown_it_unprotects_and_never_protects_again_however_busy():
    host, provider, clock, work = protection()
    host.step()
    work["busy"] = True
    host.shutdown()
    for _ in range(3):
        clock.t += 1
        host.step()
    assert provider.sent == [True, False]


def test_a_protection_that_expires_is_renewed_while_busy():
    provider = Recorder()
    provider.renew_s = 900.0
    host, _, clock, work = protection(provider=provider)
    work["busy"] = True
    for _ in range(4):
        host.step()
        clock.t += 600
    assert provider.sent == [True, True]  # at 0 and 1200 (900 s after the first); not at 600 or 1800


def test_a_shutdown_crossing_a_protect_request_waits_for_its_sending_then_ends_unprotected():
    """The race: the host decided to protect (a job was fetched) and SIGTERM
    arrives while the request is being sent. shutdown() returns only once
    that request is out; after it, no protect request leaves, and the last
    word is an unprotect."""
    host, provider, clock, work = protection()
    provider.gate = threading.Event()
    work["busy"] = True
    stepping = threading.Thread(target=host.step)
    stepping.start()
    assert provider.sending.wait(10)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (host.shutdown(), stopped.set()))
    stopper.start()
    assert not stopped.wait(0.2)  # held at the gate while the request is being sent
    provider.gate.set()
    stepping.join(10)
    stopper.join(10)
    assert stopped.is_set() and provider.sent == [True]
    host.step()
    host.step()
    assert provider.sent == [True, False]


def test_a_shutdown_before_the_decision_sends_no_protect_request_at_all():
    host, provider, clock, work = protection()
    work["busy"] = True
    host.shutdown()
    host.step()
    assert provider.sent == [False]


def test_the_thread_unprotects_at_shutdown_and_ends():
    host, provider, _, work = protection()
    host.start()
    host.shutdown()
    host.join(10)
    assert provider.sent[-1] is False and not host._thread.is_alive()


def test_no_protection_sends_nothing():
    assert NoProtection().request(True)() is None


# --- the ECS agent's task-protection endpoint ---------------------------------------------------------


@pytest.fixture
def agent():
    server = FakeEcsAgent()
    yield server
    server.close()


def test_ecs_protect_and_unprotect_are_the_agent_s_put_requests(agent):
    ecs = EcsAgentProtection(agent.uri, expires_minutes=30)
    ecs.request(True)()
    assert agent.protected
    ecs.request(False)()
    assert not agent.protected
    [on, off] = agent.calls
    assert (on.method, on.path, on.headers["Content-Type"]) == ("PUT", "/api/agent-endpoint-1/task-protection/v1/state",
                                                               "application/json")
    assert on.body == {"ProtectionEnabled": True, "ExpiresInMinutes": 30}
    assert off.body == {"ProtectionEnabled": False}
    assert ecs.renew_s == 900


def test_ecs_refusing_is_an_error_though_the_agent_answers_200(agent):
    agent.refuse_with = "TASK_NOT_VALID"
    with pytest.raises(ProtectionError, match="TASK_NOT_VALID"):
        EcsAgentProtection(agent.uri).request(True)()
    assert agent.calls[0].status == 200 and not agent.protected


def test_an_agent_error_is_an_error(agent):
    with pytest.raises(ProtectionError, match="ResourceNotFoundException"):
        EcsAgentProtection(agent.uri.replace(agent.endpoint_id, "unknown")).request(True)()


def test_an_unreachable_agent_is_an_error(agent):
    uri = agent.uri
    agent.close()
    with pytest.raises(ProtectionError):
        EcsAgentProtection(uri, timeout_s=2).request(True)()


@pytest.mark.parametrize("minutes", [0, 2881])
def test_ecs_expiry_out_of_the_agent_s_bounds_is_refused_at_start(minutes):
    with pytest.raises(ValueError):
        EcsAgentProtection("http://127.0.0.1:1/api/x", expires_minutes=minutes)


def test_a_host_protection_against_the_agent_recovers_from_a_refusal(agent):
    clock, work = Clock(), {"busy": True}
    host = HostProtection(EcsAgentProtection(agent.uri), busy=lambda: work["busy"], idle_s=60, clock=clock)
    agent.refuse_with = "TASK_NOT_VALID"
    with pytest.raises(ProtectionError):
        host.step()
    assert host.protected is None
    agent.refuse_with = None
    host.step()  # asks again
    assert host.protected is True and agent.protected


# --- the Kubernetes pod PATCH --------------------------------------------------------------------------


@pytest.fixture
def api(tmp_path):
    server = FakeKubernetesApi()
    (tmp_path / "token").write_text(server.token + "\n")
    server.token_file = str(tmp_path / "token")
    yield server
    server.close()


def kubernetes(api, **overrides) -> KubernetesPodProtection:
    fields = {"pod": api.pod, "namespace": api.namespace, "token_file": api.token_file, "ca_file": "", **overrides}
    return KubernetesPodProtection(api.url, **fields)


def test_kubernetes_protection_is_the_pod_deletion_cost_patched_through_the_api_server(api):
    k8s = kubernetes(api)
    k8s.request(True)()
    assert api.annotations == {ANNOTATION: "1000000"}
    k8s.request(False)()
    assert api.annotations == {}  # removed: the default cost, 0, of every idle pod
    on = api.calls[0]
    assert (on.method, on.path) == ("PATCH", f"/api/v1/namespaces/{api.namespace}/pods/{api.pod}")
    assert on.headers["Content-Type"] == "application/merge-patch+json"
    assert on.headers["Authorization"] == f"Bearer {api.token}"
    assert api.calls[1].body == {"metadata": {"annotations": {ANNOTATION: None}}}


def test_the_token_is_read_again_for_every_call(api, tmp_path):
    k8s = kubernetes(api)
    k8s.request(True)()
    api.token = "rotated"
    (tmp_path / "token").write_text("rotated")
    k8s.request(False)()
    assert [c.status for c in api.calls] == [200, 200]


@pytest.mark.parametrize("overrides, reason", [
    ({"pod": "someone-else"}, "NotFound"),
    ({"token_file": "/nonexistent/token"}, "no service account token"),
])
def test_kubernetes_refusals_are_errors(api, overrides, reason):
    with pytest.raises(ProtectionError, match=reason):
        kubernetes(api, **overrides).request(True)()


def test_a_wrong_token_is_an_error(api, tmp_path):
    (tmp_path / "token").write_text("stale")
    with pytest.raises(ProtectionError, match="Unauthorized"):
        kubernetes(api).request(True)()
