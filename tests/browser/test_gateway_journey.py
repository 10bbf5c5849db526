"""An unmodified MCP client behind the gateway (G2), a person answering in Chromium (U2-U4).

The MCP SDK's own client calls mcp-server-git's destructive git_reset through aimon-gateway
(stdio); the gateway asks; alice clicks *Allow this call* in her inbox; the call goes through
once. The same call again asks again (U4: single use): a second click, a second run. A call
with changed arguments is not covered by either approval: it asks anew, and the client giving
up cancels that request (S9) without it running. The repository shows what ran.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.core.actors import Actor
from tests.browser.conftest import LogIn
from tests.clients.gateway_kit import (
    git_repo,
    over_stdio,
    register_real_servers,
    stage,
    staged,
    text_of,
    write_config,
)


def new_request(seen: set[str], timeout: float = 20.0) -> ApprovalRequest:
    """The next git_reset request the gateway opens (one not in `seen`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for request in ApprovalRequest.objects.filter(tool="git_reset").order_by("created_at"):
            if str(request.pk) not in seen:
                seen.add(str(request.pk))
                return request
        time.sleep(0.05)
    raise AssertionError("the gateway opened no request")


def answer_in_inbox(page: Page, request: ApprovalRequest, button: str) -> None:
    card = page.locator(f"#request-{request.pk}")
    expect(card).to_be_visible()  # arrived in the open inbox, no reload
    expect(card).to_contain_text("git_reset")
    card.get_by_role("button", name=button, exact=True).click()
    expect(card).to_be_hidden()


def test_git_reset_through_the_gateway_waits_for_alices_click(
    live_server: LiveServer,
    page: Page,
    log_in: LogIn,
    approver: User,
    operator: User,
    runtime_token: str,
    tmp_path: Path,
) -> None:  # G2, U2, U3, U4, S9
    repo = git_repo(tmp_path / "repo")
    register_real_servers(Actor.for_user(operator), repo)
    config = write_config(tmp_path / "gateway.yaml", live_server.url, principal="alice", wait_seconds=60)
    reset = {"repo_path": str(repo)}
    results: queue.Queue[Any] = queue.Queue()
    steps: queue.Queue[Callable[[types.CallToolResult], None] | None] = queue.Queue()

    async def agent() -> None:
        async with over_stdio(config, runtime_token) as client:
            results.put(await client.call_tool("git__git_reset", reset))  # 1: allowed by the click
            steps.get()
            results.put(await client.call_tool("git__git_reset", reset))  # 2: the same call asks again
            steps.get()
            with anyio.move_on_after(3):  # 3: changed arguments ask anew; the agent gives up
                await client.call_tool("git__git_reset", {"repo_path": f"{repo}/."})
            results.put("gave up")

    worker = threading.Thread(target=lambda: anyio.run(agent), daemon=True)
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    worker.start()
    seen: set[str] = set()

    answer_in_inbox(page, new_request(seen), "Allow this call")
    first = results.get(timeout=30)
    assert not first.is_error, text_of(first)
    assert staged(repo) == []  # it ran, once

    stage(repo, "staged again\n")
    steps.put(None)
    again = new_request(seen)  # U4: an approval is single use
    first_id = min(seen - {str(again.pk)})
    assert again.arguments_digest == ApprovalRequest.objects.get(pk=first_id).arguments_digest
    answer_in_inbox(page, again, "Allow this call")
    second = results.get(timeout=30)
    assert not second.is_error, text_of(second)
    assert staged(repo) == []

    stage(repo, "staged a third time\n")

    steps.put(None)
    changed = new_request(seen)
    assert changed.arguments == {"repo_path": f"{repo}/."}
    assert changed.arguments_digest != again.arguments_digest
    assert results.get(timeout=30) == "gave up"
    worker.join(30)
    changed.refresh_from_db()
    deadline = time.monotonic() + 10
    while changed.status == "PENDING" and time.monotonic() < deadline:
        time.sleep(0.1)
        changed.refresh_from_db()
    assert changed.status == "CANCELLED"  # S9: the client's cancellation cancels the request
    assert staged(repo) == ["README"]
