"""The web's front door (project/web_gate.py) as logic: fair turns between
clients, held refusals, bounds per client, the body read before a thread.
The inner app here is a stand-in the test drives; tests/project/
test_web_server.py runs the real one under the Procfile's server."""
from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from project.web_gate import FairSlots, WebGate


def run(coroutine):
    """The scenario on a loop of its own, in a thread of its own (the
    browser tests leave Playwright's loop running in the main thread)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, asyncio.wait_for(coroutine, 30)).result()


async def settle() -> None:
    """Lets every task that can run, run (the loop is ours alone)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_freed_place_goes_to_the_next_client_in_turn_not_to_the_oldest_request():
    async def scenario() -> list[str]:
        slots = FairSlots(1, per_client=1, waiting_most=10)
        order: list[str] = []

        async def request(name: str, client: tuple) -> None:
            await slots.enter(client)
            order.append(name)

        assert await slots.enter(("heavy",))  # the heavy client's first request holds the place
        tasks = [asyncio.create_task(request(f"heavy-{i}", ("heavy",))) for i in range(1, 4)]
        await settle()
        tasks.append(asyncio.create_task(request("light", ("light",))))  # comes after all of them
        await settle()
        for holder in ("heavy", "heavy", "light", "heavy"):
            slots.leave((holder,))
            await settle()
        await asyncio.gather(*tasks)
        slots.leave(("heavy",))
        assert slots.free == 1 and not slots._turns and not slots._waiting and not slots._holding
        return order

    assert run(scenario()) == ["heavy-1", "light", "heavy-2", "heavy-3"]


def test_one_client_holds_at_most_its_bound_and_a_place_stays_free_for_another():
    async def scenario() -> None:
        slots = FairSlots(4, per_client=2, waiting_most=10)
        assert await slots.enter(("heavy",)) and await slots.enter(("heavy",))
        third = asyncio.create_task(slots.enter(("heavy",)))
        await settle()
        assert not third.done() and slots.free == 2  # two places free, none of them for the heavy client
        assert await slots.enter(("light",))  # at once
        slots.leave(("light",))
        await settle()
        assert not third.done()
        slots.leave(("heavy",))  # under its bound again: its next request goes in
        await settle()
        assert third.result() is True and slots.holding(("heavy",)) == 2 and slots.free == 2

    run(scenario())


def test_a_client_with_its_most_requests_waiting_is_answered_no_and_others_still_wait():
    async def scenario() -> None:
        slots = FairSlots(1, per_client=1, waiting_most=2)
        assert await slots.enter(("a",))
        waiting = [asyncio.create_task(slots.enter(("b",))) for _ in range(2)]
        await settle()
        assert await slots.enter(("b",)) is False  # a third waits nowhere
        other = asyncio.create_task(slots.enter(("c",)))
        await settle()
        assert slots.waiting(("b",)) == 2 and slots.waiting(("c",)) == 1
        for holder in ("a", "b", "c"):
            slots.leave((holder,))
            await settle()
        assert all(task.result() for task in [*waiting, other])

    run(scenario())


def test_a_request_that_gives_up_waiting_leaves_no_trace_and_a_place_it_was_given_goes_on():
    async def scenario() -> None:
        slots = FairSlots(1, per_client=1, waiting_most=5)
        assert await slots.enter(("a",))
        gone = asyncio.create_task(slots.enter(("b",)))
        await settle()
        gone.cancel()
        await settle()
        assert slots.waiting(("b",)) == 0 and not slots._turns
        # Given the place and canceled before it ran: the place goes to the next in turn.
        given = asyncio.create_task(slots.enter(("c",)))
        after = asyncio.create_task(slots.enter(("d",)))
        await settle()
        slots.leave(("a",))  # to c, whose task has not run yet
        given.cancel()
        await settle()
        assert after.result() is True and slots.free == 0 and slots.holding(("d",)) == 1
        slots.leave(("d",))
        assert slots.free == 1 and not slots._holding

    run(scenario())


def test_a_wait_canceled_just_before_its_turn_passes_the_place_to_the_next():
    async def scenario() -> None:
        slots = FairSlots(1, per_client=1, waiting_most=5)
        assert await slots.enter(("a",))
        gone = asyncio.create_task(slots.enter(("b",)))
        nxt = asyncio.create_task(slots.enter(("c",)))
        await settle()
        gone.cancel()  # its wait is canceled; its task has not run since
        slots.leave(("a",))
        await settle()
        assert gone.cancelled() and nxt.result() is True
        assert slots.holding(("c",)) == 1 and slots.waiting(("b",)) == 0 and list(slots._turns) == []

    run(scenario())


class Inner:
    """The app behind the gate: records what reached it and answers 200
    with the body it read, once `release` is set."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, scope, receive, send) -> None:
        self.seen.append(scope["path"])
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def scope(path: str = "/api/batches/", token: str = "t1", method: str = "GET") -> dict:
    return {"type": "http", "method": method, "path": path, "query_string": b"", "client": ("10.0.0.1", 5000),
            "headers": [(b"authorization", f"Token {token}".encode())] if token else []}


async def call(gate: WebGate, request: dict, chunks: list[bytes] = (b"",)) -> tuple[int, dict, bytes]:
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    answer: dict = {"status": 0, "headers": {}, "body": b""}

    async def receive() -> dict:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            answer["body"] += message.get("body", b"")

    await gate(request, receive, send)
    return answer["status"], answer["headers"], answer["body"]


class Refusals:
    """uploads.throttling.known_refusal's stand-in: credentials refused
    until a time on the loop's clock."""

    def __init__(self) -> None:
        self.until: dict[tuple, float] = {}
        self.asked: list[tuple] = []

    def __call__(self, credentials, method, path):
        self.asked.append((credentials, method, path))
        left = self.until.get(credentials, 0) - asyncio.get_running_loop().time()
        if left <= 0:
            return None
        return left, lambda retry_after: {"error": {"code": "throttled", "retry_after": retry_after}}


def gate_for(inner: Inner, refusals: Refusals, users: dict | None = None, **overrides) -> WebGate:
    options = dict(slots=1, slots_per_client=1, refused=refusals, user_of=(users or {}).get,
                   session_cookie="sessionid", hold_s=0.2, held_per_client=2, held_most=10, waiting_per_client=5)
    return WebGate(inner, **{**options, **overrides})


def clients_entering(gate: WebGate) -> list:
    """The client of each request that asks the gate's slots for a turn, in order."""
    seen: list = []
    enter = gate.slots.enter

    async def spy(who):
        seen.append(who)
        return await enter(who)

    gate.slots.enter = spy
    return seen


def test_a_known_refusal_is_held_on_a_timer_then_answered_429_without_reaching_django():
    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        gate = gate_for(inner, refusals)
        loop = asyncio.get_running_loop()
        refusals.until[("Token t1", "")] = loop.time() + 30
        started = loop.time()
        status, headers, body = await call(gate, scope())
        held = loop.time() - started
        assert status == 429 and held >= 0.19
        assert json.loads(body) == {"error": {"code": "throttled", "retry_after": 30}}
        assert headers["retry-after"] == "30" and headers["content-type"] == "application/json"
        assert inner.seen == [] and gate._held == {} and gate._held.total() == 0
        # Another user, and the same user's pages (not /api/), go straight in.
        assert (await call(gate, scope(token="t2")))[0] == 200
        assert (await call(gate, scope(path="/batches/")))[0] == 200
        assert inner.seen == ["/api/batches/", "/batches/"]

    run(scenario())


def test_a_refusal_that_ends_while_held_goes_on_to_django():
    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        gate = gate_for(inner, refusals, hold_s=5)
        refusals.until[("Token t1", "")] = asyncio.get_running_loop().time() + 0.1
        assert (await call(gate, scope()))[0] == 200
        assert inner.seen == ["/api/batches/"]

    run(scenario())


def test_past_its_held_most_a_clients_refusals_are_answered_at_once():
    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        gate = gate_for(inner, refusals, hold_s=10, held_per_client=2, held_most=3)
        loop = asyncio.get_running_loop()
        for token in ("t1", "t2"):
            refusals.until[(f"Token {token}", "")] = loop.time() + 30
        held = [asyncio.create_task(call(gate, scope())) for _ in range(2)]
        await settle()
        started = loop.time()
        assert (await call(gate, scope()))[0] == 429 and loop.time() - started < 5  # t1 has 2 held
        held.append(asyncio.create_task(call(gate, scope(token="t2"))))
        await settle()
        assert gate._held.total() == 3
        assert (await call(gate, scope(token="t2")))[0] == 429 and loop.time() - started < 5  # all 3 held
        assert not any(task.done() for task in held)
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        assert gate._held == {} and gate._held.total() == 0

    run(scenario())


def test_a_client_past_its_waiting_most_is_answered_busy_and_another_client_is_served():
    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        inner.release.clear()
        gate = gate_for(inner, refusals, waiting_per_client=2)
        heavy = [asyncio.create_task(call(gate, scope())) for _ in range(3)]  # one in, two waiting
        await settle()
        status, headers, body = await call(gate, scope())
        assert status == 429 and headers["retry-after"] == "1" and json.loads(body)["error"]["code"] == "busy"
        light = asyncio.create_task(call(gate, scope(path="/api/jobs/", token="t2")))
        await settle()
        inner.release.set()
        assert (await light)[0] == 200
        assert [status for status, _, _ in await asyncio.gather(*heavy)] == [200, 200, 200]
        # The light request came last and waited for one heavy request, not two.
        assert inner.seen == ["/api/batches/", "/api/batches/", "/api/jobs/", "/api/batches/"]

    run(scenario())


def test_the_body_is_read_before_the_request_takes_a_thread_and_handed_on_whole():
    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        gate = gate_for(inner, refusals)
        arrived = asyncio.Event()
        pieces = [b"{\"files\":", b" []}"]
        answer: dict = {}

        async def receive() -> dict:
            if len(pieces) == 1:
                await arrived.wait()  # the client is slow to send the rest
            piece = pieces.pop(0)
            return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

        async def send(message: dict) -> None:
            answer.setdefault(message["type"], message)

        task = asyncio.create_task(gate(scope(method="POST"), receive, send))
        await settle()
        assert gate.slots.free == 1 and inner.seen == []  # no thread while the body trickles in
        arrived.set()
        await task
        assert answer["http.response.body"]["body"] == b"{\"files\": []}"

    run(scenario())


@pytest.mark.parametrize("headers, client", [
    ([(b"authorization", b"Token a")], ("Token a", "")),
    ([(b"cookie", b"x=1; sessionid=s")], ("", "s")),
    ([(b"cookie", b"sessionid=known")], ("user:7",)),  # found to be user 7 before: one turn for all of 7's
    ([(b"authorization", b"Token b"), (b"cookie", b"sessionid=known")], ("Token b", "known")),
    ([], ("", "", "10.0.0.1")),
])
def test_a_client_is_the_user_its_credentials_were_found_to_be_or_the_credentials_or_its_address(headers, client):
    async def scenario() -> None:
        gate = gate_for(Inner(), Refusals(), users={("", "known"): 7})
        slots_seen = clients_entering(gate)
        await call(gate, {**scope(), "headers": headers})
        assert slots_seen == [client]

    run(scenario())


@pytest.mark.parametrize("proxies, forwarded, address", [
    (0, [b"203.0.113.9"], "10.0.0.1"),  # no proxies: X-Forwarded-For is the client's own word
    (1, [], "10.0.0.1"),
    (1, [b"198.51.100.7, 203.0.113.9"], "203.0.113.9"),  # what the one proxy saw, not what the client wrote
    (2, [b"198.51.100.7, 203.0.113.9"], "198.51.100.7"),
    (2, [b"198.51.100.7", b"203.0.113.9"], "198.51.100.7"),  # a repeated header reads as one list
    (3, [b"203.0.113.9"], "203.0.113.9"),  # fewer hops than proxies: the leftmost
])
def test_behind_proxies_an_anonymous_clients_address_is_the_one_the_first_proxy_saw(proxies, forwarded, address,
                                                                                     settings, caplog):
    """Behind a load balancer every anonymous request comes from its
    address: without this, all of them would share one turn. The access
    line names the same address, not the balancer's."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": proxies}

    async def scenario() -> None:
        gate = gate_for(Inner(), Refusals())
        slots_seen = clients_entering(gate)
        await call(gate, {**scope(token=""), "headers": [(b"x-forwarded-for", value) for value in forwarded]})
        assert slots_seen == [("", "", address)]

    with caplog.at_level(logging.INFO, logger="fairlane.access"):
        run(scenario())
    [line] = [r.getMessage() for r in caplog.records if r.name == "fairlane.access"]
    assert line.startswith(f'{address} "GET /api/batches/ HTTP/1.1" 200 '), line


def test_behind_a_proxy_two_anonymous_clients_wait_apart(settings):
    """Two browsers behind the same load balancer: one with its most
    requests waiting does not make the other's answer `busy`."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}

    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        inner.release.clear()
        gate = gate_for(inner, refusals, waiting_per_client=1)
        behind = lambda who: {**scope(token=""), "headers": [(b"x-forwarded-for", who)]}  # noqa: E731
        first = [asyncio.create_task(call(gate, behind(b"198.51.100.7"))) for _ in range(2)]  # in, waiting
        await settle()
        assert (await call(gate, behind(b"198.51.100.7")))[0] == 429  # its one waiting place is taken
        other = asyncio.create_task(call(gate, behind(b"203.0.113.9")))
        await settle()
        assert not other.done(), other.result()  # waits its own turn
        inner.release.set()
        assert [(await task)[0] for task in (*first, other)] == [200, 200, 200]

    run(scenario())


def test_credentials_that_spell_a_users_turn_do_not_share_it():
    """A known user's turn is keyed apart from any credentials as sent: a
    client sending `Authorization: user` and session cookie `7` (nobody's)
    has turns of its own, and cannot fill user 7's waiting places."""
    async def scenario() -> None:
        inner, refusals = Inner(), Refusals()
        gate = gate_for(inner, refusals, users={("Token t1", ""): 7}, waiting_per_client=1)
        forged = {**scope(token=""), "headers": [(b"authorization", b"user"), (b"cookie", b"sessionid=7")]}
        inner.release.clear()
        first = asyncio.create_task(call(gate, forged))  # holds the one place
        second = asyncio.create_task(call(gate, forged))  # its one waiting place
        await settle()
        victim = asyncio.create_task(call(gate, scope(token="t1")))
        await settle()
        assert not victim.done(), victim.result()  # waits its turn, not answered busy
        inner.release.set()
        assert [(await task)[0] for task in (first, second, victim)] == [200, 200, 200]

    run(scenario())


def test_django_gets_the_front_doors_wait_for_a_thread_and_never_a_clients_own():
    """Its header (project/request_timing.py logs it for a slow request):
    one, the gate's, whatever the client sent under that name."""
    class Headers(Inner):
        async def __call__(self, scope, receive, send) -> None:
            self.headers = [(k, v) for k, v in scope["headers"] if k == b"x-fairlane-gate-wait-ms"]
            await super().__call__(scope, receive, send)

    inner = Headers()
    request = scope()
    request["headers"] = [*request["headers"], (b"x-fairlane-gate-wait-ms", b"999999"),
                          (b"X-Fairlane-Gate-Wait-Ms", b"888888")]
    status, _, _ = run(call(gate_for(inner, Refusals()), request))
    assert status == 200
    [(_, value)] = inner.headers
    assert value.isdigit() and int(value) < 888888
