"""The runtime client (G1) against the real product over HTTP: decisions, a request opened,
answered by a person and waited for, cancel, the session commands, the tool catalog and MCP
listings, and the product's refusals turned into errors that say what to do."""

from __future__ import annotations

import hashlib
import threading
import uuid
from typing import Any

import pytest
import rfc8785
from aimon_client import (
    Client,
    Decision,
    NotAuthorized,
    Refused,
    Scope,
    Status,
    ToolReason,
)
from aimon_client.results import McpServerConfig, Revoked, SkillDecision, ToolDecision, ToolRequest

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from tests.clients.conftest import ANSWERED_WHILE_WAITING, GIT_TOOLS, answer, run

pytestmark = pytest.mark.usefixtures("catalog")

PUSH = {"command": "git push origin main"}


def test_read_only_tool_is_allowed_destructive_asks_and_unattended_is_denied(
    product: str, runtime_token: str
) -> None:
    # T8, T9: the gate's three answers, read into typed results.
    async def use(client: Client) -> list[ToolDecision]:
        return [
            await client.tool_decision("Read", arguments={"file_path": "/etc/hosts"}, session_id="s-1"),
            await client.tool_decision("Bash", arguments=PUSH, session_id="s-1"),
            await client.tool_decision("Bash", arguments=PUSH),
            await client.tool_decision("NoSuchTool", arguments={}, session_id="s-1"),
        ]

    read, bash, unattended, unknown = run(product, runtime_token, use)
    assert (read.decision, read.reason) == (Decision.ALLOW, ToolReason.READ_ONLY_EXEMPT)
    assert (bash.decision, bash.reason) == (Decision.ASK, ToolReason.DESTRUCTIVE_ALWAYS_ASKS)
    assert bash.registered is True
    assert (unattended.decision, unattended.reason) == (Decision.DENY, ToolReason.UNATTENDED_NO_CHANNEL)
    assert "nobody can be asked" in unattended.in_words()
    # T9: an unregistered tool counts as MUTATING + DESTRUCTIVE.
    assert unknown.decision == Decision.ASK
    assert unknown.registered is False
    assert unknown.destructive_behavior == "DESTRUCTIVE"


def test_skill_decisions_come_back_typed_in_the_order_asked(product: str, runtime_token: str) -> None:
    # S1: nothing decides either skill, so both ask, from the default layer.
    got = run(product, runtime_token, lambda c: c.skill_decisions(["deploy", "notify"], session_id="s-1"))
    assert got == [
        SkillDecision("deploy", Decision.ASK, "DEFAULT"),
        SkillDecision("notify", Decision.ASK, "DEFAULT"),
    ]


@ANSWERED_WHILE_WAITING
def test_allow_this_call_is_waited_for_then_allows_exactly_that_call_once(
    product: str, runtime_token: str, approver: User
) -> None:
    # U2-U4: open with the exact arguments, a person answers Allow this call while the client
    # long-polls, the answer allows that call once with approval_id, and not a changed one.
    opened = run(
        product,
        runtime_token,
        lambda c: c.open_tool_request(
            "Bash", arguments=PUSH, session_id="s-1", principal="alice", reason="push the release"
        ),
    )
    assert opened.status == Status.PENDING
    assert opened.subject == "git push origin main"
    assert opened.arguments_digest == "sha256:" + hashlib.sha256(rfc8785.dumps(PUSH)).hexdigest()

    waited: dict[str, Any] = {}
    progress: list[float] = []

    async def on_progress(state: ToolRequest, left: float) -> None:
        progress.append(left)

    def wait() -> None:
        waited["state"] = run(
            product,
            runtime_token,
            lambda c: c.wait_tool_request(opened.id, timeout=60, on_progress=on_progress),
        )

    waiter = threading.Thread(target=wait)
    waiter.start()
    answer(opened.id, approver, Answer.ALLOW_CALL)
    waiter.join(90)
    state = waited["state"]
    assert (state.status, state.decision, state.scope) == (Status.ANSWERED, Decision.ALLOW, Scope.CALL)
    assert state.answered_by == "alice"

    async def after(client: Client) -> list[ToolDecision]:
        return [
            await client.tool_decision(
                "Bash", arguments={"command": "git push --force"}, session_id="s-1", approval_id=opened.id
            ),
            await client.tool_decision("Bash", arguments=PUSH, session_id="s-1", approval_id=opened.id),
            await client.tool_decision("Bash", arguments=PUSH, session_id="s-1", approval_id=opened.id),
        ]

    changed, allowed, again = run(product, runtime_token, after)
    assert changed.decision == Decision.ASK  # other arguments: the answer is not theirs (U4)
    assert (allowed.decision, allowed.source) == (Decision.ALLOW, "CALL")
    assert again.decision == Decision.ASK  # once


def test_a_wait_that_times_out_returns_pending_then_cancel_denies_for_the_session(
    product: str, runtime_token: str
) -> None:
    # S9: the runtime gives up waiting and cancels; the call is denied for the session.
    async def use(client: Client) -> tuple[ToolRequest, list[float], ToolRequest, ToolRequest, ToolDecision]:
        opened = await client.open_tool_request("Bash", arguments=PUSH, session_id="s-2", timeout_seconds=600)
        left: list[float] = []

        async def on_progress(state: ToolRequest, seconds_left: float) -> None:
            left.append(seconds_left)

        pending = await client.wait_tool_request(opened.id, timeout=1, on_progress=on_progress)
        cancelled = await client.cancel_tool_request(opened.id)
        again = await client.cancel_tool_request(opened.id)  # closed already: its state, no error
        after = await client.tool_decision("Bash", arguments=PUSH, session_id="s-2")
        return pending, left, cancelled, again, after

    pending, left, cancelled, again, after = run(product, runtime_token, use)
    assert pending.status == Status.PENDING
    assert left
    assert all(0 <= value <= 1 for value in left)
    assert cancelled.status == Status.CANCELLED
    assert again == cancelled
    assert after.decision == Decision.DENY


def test_the_same_idempotency_key_returns_the_same_request(product: str, runtime_token: str) -> None:
    # G1: a retried open with its key is the request the first one opened.
    key = str(uuid.uuid4())

    async def use(client: Client) -> tuple[ToolRequest, ToolRequest, ToolRequest]:
        first = await client.open_tool_request("Bash", arguments=PUSH, session_id="s-3", idempotency_key=key)
        second = await client.open_tool_request("Bash", arguments=PUSH, session_id="s-3", idempotency_key=key)
        fresh = await client.open_tool_request("Bash", arguments=PUSH, session_id="s-3")
        return first, second, fresh

    first, second, fresh = run(product, runtime_token, use)
    assert second.id == first.id
    assert fresh.id != first.id


def test_skill_request_open_wait_and_cancel(product: str, runtime_token: str, approver: User) -> None:
    # S4, S9: the skill side of the same calls.
    async def use(client: Client) -> tuple[Any, ...]:
        opened = await client.open_skill_request(["deploy"], session_id="s-4", principal="alice")
        pending = await client.wait_skill_request(opened.id, timeout=0)
        cancelled = await client.cancel_skill_request(opened.id)
        decided = await client.skill_decisions(["deploy"], session_id="s-4")
        return opened, pending, cancelled, decided

    opened, pending, cancelled, decided = run(product, runtime_token, use)
    assert opened.status == Status.PENDING
    assert [item.skill for item in opened.items] == ["deploy"]
    assert pending.status == Status.PENDING
    assert cancelled.status == Status.CANCELLED
    assert decided[0].decision == Decision.DENY


def test_clear_and_revoke_a_session(product: str, runtime_token: str, approver: User) -> None:
    # S10: a session answer, cleared; another, revoked with the agent-wide ones.
    opened = run(
        product,
        runtime_token,
        lambda c: c.open_tool_request("Bash", arguments=PUSH, session_id="a/b", principal="alice"),
    )
    answer(opened.id, approver, Answer.ALLOW_SESSION)

    async def use(client: Client) -> tuple[ToolDecision, int, ToolDecision, Revoked]:
        before = await client.tool_decision("Bash", arguments=PUSH, session_id="a/b")
        removed = await client.clear_session("a/b")  # a `/` in the id travels as %2F
        after = await client.tool_decision("Bash", arguments=PUSH, session_id="a/b")
        revoked = await client.revoke_session("a/b", agent=True)
        return before, removed, after, revoked

    before, removed, after, revoked = run(product, runtime_token, use)
    assert (before.decision, before.source) == (Decision.ALLOW, "SESSION")
    assert removed == 1
    assert after.decision == Decision.ASK
    assert revoked == Revoked(removed_session=0, removed_agent=0)


def test_tools_catalog_servers_and_a_relayed_listing(product: str, runtime_token: str) -> None:
    # T6, T15: what the runtime may give its model, its servers, and a listing relayed.
    async def use(client: Client) -> tuple[Any, ...]:
        replaced = await client.put_tools([{"name": "Read", "side_effect_level": "READ_ONLY"}])
        tools = await client.tools()
        servers = await client.mcp_servers()
        listing = [GIT_TOOLS[0]]  # as the server's sync listed it
        relayed = await client.relay_listing("git", listing)
        return replaced, tools, servers, relayed

    replaced, tools, servers, relayed = run(product, runtime_token, use)
    assert replaced["registered"] == 1
    assert sorted(replaced["removed"]) == ["Bash", "Edit"]
    assert {(t.name, t.server, t.read_only) for t in tools} == {
        ("Read", None, True),
        ("git_status", "git", True),
        ("git_reset", "git", False),
    }
    assert servers == [
        McpServerConfig(
            name="git",
            transport="STDIO",
            command="uvx",
            args=(),
            url="",
            timeout_seconds=servers[0].timeout_seconds,
            annotation_trust="TRUST",
        )
    ]
    assert [(t["name"], t["read_only"], t["kept_as_finding"]) for t in relayed] == [
        ("git_status", True, False)
    ]


def test_a_wrong_token_says_where_to_get_one(product: str) -> None:
    # G1: a 401 is NotAuthorized, and its reason says what to do.
    with pytest.raises(NotAuthorized) as caught:
        run(product, "not-a-token", lambda c: c.tool_decision("Bash", session_id="s-1"))
    assert "runtime's page" in caught.value.reason


def test_a_refusal_names_the_fields(product: str, runtime_token: str) -> None:
    # G1: a 400 is Refused with the field names the product gave.
    with pytest.raises(Refused) as caught:
        run(product, runtime_token, lambda c: c.tool_decision("Bash", session_id="x" * 201))
    assert caught.value.status == 400
    assert caught.value.fields == ("session_id",)
    assert "session_id" in caught.value.reason


def test_an_unknown_server_is_a_404_refusal(product: str, runtime_token: str) -> None:
    with pytest.raises(Refused) as caught:
        run(product, runtime_token, lambda c: c.relay_listing("nope", [{"name": "x"}]))
    assert caught.value.status == 404


def test_an_unattended_request_is_refused_naming_the_session(product: str, runtime_token: str) -> None:
    # U2: with no session nobody can be asked, so no request opens.
    with pytest.raises(Refused) as caught:
        run(product, runtime_token, lambda c: c.open_tool_request("Bash", arguments=PUSH))
    assert caught.value.status == 400
    assert caught.value.fields
