"""Scale-in protection of a worker host: an autoscaler that removes a host
must not pick a busy one.

When an autoscaler scales in it picks a host; if it picks a busy one, SIGTERM
and the grace period turn into handed-back work and lost minutes. ECS has
task scale-in protection (the agent's `PUT $ECS_AGENT_URI/task-protection/
v1/state`: a protected task is not stopped by service auto scaling or
deployments), Kubernetes the pod-deletion cost (a ReplicaSet scaling down
deletes the pods of lowest `controller.kubernetes.io/pod-deletion-cost`
first: a preference, not a guarantee, see docs/scale-out.md).

The rule, kept by one thread per worker process (`HostProtection`):

- protected from the moment the worker can take work (its start counts as
  busy), and while it has fetched or running work;
- unprotected only once it has been idle for `idle_s`
  (FAIRLANE_IDLE_UNPROTECT_S). Toggling around each job would leave a gap
  between two jobs in which the host is stopped as it takes the next;
- once a shutdown has begun (SIGTERM), never protected again: the host is
  leaving, and a protection asked for now would only hold a deploy or keep
  the orchestrator waiting. The last word is an unprotect.

The race at shutdown: the decision to protect and the SIGTERM can cross
(a job fetched as the host is picked for removal). `shutdown()` takes the
same gate the thread holds while it sends a protect request (not while it
waits for the answer), so a protect request is either on the wire before
`shutdown()` returns, and then followed by an unprotect, or never sent.

Providers speak two phases, `request(protected)` (connect and send) and the
callable it returns (read and check the answer), so that the gate covers
the sending alone. No third-party client: the ECS agent is a local HTTP
endpoint, and the Kubernetes API call is one PATCH with the pod's service
account token.
"""
from __future__ import annotations

import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlsplit

log = logging.getLogger(__name__)

# What a provider's request returns: wait for the answer and raise
# ProtectionError when it was not done.
Answer = Callable[[], None]


class ProtectionError(Exception):
    """The orchestrator did not set the protection (refused, unreachable)."""


class ProtectionProvider(Protocol):
    """Sets this host's scale-in protection."""

    name: str
    # Seconds after which a protection must be asked for again (it expires
    # by itself), or None when it lasts until changed.
    renew_s: float | None

    def request(self, protected: bool) -> Answer:
        """Send the request (connect and send only; raise ProtectionError
        when it cannot be sent) and return the wait for its answer."""


class NoProtection:
    """The default: no orchestrator to tell (make run, plain hosts)."""

    name = "none"
    renew_s = None

    def request(self, protected: bool) -> Answer:
        return lambda: None


def _send(url: str, method: str, path: str, body: dict, headers: dict[str, str], *, timeout_s: float,
          context: ssl.SSLContext | None = None) -> Callable[[], tuple[int, bytes]]:
    """Connect and send one request; return the wait for (status, body)."""
    parts = urlsplit(url)
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    kwargs = {"context": context} if parts.scheme == "https" else {}
    conn = conn_class(parts.hostname, parts.port, timeout=timeout_s, **kwargs)
    data = json.dumps(body).encode()
    try:
        conn.request(method, parts.path.rstrip("/") + path, body=data,
                     headers={**headers, "Content-Length": str(len(data))})
    except OSError as exc:
        conn.close()
        raise ProtectionError(f"{method} {parts.hostname}:{parts.port}: {exc}") from exc

    def answer() -> tuple[int, bytes]:
        try:
            resp = conn.getresponse()
            return resp.status, resp.read(64 * 1024)
        except (OSError, http.client.HTTPException) as exc:
            raise ProtectionError(f"{method} {parts.hostname}:{parts.port}: no answer: {exc}") from exc
        finally:
            conn.close()

    return answer


class EcsAgentProtection:
    """ECS task scale-in protection through the container agent:
    `PUT $ECS_AGENT_URI/task-protection/v1/state` with `{"ProtectionEnabled":
    true, "ExpiresInMinutes": n}` or `{"ProtectionEnabled": false}`. The
    agent answers 200 with `{"protection": {"ProtectionEnabled", "TaskArn",
    "ExpirationDate"}}`, or 200 with `{"failure": {"Arn", "Reason",
    "Detail"}}` (ECS refused: not set), or 4xx/5xx with `{"error": {"Code",
    "Message"}}`."""

    name = "ecs"

    def __init__(self, agent_uri: str, *, expires_minutes: int = 30, timeout_s: float = 5.0) -> None:
        if not agent_uri:
            raise ValueError("ECS protection needs ECS_AGENT_URI (set by ECS in every task)")
        if not 1 <= expires_minutes <= 2880:  # the agent's bounds
            raise ValueError("ExpiresInMinutes must be within 1 and 2880")
        self.agent_uri, self.expires_minutes, self.timeout_s = agent_uri, expires_minutes, timeout_s
        # Renewed at half its life: a renewal that fails once still has time.
        self.renew_s = expires_minutes * 60 / 2

    def request(self, protected: bool) -> Answer:
        body: dict = {"ProtectionEnabled": protected}
        if protected:
            body["ExpiresInMinutes"] = self.expires_minutes
        wait = _send(self.agent_uri, "PUT", "/task-protection/v1/state", body,
                     {"Content-Type": "application/json"}, timeout_s=self.timeout_s)

        def answer() -> None:
            status, raw = wait()
            try:
                reply = json.loads(raw or b"{}")
            except ValueError:
                reply = {}
            if not isinstance(reply, dict):
                reply = {}
            if reply.get("error") or status >= 300:
                error = reply.get("error") or {}
                raise ProtectionError(f"ECS agent {status}: {error.get('Code', '')} {error.get('Message', '')}".strip())
            if reply.get("failure"):
                failure = reply["failure"]
                raise ProtectionError(f"ECS refused: {failure.get('Reason')} {failure.get('Detail') or ''}".strip())
            protection = reply.get("protection") or {}
            if protection.get("ProtectionEnabled") is not protected:
                raise ProtectionError(f"ECS agent answered {raw[:200]!r}")

        return answer


# A busy pod's deletion cost: above the default 0 of every idle pod, so a
# ReplicaSet that scales down deletes idle pods first.
PROTECTED_DELETION_COST = "1000000"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


class KubernetesPodProtection:
    """The pod's `controller.kubernetes.io/pod-deletion-cost`, through the
    API server: `PATCH /api/v1/namespaces/<ns>/pods/<pod>` as a JSON merge
    patch, the annotation set to PROTECTED_DELETION_COST or removed (null).
    The pod's service account needs `patch` on `pods` (deploy/kubernetes)."""

    name = "kubernetes"
    renew_s = None

    def __init__(self, api_url: str, *, pod: str, namespace: str, token_file: str, ca_file: str,
                 timeout_s: float = 5.0) -> None:
        if not api_url or not pod or not namespace:
            raise ValueError("Kubernetes protection needs the API server's URL, the pod's name and its namespace")
        self.api_url, self.pod, self.namespace = api_url, pod, namespace
        self.token_file, self.ca_file, self.timeout_s = Path(token_file), ca_file, timeout_s

    def request(self, protected: bool) -> Answer:
        try:
            token = self.token_file.read_text().strip()  # re-read: projected tokens rotate
        except OSError as exc:
            raise ProtectionError(f"no service account token: {exc}") from exc
        context = ssl.create_default_context(cafile=self.ca_file) if self.api_url.startswith("https") else None
        path = f"/api/v1/namespaces/{quote(self.namespace, safe='')}/pods/{quote(self.pod, safe='')}"
        body = {"metadata": {"annotations": {DELETION_COST_ANNOTATION: PROTECTED_DELETION_COST if protected
                                             else None}}}
        wait = _send(self.api_url, "PATCH", path, body,
                     {"Content-Type": "application/merge-patch+json", "Accept": "application/json",
                      "Authorization": f"Bearer {token}"}, timeout_s=self.timeout_s, context=context)

        def answer() -> None:
            status, raw = wait()
            if status >= 300:
                try:
                    reply = json.loads(raw)
                except ValueError:
                    reply = {}
                reason = reply.get("reason", "") if isinstance(reply, dict) else ""
                message = reply.get("message", "") if isinstance(reply, dict) else ""
                raise ProtectionError(f"API server {status}: {reason} {message}".strip())

        return answer


class HostProtection:
    """Keeps the host protected while `busy()` or busy within `idle_s`,
    unprotected otherwise, and never protected again after `shutdown()`.
    `step()` is one decision (tests call it with their own clock); `start()`
    runs it every TICK_S in a daemon thread, and at once on `wake()`."""

    # A decision at least this often: an idle host is unprotected at most
    # this long after `idle_s`; a fetched job wakes the thread at once.
    TICK_S = 1.0

    def __init__(self, provider: ProtectionProvider, *, busy: Callable[[], bool], idle_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.provider, self.busy, self.idle_s, self.clock = provider, busy, idle_s, clock
        self.protected: bool | None = None  # as last confirmed; None: not known
        self._last_busy = clock()  # the worker can take work from now: that counts as busy
        self._asked_at = -float("inf")
        self._gate = threading.Lock()  # held while a protect request is being sent
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fair-protection", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Decide now (a job was fetched)."""
        self._wake.set()

    def shutdown(self) -> None:
        """A shutdown began: no protect request is sent after this returns.
        Safe in a signal handler: it waits at most for a request being sent
        (not for its answer), and the thread does the unprotect."""
        with self._gate:
            self._stopping.set()
        self._wake.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                self.step()
            except ProtectionError as exc:  # unreachable or refused: the next tick asks again
                log.warning("scale-in protection (%s): %s", self.provider.name, exc)
            except Exception:
                log.exception("scale-in protection (%s) failed", self.provider.name)
            if self._stopping.is_set() and self.protected is False:
                return
            self._wake.wait(self.TICK_S)

    def want(self) -> bool:
        now = self.clock()
        if self.busy():
            self._last_busy = now
        return not self._stopping.is_set() and now - self._last_busy < self.idle_s

    def step(self) -> None:
        """One decision: protect, renew, unprotect or nothing."""
        if self.want():
            renew = self.provider.renew_s is not None and self.clock() - self._asked_at >= self.provider.renew_s
            if self.protected is not True or renew:
                self._protect()
        elif self.protected is not False:
            self.provider.request(False)()
            self.protected = False
            log.info("scale-in protection (%s) off: %s", self.provider.name,
                     "shutting down" if self._stopping.is_set() else f"idle for {self.idle_s:g} s")

    def _protect(self) -> None:
        with self._gate:
            if self._stopping.is_set():
                return
            answer = self.provider.request(True)
        self.protected = None  # on the wire: not known until answered (and unprotected if it fails)
        asked_at = self.clock()
        answer()
        self.protected, self._asked_at = True, asked_at
        log.info("scale-in protection (%s) on", self.provider.name)


def provider_from_settings(settings) -> ProtectionProvider:
    """The provider FAIRLANE_SCALE_PROTECTION names, configured from settings."""
    kind = settings.FAIRLANE_SCALE_PROTECTION
    if kind == "ecs":
        return EcsAgentProtection(settings.ECS_AGENT_URI, expires_minutes=settings.FAIRLANE_ECS_PROTECTION_MINUTES)
    if kind == "kubernetes":
        try:
            namespace = Path(settings.FAIRLANE_K8S_NAMESPACE_FILE).read_text().strip()
        except OSError:
            namespace = ""
        return KubernetesPodProtection(settings.FAIRLANE_K8S_API_URL, pod=settings.FAIRLANE_POD_NAME,
                                       namespace=namespace, token_file=settings.FAIRLANE_K8S_TOKEN_FILE,
                                       ca_file=settings.FAIRLANE_K8S_CA_FILE)
    return NoProtection()
