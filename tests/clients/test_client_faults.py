"""The runtime client (G1) when the network or the answer goes wrong. The outside world is
a scripted HTTP server on loopback (a 503, a dropped connection, an answer from a product
the client does not understand); nothing of ours is mocked. Every case fails closed: an
error whose reason says what happened, never a decision made up."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from aimon_client import Client, Decision, NotAuthorized, ProductUnavailable, ProtocolError, Status
from aimon_client.results import ToolRequest
from aiohttp import web
from aiohttp.test_utils import RawTestServer

from tests.ports import free_port

DECISION = {
    "decision": "ALLOW",
    "reason": "READ_ONLY_EXEMPT",
    "source": "GATE",
    "side_effect_level": "READ_ONLY",
    "destructive_behavior": "NON_DESTRUCTIVE",
    "idempotency_behavior": "IDEMPOTENT",
    "registered": True,
}
REQUEST = {
    "id": "0f9c0000-0000-4000-8000-000000000001",
    "status": "PENDING",
    "created_at": "2030-01-01T00:00:00Z",
    "expires_at": "2030-01-01T00:05:00Z",
    "tool": "Bash",
    "server": None,
    "subject": "ls",
    "arguments_digest": "sha256:" + "0" * 64,
    "decision": None,
    "scope": None,
    "pattern": None,
    "answered_by": None,
    "answered_at": None,
}
ANSWERED = {**REQUEST, "status": "ANSWERED", "decision": "ALLOW", "scope": "CALL", "answered_by": "alice"}


DROP = "drop"  # a step: the connection closed without an answer, as a network drop or a restart does


@dataclass
class Seen:
    """One request as the scripted server received it."""

    method: str
    path: str
    params: dict[str, str]
    headers: Mapping[str, str]
    content: bytes


@dataclass
class Script:
    """A real HTTP server on loopback answering each request with the next step: a
    (status, body[, headers]) tuple, or DROP; the last step repeats."""

    steps: list[Any]
    seen: list[Seen] = field(default_factory=list)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self.seen.append(
            Seen(request.method, request.path, dict(request.query), request.headers, await request.read())
        )
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if step == DROP:
            assert request.transport is not None
            request.transport.abort()
            return web.Response()  # never sent: the connection is gone
        status, body, *headers = step
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return web.Response(status=status, body=content, headers=headers[0] if headers else None)


def scripted(*steps: Any) -> tuple[Script, list[Seen]]:
    script = Script(list(steps))
    return script, script.seen


def run(script: Script, use: Callable[[Client], Any], **options: Any) -> Any:
    async def go() -> Any:
        options.setdefault("backoff", 0.001)
        async with RawTestServer(script.handle) as server:
            url = str(server.make_url("")).rstrip("/")
            async with Client(url, "token", **options) as client:
                return await use(client)

    return asyncio.run(go())


def test_a_503_is_retried_and_the_answer_after_it_is_used() -> None:
    # G1: retries with back-off on 503 (Retry-After honoured, capped).
    transport, seen = scripted((503, {"detail": "busy"}, {"Retry-After": "0"}), (200, DECISION))
    decided = run(transport, lambda c: c.tool_decision("Read", session_id="s"))
    assert decided.decision == Decision.ALLOW
    assert len(seen) == 2


def test_503s_past_the_retries_are_product_unavailable() -> None:
    # G1 fails closed: no decision from a product that keeps answering 503.
    transport, seen = scripted((503, {"detail": "busy"}))
    with pytest.raises(ProductUnavailable) as caught:
        run(transport, lambda c: c.tool_decision("Read", session_id="s"), retries=2)
    assert len(seen) == 3
    assert "503" in caught.value.reason
    assert "refused" in caught.value.reason


def test_a_connection_refused_is_retried_then_product_unavailable() -> None:
    # G1 fails closed: nothing listens on the port, every attempt is refused by the system.
    async def go() -> None:
        async with Client(f"http://127.0.0.1:{free_port()}", "token", retries=3, backoff=0.001) as client:
            await client.tool_decision("Read", session_id="s")

    with pytest.raises(ProductUnavailable) as caught:
        asyncio.run(go())
    assert "could not be reached" in caught.value.reason
    assert "after 4 attempts" in caught.value.reason


def test_a_dropped_connection_is_retried_then_product_unavailable() -> None:
    transport, seen = scripted(DROP)
    with pytest.raises(ProductUnavailable) as caught:
        run(transport, lambda c: c.tool_decision("Read", session_id="s"), retries=3)
    assert len(seen) == 4
    assert "could not be reached" in caught.value.reason


def test_a_500_is_not_retried() -> None:
    transport, seen = scripted((500, b"<html>oops</html>"))
    with pytest.raises(ProductUnavailable) as caught:
        run(transport, lambda c: c.tool_decision("Read", session_id="s"))
    assert len(seen) == 1
    assert "server error" in caught.value.reason


def test_a_4xx_is_never_retried() -> None:
    transport, seen = scripted((401, {"error": "unauthenticated", "detail": "Invalid token."}))
    with pytest.raises(NotAuthorized):
        run(transport, lambda c: c.tool_decision("Read", session_id="s"))
    assert len(seen) == 1


def test_an_open_generates_one_idempotency_key_and_reuses_it_on_every_retry() -> None:
    # G1: a retried open can never open a second request.
    transport, seen = scripted(DROP, (503, {}), (201, REQUEST))
    opened = run(transport, lambda c: c.open_tool_request("Bash", arguments={"command": "x"}, session_id="s"))
    assert opened.status == Status.PENDING
    keys = {request.headers["Idempotency-Key"] for request in seen}
    assert len(seen) == 3
    assert len(keys) == 1
    assert uuid.UUID(keys.pop()).version == 4


def test_each_open_has_its_own_key() -> None:
    transport, seen = scripted((201, REQUEST))

    async def use(client: Client) -> None:
        await client.open_tool_request("Bash", session_id="s")
        await client.open_tool_request("Bash", session_id="s")

    run(transport, use)
    assert seen[0].headers["Idempotency-Key"] != seen[1].headers["Idempotency-Key"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("decision", "MAYBE"),
        ("decision", "allow"),
        ("reason", "SOMETHING_NEW"),
        ("source", None),
        ("registered", "yes"),
    ],
)
def test_an_answer_the_client_does_not_understand_is_a_protocol_error(field: str, value: Any) -> None:
    # G1: an unknown enum value (or a wrong type) is never guessed at.
    transport, _ = scripted((200, {**DECISION, field: value}))
    with pytest.raises(ProtocolError) as caught:
        run(transport, lambda c: c.tool_decision("Read", session_id="s"))
    assert f"`{field}`" in caught.value.reason
    assert "upgrade aimon-client" in caught.value.reason


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"decision": "ALLOW"}'])
def test_a_body_that_is_not_a_decision_is_a_protocol_error(body: bytes) -> None:
    transport, _ = scripted((200, body))
    with pytest.raises(ProtocolError):
        run(transport, lambda c: c.tool_decision("Read", session_id="s"))


def test_an_answered_request_with_an_unknown_scope_is_a_protocol_error() -> None:
    transport, _ = scripted((200, {**ANSWERED, "scope": "FOREVER"}))
    with pytest.raises(ProtocolError):
        run(transport, lambda c: c.wait_tool_request(REQUEST["id"], timeout=1))


def test_a_wait_resumes_after_a_dropped_connection() -> None:
    # G1: the long-poll outlives a connection the network dropped.
    transport, seen = scripted((200, REQUEST), DROP, (503, {}), (200, ANSWERED))
    state = run(transport, lambda c: c.wait_tool_request(REQUEST["id"], timeout=30))
    assert state.status == Status.ANSWERED
    assert len(seen) == 4
    assert all(request.params["wait"] for request in seen)


def test_a_wait_with_a_deadline_rides_out_an_outage_longer_than_the_retries() -> None:
    transport, seen = scripted(*[DROP] * 6, (200, ANSWERED))
    state = run(transport, lambda c: c.wait_tool_request(REQUEST["id"], timeout=30), retries=1)
    assert state.status == Status.ANSWERED
    assert len(seen) == 7


def test_a_wait_whose_product_stays_down_past_the_deadline_is_product_unavailable() -> None:
    transport, _ = scripted(DROP)
    with pytest.raises(ProductUnavailable):
        run(transport, lambda c: c.wait_tool_request(REQUEST["id"], timeout=0.05), retries=1)


def test_progress_rounds_are_at_most_ten_seconds() -> None:
    # G2 reports progress while it waits: with on_progress, no round asks for more than 10 s.
    transport, seen = scripted((200, REQUEST), (200, ANSWERED))
    calls: list[tuple[ToolRequest, float]] = []

    async def on_progress(state: ToolRequest, left: float) -> None:
        calls.append((state, left))

    state = run(transport, lambda c: c.wait_tool_request(REQUEST["id"], timeout=300, on_progress=on_progress))
    assert state.status == Status.ANSWERED
    assert [request.params["wait"] for request in seen] == ["10", "10"]
    assert len(calls) == 1
    assert calls[0][0].status == Status.PENDING


def test_a_wait_without_progress_asks_for_the_longest_round() -> None:
    transport, seen = scripted((200, ANSWERED))
    run(transport, lambda c: c.wait_tool_request(REQUEST["id"], timeout=300))
    assert seen[0].params["wait"] == "60"


def test_every_call_names_the_library_and_the_token() -> None:
    # G1: the product records which enforcement point called (User-Agent).
    transport, seen = scripted((200, DECISION))
    run(transport, lambda c: c.tool_decision("Read", session_id="s"), user_agent="aimon-claude-hook/0.1.0")
    assert seen[0].headers["User-Agent"] == "aimon-claude-hook/0.1.0"
    assert seen[0].headers["Authorization"] == "Bearer token"
    assert json.loads(seen[0].content) == {"tool": "Read", "session_id": "s"}


def test_a_proxy_named_by_the_environment_carries_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # G1: the scripted server stands for the proxy; the call to the product's address reaches it.
    script, seen = scripted((200, DECISION))

    async def go() -> Any:
        async with RawTestServer(script.handle) as proxy:
            monkeypatch.setenv("HTTP_PROXY", str(proxy.make_url("")))
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            async with Client("http://product.invalid", "token", backoff=0.001) as client:
                return await client.tool_decision("Read", session_id="s")

    assert asyncio.run(go()).decision == Decision.ALLOW
    assert seen[0].headers["Host"] == "product.invalid"
    assert seen[0].path == "/api/v1/tool-decisions"


def test_no_proxy_for_the_product_s_address_goes_straight(monkeypatch: pytest.MonkeyPatch) -> None:
    script, seen = scripted((200, DECISION))

    async def go() -> Any:
        async with RawTestServer(script.handle) as proxy:
            monkeypatch.setenv("HTTP_PROXY", str(proxy.make_url("")))
            monkeypatch.setenv("NO_PROXY", "product.invalid")
            async with Client("http://product.invalid", "token", retries=0) as client:
                return await client.tool_decision("Read", session_id="s")

    with pytest.raises(ProductUnavailable):
        asyncio.run(go())
    assert seen == []
