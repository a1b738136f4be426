"""Local stand-ins for what a worker host asks for scale-in protection:

- `FakeEcsAgent` speaks the ECS container agent's task-protection API
  (`PUT/GET $ECS_AGENT_URI/task-protection/v1/state`) as the agent does:
  the request must be `{"ProtectionEnabled": bool, "ExpiresInMinutes": 1..2880}`
  and nothing else (unknown fields, wrong types or a missing
  ProtectionEnabled: 400 `{"error": {"Code": "InvalidParameterException",
  "Message"}}`); a success is 200 `{"protection": {"ExpirationDate",
  "ProtectionEnabled", "TaskArn"}}`; ECS refusing is 200 `{"failure":
  {"Arn", "Detail", "Reason"}}` (amazon-ecs-agent, agent/handlers/
  agentapi/taskprotection/v1).
- `FakeKubernetesApi` answers the one call the pod makes: `PATCH
  /api/v1/namespaces/<ns>/pods/<pod>` as a JSON merge patch with the pod's
  bearer token, applying it to the pod's annotations (null removes one);
  anything else is a 4xx `Status` as the API server answers.

Both record every request in order, and can hold the answer to the next
protect request until the test lets it go (`hold_next_protect`), which is
how a test puts a shutdown exactly between a protect request and its
answer.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    at: float  # time.time() when it arrived
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0


@dataclass
class _Base:
    address: str = "127.0.0.1"
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()  # the predicates of wait_for read under it
        self.arrived = threading.Condition(self.lock)
        self._hold: threading.Event | None = None
        self.held = threading.Event()  # a protect request is being held
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                call = Call(time.time(), self.command, self.path, dict(self.headers), body)
                with server.arrived:
                    server.calls.append(call)
                    server.arrived.notify_all()
                    hold = server._hold if server._is_protect(call) else None
                    if hold is not None:
                        server._hold = None
                if hold is not None:
                    server.held.set()
                    hold.wait(120)
                status, reply = server.answer(call)
                call.status = status
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_PATCH = do_POST = _handle

        self.httpd = ThreadingHTTPServer((self.address, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self._hold is not None:
            self._hold.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def hold_next_protect(self) -> threading.Event:
        """The next protect request's answer waits until the returned event is set."""
        release = threading.Event()
        with self.lock:
            self._hold = release
        self.held.clear()
        return release

    def protections(self) -> list[bool]:
        """What each request asked for, in order (True: protect)."""
        with self.lock:
            return [self._wanted(c) for c in self.calls if self._wanted(c) is not None]

    def wait_for(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        with self.arrived:
            while not (value := predicate()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}; calls: "
                                         f"{[(c.method, c.body, c.status) for c in self.calls]}")
                self.arrived.wait(left)
            return value

    def _is_protect(self, call: Call) -> bool:
        return self._wanted(call) is True

    def _wanted(self, call: Call) -> bool | None:
        raise NotImplementedError

    def answer(self, call: Call) -> tuple[int, dict]:
        raise NotImplementedError


TASK_ARN = "arn:aws:ecs:eu-west-1:123456789012:task/fairlane/0123456789abcdef"


@dataclass
class FakeEcsAgent(_Base):
    endpoint_id: str = "agent-endpoint-1"
    protected: bool = False
    expires_at: float | None = None
    refuse_with: str | None = None  # the next answers are failures with this reason

    @property
    def uri(self) -> str:
        """What ECS puts in the container's ECS_AGENT_URI."""
        return f"http://{self.address}:{self.port}/api/{self.endpoint_id}"

    def _wanted(self, call: Call) -> bool | None:
        if call.method == "PUT" and isinstance(call.body, dict) and isinstance(call.body.get("ProtectionEnabled"),
                                                                              bool):
            return call.body["ProtectionEnabled"]
        return None

    def _error(self, status: int, code: str, message: str) -> tuple[int, dict]:
        return status, {"error": {"Arn": TASK_ARN, "Code": code, "Message": message}}

    def answer(self, call: Call) -> tuple[int, dict]:
        if call.path != f"/api/{self.endpoint_id}/task-protection/v1/state":
            return self._error(404, "ResourceNotFoundException", "Invalid request: no task was found")
        if call.method == "GET":
            return 200, {"protection": self._state()}
        if call.method != "PUT":
            return self._error(405, "InvalidParameterException", "method not allowed")
        body = call.body
        if not isinstance(body, dict) or set(body) - {"ProtectionEnabled", "ExpiresInMinutes"} \
                or ("ExpiresInMinutes" in body and type(body["ExpiresInMinutes"]) is not int):
            return self._error(400, "InvalidParameterException", "UpdateTaskProtection: failed to decode request")
        if not isinstance(body.get("ProtectionEnabled"), bool):
            return self._error(400, "InvalidParameterException",
                               "Invalid request: does not contain 'ProtectionEnabled' field")
        minutes = body.get("ExpiresInMinutes", 120)
        if not 1 <= minutes <= 2880:
            return self._error(400, "InvalidParameterException", "expiresInMinutes must be within 1 and 2880")
        if self.refuse_with:
            return 200, {"failure": {"Arn": TASK_ARN, "Detail": None, "Reason": self.refuse_with}}
        self.protected = body["ProtectionEnabled"]
        self.expires_at = time.time() + minutes * 60 if self.protected else None
        return 200, {"protection": self._state()}

    def _state(self) -> dict:
        expires = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.expires_at))
                   if self.expires_at else None)
        return {"ExpirationDate": expires, "ProtectionEnabled": self.protected, "TaskArn": TASK_ARN}


ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


@dataclass
class FakeKubernetesApi(_Base):
    namespace: str = "media"
    pod: str = "fairlane-worker-7d9f-abcde"
    token: str = "service-account-token"
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def _wanted(self, call: Call) -> bool | None:
        if call.method != "PATCH" or not isinstance(call.body, dict):
            return None
        value = (call.body.get("metadata") or {}).get("annotations", {}).get(ANNOTATION, "absent")
        return None if value == "absent" else value is not None

    def _status(self, code: int, reason: str, message: str) -> tuple[int, dict]:
        return code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code}

    def answer(self, call: Call) -> tuple[int, dict]:
        if call.headers.get("Authorization") != f"Bearer {self.token}":
            return self._status(401, "Unauthorized", "Unauthorized")
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.pod}"
        if call.path != path:
            return self._status(404, "NotFound", f'pods "{call.path.rsplit("/", 1)[-1]}" not found')
        if call.method != "PATCH":
            return self._status(405, "MethodNotAllowed", "the server does not allow this method")
        if call.headers.get("Content-Type") != "application/merge-patch+json":
            return self._status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
        patch = (call.body or {}).get("metadata", {}).get("annotations", {}) if isinstance(call.body, dict) else {}
        for name, value in patch.items():
            if value is None:
                self.annotations.pop(name, None)
            elif not isinstance(value, str):
                return self._status(400, "BadRequest", "annotations must be strings")
            else:
                self.annotations[name] = value
        return 200, {"kind": "Pod", "apiVersion": "v1",
                     "metadata": {"name": self.pod, "namespace": self.namespace, "annotations": self.annotations}}
