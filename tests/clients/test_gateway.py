"""The MCP gateway (G2) in front of real MCP servers, against the product on its embedded shape
(live server, SQLite), driven by the MCP SDK's own client over stdio and Streamable HTTP.

mcp-server-git (on a temporary repository) and mcp-server-time are registered in the product
and synced as an operator would; the gateway reads them from the product (``servers:
product``) and is reached only over MCP.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.rules import tool_rule_create
from aimon_admin.approvals.services.answers import request_answer
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.registry.models import McpServer, RelayFinding, Tool
from aimon_admin.registry.services.listings import mcp_tools_record
from aimon_admin.runtimes.models import AgentRuntime
from tests.clients.conftest import ANSWERED_WHILE_WAITING
from tests.clients.gateway_kit import (
    gateway_http,
    git_repo,
    over_http,
    over_stdio,
    register,
    register_real_servers,
    stage,
    staged,
    text_of,
    write_config,
)
from tests.clients.gateway_servers import DRIFT_AFTER

pytestmark = [pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Setup:
    url: str
    token: str
    repo: Path
    config: Path
    actor: Actor
    runtime: AgentRuntime
    tmp: Path

    def configure(self, **settings: Any) -> Path:
        return write_config(self.config, self.url, **settings)


@pytest.fixture
def setup(
    live_server: LiveServer, runtime: AgentRuntime, runtime_token: str, operator: User, tmp_path: Path
) -> Setup:
    repo = git_repo(tmp_path / "repo")
    actor = Actor.for_user(operator)
    register_real_servers(actor, repo)
    config = write_config(tmp_path / "gateway.yaml", live_server.url, principal="alice", wait_seconds=30)
    return Setup(live_server.url, runtime_token, repo, config, actor, runtime, tmp_path)


def run(fn: Callable[[], Any]) -> Any:
    return anyio.run(fn)


def pending_request(tool: str, timeout: float = 20.0) -> ApprovalRequest:
    """The tool approval request the gateway opened, once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ApprovalRequest.objects.filter(tool=tool, status="PENDING").order_by("-created_at").first()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no pending request for {tool}")


def test_stdio_lists_what_the_product_serves_and_forwards_allowed_calls(setup: Setup) -> None:  # G2, T15
    async def session() -> tuple[list[types.Tool], types.CallToolResult, types.CallToolResult]:
        async with over_stdio(setup.config, setup.token) as client:
            listed = (await client.list_tools()).tools
            now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
            status = await client.call_tool("git__git_status", {"repo_path": str(setup.repo)})
            return listed, now, status

    listed, now, status = run(session)

    by_name = {tool.name: tool for tool in listed}
    stored = {f"{t.server.name}__{t.name}": t for t in Tool.objects.filter(server__isnull=False)}
    assert set(by_name) == set(stored)  # every tool the product serves, named server__tool
    for name, tool in by_name.items():  # the product's text, never the upstream's live one
        assert (tool.description, tool.input_schema) == (stored[name].description, stored[name].input_schema)
    assert by_name["git__git_reset"].annotations.destructive_hint is True
    assert by_name["git__git_status"].annotations.read_only_hint is True

    assert not now.is_error
    assert json.loads(text_of(now))["timezone"] == "UTC"
    assert not status.is_error
    assert "Repository status" in text_of(status)
    # T15: each live listing went to the product, attributed to this runtime.
    relays = AuditEvent.objects.filter(action=AuditAction.MCP_TOOLS_RELAYED, runtime=setup.runtime)
    assert {event.subject for event in relays} >= {"git", "time"}


@ANSWERED_WHILE_WAITING
def test_a_destructive_call_asks_and_runs_once_after_allow_this_call(
    setup: Setup, approver: User
) -> None:  # U2-U4
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    answered = threading.Event()

    def answer() -> None:
        request = pending_request("git_reset")
        time.sleep(1.5)  # a progress round or so while the person reads
        request_answer(request=request, user=approver, answer=Answer.ALLOW_CALL)
        answered.set()

    async def session() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with over_stdio(setup.config, setup.token) as client:
            first = await client.call_tool(
                "git__git_reset", {"repo_path": str(setup.repo)}, progress_callback=on_progress
            )
            assert staged(setup.repo) == []  # it ran
            stage(setup.repo, "again\n")
            # The same call again asks again (U4: single use); nobody answers, so it is refused.
            with anyio.fail_after(60):
                second = await client.call_tool("git__git_reset", {"repo_path": str(setup.repo)})
            return first, second

    thread = threading.Thread(target=answer)
    thread.start()
    setup.configure(principal="alice", wait_seconds=4)
    first, second = run(session)
    thread.join()

    assert answered.is_set()
    assert not first.is_error, text_of(first)
    assert progress
    assert all(total == 4.0 for _, total, _ in progress)
    assert "waiting for alice's answer in AIMON Admin" in (progress[0][2] or "")
    assert second.is_error
    assert "nobody answered the request to run git__git_reset within 4 s" in text_of(second)
    assert staged(setup.repo) == ["README"]  # the second one did not run
    requests = ApprovalRequest.objects.filter(tool="git_reset").order_by("created_at")
    assert requests[0].status == "ANSWERED"
    assert requests[1].status in ("CANCELLED", "EXPIRED")  # S9 either way
    assert requests[0].session.session_id.startswith("mcp-")
    assert requests[0].session.session_id == requests[1].session.session_id  # one MCP session


def test_a_deny_rule_is_a_tool_error_naming_it_and_nothing_runs(setup: Setup) -> None:  # U1, G2
    tool_rule_create(text="git/git_reset", action="DENY", actor=setup.actor)

    async def session() -> types.CallToolResult:
        async with over_stdio(setup.config, setup.token) as client:
            return await client.call_tool("git__git_reset", {"repo_path": str(setup.repo)})

    result = run(session)
    assert result.is_error
    assert text_of(result).startswith("Refused by AIMON Admin: an operator's rule denies it (git/git_reset)")
    assert staged(setup.repo) == ["README"]


@ANSWERED_WHILE_WAITING
def test_streamable_http_asks_then_forwards_when_the_person_allows(
    setup: Setup, approver: User
) -> None:  # G2, U4
    progress: list[str | None] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    def answer() -> None:
        request = pending_request("git_reset")
        request_answer(request=request, user=approver, answer=Answer.ALLOW_CALL)

    async def session(url: str) -> tuple[list[str], types.CallToolResult]:
        async with over_http(url) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            result = await client.call_tool(
                "git__git_reset", {"repo_path": str(setup.repo)}, progress_callback=on_progress
            )
            return names, result

    thread = threading.Thread(target=answer)
    thread.start()
    with gateway_http(setup.config, setup.token) as gateway:
        names, result = anyio.run(session, gateway.url)
    thread.join()

    assert "git__git_reset" in names
    assert not result.is_error, text_of(result)
    assert staged(setup.repo) == []
    request = ApprovalRequest.objects.get(tool="git_reset")
    assert request.session.session_id.startswith("mcp-")  # the Streamable HTTP session's id


def test_the_clients_cancellation_cancels_the_request(setup: Setup) -> None:  # G2, S9
    async def session() -> None:
        async with over_stdio(setup.config, setup.token) as client:
            with anyio.move_on_after(3):
                await client.call_tool("git__git_reset", {"repo_path": str(setup.repo)})
            # The SDK told the gateway (notifications/cancelled); it cancels the request.
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                status = await anyio.to_thread.run_sync(
                    lambda: ApprovalRequest.objects.get(tool="git_reset").status
                )
                if status != "PENDING":
                    return
                await anyio.sleep(0.1)

    run(session)
    assert ApprovalRequest.objects.get(tool="git_reset").status == "CANCELLED"
    assert staged(setup.repo) == ["README"]


def test_list_changed_relays_the_new_listing_and_the_client_keeps_the_products_text(
    setup: Setup,
) -> None:  # T15, G2
    drifting = {
        "command": sys.executable,
        "args": ["-m", "tests.clients.gateway_servers", "--mode", "drifting"],
    }
    register(setup.actor, "drifty", env={"PYTHONPATH": str(ROOT)}, **drifting)
    setup.configure(principal="alice", secrets={"drifty": {"env": {"PYTHONPATH": str(ROOT)}}})

    async def session() -> list[types.Tool]:
        async with over_stdio(setup.config, setup.token) as client:
            result = await client.call_tool("drifty__drift", {})
            assert not result.is_error, text_of(result)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                found = await anyio.to_thread.run_sync(
                    lambda: RelayFinding.objects.filter(tool__name="drift").exists()
                )
                if found:
                    break
                await anyio.sleep(0.1)
            return (await client.list_tools()).tools

    listed = run(session)
    finding = RelayFinding.objects.get(tool__name="drift")
    assert (finding.runtime, finding.description) == (setup.runtime, DRIFT_AFTER)
    [drift] = [tool for tool in listed if tool.name == "drifty__drift"]
    assert drift.description == "Report where things stand."  # never the live text (T15)


def test_a_tool_held_for_review_is_not_offered(setup: Setup) -> None:  # T15, G2
    # The server's next sync claims git_reset only reads: the product holds it at the worst
    # axes until an operator looks, and the gateway leaves it out of what it offers.
    server = McpServer.objects.get(name="git")
    listing = [
        {
            "name": tool.name,
            "description": tool.description,
            "inputSchema": tool.input_schema,
            "annotations": {"readOnlyHint": True} if tool.name == "git_reset" else tool.claims,
        }
        for tool in Tool.objects.filter(server=server, present=True)
    ]
    mcp_tools_record(server=server, listing=listing, actor=setup.actor, complete=True)
    assert Tool.objects.get(server=server, name="git_reset").awaiting_review

    async def session() -> list[types.Tool]:
        async with over_stdio(setup.config, setup.token) as client:
            return (await client.list_tools()).tools

    names = {tool.name for tool in run(session)}
    assert "git__git_reset" not in names
    assert {"git__git_status", "time__get_current_time"} <= names
