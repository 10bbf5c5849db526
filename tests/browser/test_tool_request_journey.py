"""A tool call's question reaches an answer, in a real browser (U1-U3, U7): a runtime asks to
run Bash with `git push origin main`; the approver sees the arguments and what the tool does,
picks the prefix `git push:*` and answers *Allow for this session*; the waiting long-poll
returns; `git push origin dev` is then ALLOW without asking while `rm -rf /` asks; the
auditor finds the grant with its pattern. At desktop and at phone width; each main page is
kept as a screenshot and checked with axe-core."""

from __future__ import annotations

import threading
from typing import Any

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.registry.services import tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot, assert_tappable, at_both_widths, main_page
from tests.browser.test_approvals_journey import call
from tests.conftest import TEST_ACTOR

TOOL_REQUESTS = "/api/v1/tool-approval-requests"


def decide(live_server: LiveServer, token: str, command: str, session_id: str = "s-tools") -> dict[str, Any]:
    status, answer = call(
        live_server,
        token,
        "POST",
        "/api/v1/tool-decisions",
        {"tool": "Bash", "session_id": session_id, "arguments": {"command": command}},
    )
    assert status == 200, answer
    return answer


@at_both_widths
def test_runtime_asks_to_run_bash_approver_allows_a_prefix_for_the_session(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    approver: User,
    auditor: User,
    runtime: AgentRuntime,
    runtime_token: str,
) -> None:
    # The runtime's own Bash tool (every axis undeclared: writes, destructive, not idempotent),
    # its subject the `command` argument (U1).
    status, registered = call(
        live_server, runtime_token, "PUT", "/api/v1/tools", {"tools": [{"name": "Bash"}]}
    )
    assert status == 200, registered
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)

    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    page.evaluate("window.__noReload = 1")

    # The gate asks (T7); the runtime opens a tool approval request with the call (U2).
    asked = decide(live_server, runtime_token, "git push origin main")
    assert (asked["decision"], asked["source"]) == ("ASK", "GATE")
    status, created = call(
        live_server,
        runtime_token,
        "POST",
        TOOL_REQUESTS,
        {
            "tool": "Bash",
            "session_id": "s-tools",
            "principal": "alice",
            "arguments": {"command": "git push origin main", "cwd": "/srv/app"},
            "reason": "Push the release branch",
        },
    )
    assert status == 201, created
    assert (created["status"], created["subject"]) == ("PENDING", "git push origin main")

    waited: dict[str, Any] = {}

    def long_poll() -> None:
        waited["status"], waited["body"] = call(
            live_server, runtime_token, "GET", f"{TOOL_REQUESTS}/{created['id']}?wait=30"
        )

    poller = threading.Thread(target=long_poll)
    poller.start()

    card = page.locator(f"#request-{created['id']}")
    expect(card).to_be_visible()  # arrived without a reload
    assert page.evaluate("window.__noReload") == 1
    expect(card).to_contain_text("wants to run Bash")
    expect(card).to_contain_text("Push the release branch")
    expect(card.get_by_test_id("axes")).to_contain_text("writes · destructive · not idempotent")
    expect(card.get_by_test_id("subject")).to_have_text("git push origin main")
    expect(card.get_by_test_id("arguments")).to_contain_text('"/srv/app"')
    main_page(page, shot, "inbox-tool-request")

    # The approver picks the prefix and reads what the button reaches before the click (S5).
    prefix = card.get_by_role(
        "radio", name="Starting with “git push”, with any arguments after it Bash(git push:*)"
    )
    prefix.check()
    expect(card.locator("#reach-" + created["id"] + "-ALLOW_SESSION")).to_contain_text(
        "Calls of Bash matching the pattern picked above, in session s-tools"
    )
    allow = card.get_by_role("button", name="Allow for this session")
    assert_tappable(page, card.get_by_role("button"))
    allow.click()

    poller.join(timeout=35)
    assert not poller.is_alive()
    assert waited["status"] == 200
    assert (waited["body"]["status"], waited["body"]["decision"], waited["body"]["scope"]) == (
        "ANSWERED",
        "ALLOW",
        "SESSION",
    )
    assert waited["body"]["pattern"] == "git push:*"
    # The inbox's own poll takes an answered card away; its page keeps what was answered.
    page.goto(f"{live_server.url}/approvals/requests/{created['id']}/")
    answered = page.locator(f"#request-{created['id']}")
    expect(answered).to_contain_text("Allow for this session")
    expect(answered).to_contain_text("Bash(git push:*)")
    expect(answered).to_contain_text("by alice")
    main_page(page, shot, "tool-request-answered")

    # The pattern holds for the session: another push is allowed, anything else still asks.
    pushed = decide(live_server, runtime_token, "git push origin dev")
    assert (pushed["decision"], pushed["reason"], pushed["source"]) == ("ALLOW", "GRANTED", "SESSION")
    assert decide(live_server, runtime_token, "rm -rf /")["decision"] == "ASK"
    assert decide(live_server, runtime_token, "git push origin dev && rm -rf /")["decision"] == "ASK"
    assert (
        decide(live_server, runtime_token, "git push origin dev", session_id="s-other")["decision"] == "ASK"
    )

    # The auditor finds the grant with its pattern (U7).
    page.context.clear_cookies()
    log_in(page, auditor)
    page.goto(f"{live_server.url}/audit/events/?action=TOOL_GRANTED")
    expect(page.get_by_text("Bash(git push:*)").first).to_be_visible()
    main_page(page, shot, "audit-tool-grant")
