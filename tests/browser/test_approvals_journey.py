"""The skill approval journey in a real browser: a runtime asks over the API, the person sees
the request arrive without reloading, answers *Allow for this session*, the waiting long-poll
returns ALLOW, a forked sub-agent inherits it, the person revokes it, and the next decision
is ASK again. At desktop and at phone width; each main page is kept as a screenshot and
checked with axe-core."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot, assert_tappable, at_both_widths, click_through, main_page


def call(live_server: LiveServer, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One runtime API call over real HTTP."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - the test's own live server
        f"{live_server.url}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=40) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def decide(live_server: LiveServer, token: str, **body: Any) -> list[tuple[str, str]]:
    status, answer = call(live_server, token, "POST", "/api/v1/skill-decisions", body)
    assert status == 200, answer
    return [(d["decision"], d["source"]) for d in answer["decisions"]]


@at_both_widths
def test_runtime_asks_person_allows_for_the_session_fork_inherits_then_revoke(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    approver: User,
    runtime: AgentRuntime,
    runtime_token: str,
) -> None:
    # S2-S5, S10 end to end.
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    expect(page.get_by_text("Nothing is waiting for you")).to_be_visible()
    main_page(page, shot, "inbox-empty")
    page.evaluate("window.__noReload = 1")

    # The runtime asks about a skill: nothing decides it, so it opens a request.
    assert decide(live_server, runtime_token, skills=["deploy"], session_id="s-journey") == [
        ("ASK", "DEFAULT")
    ]
    status, created = call(
        live_server,
        runtime_token,
        "POST",
        "/api/v1/approval-requests",
        {"skills": ["deploy"], "session_id": "s-journey", "principal": "alice", "reason": "Ship it"},
    )
    assert status == 201, created
    assert created["status"] == "PENDING"

    waited: dict[str, Any] = {}

    def long_poll() -> None:
        waited["status"], waited["body"] = call(
            live_server, runtime_token, "GET", f"/api/v1/approval-requests/{created['id']}?wait=30"
        )

    poller = threading.Thread(target=long_poll)
    poller.start()

    card = page.locator(f"#request-{created['id']}")
    expect(card).to_be_visible()  # arrived without a reload (htmx poll)
    expect(card).to_contain_text("Ship it")
    assert page.evaluate("window.__noReload") == 1
    main_page(page, shot, "inbox-request")
    answers = card.get_by_role("button", name="deploy")
    assert_tappable(page, answers)
    card.get_by_role("button", name="Allow for this session: deploy").click()
    expect(card).to_contain_text("Answered: deploy.")
    main_page(page, shot, "inbox-answered")

    poller.join(timeout=35)
    assert not poller.is_alive()
    assert waited["status"] == 200
    assert waited["body"]["status"] == "ANSWERED"
    assert waited["body"]["answered_by"] == "alice"
    assert waited["body"]["items"] == [{"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"}]

    # S3: a sub-agent forked from the session inherits the approval.
    assert decide(live_server, runtime_token, skills=["deploy"], invoking_session_id="s-journey") == [
        ("ALLOW", "INVOKING_SESSION")
    ]

    # S10: the person revokes the session's approvals; the next decision asks again.
    page.goto(f"{live_server.url}/approvals/sessions/")
    main_page(page, shot, "sessions")
    click_through(page, page.get_by_role("link", name="s-journey"))
    main_page(page, shot, "session")
    revoke = page.get_by_role("link", name="Revoke session approvals")
    assert_tappable(page, revoke)
    click_through(page, revoke)
    expect(page.get_by_role("heading", name="Revoke the approvals of session s-journey?")).to_be_visible()
    main_page(page, shot, "session-revoke-confirm")
    confirm = page.get_by_role("button", name="Revoke session approvals")
    assert_tappable(page, confirm)
    click_through(page, confirm)
    expect(page.get_by_text("Session approvals revoked: 1 removed.")).to_be_visible()
    main_page(page, shot, "session-revoked")
    assert decide(live_server, runtime_token, skills=["deploy"], session_id="s-journey") == [
        ("ASK", "DEFAULT")
    ]
    assert decide(live_server, runtime_token, skills=["deploy"], invoking_session_id="s-journey") == [
        ("ASK", "DEFAULT")
    ]


@at_both_widths
def test_an_approver_may_only_deny_a_sessionless_request_for_that_request(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    approver: User,
    runtime: AgentRuntime,
    runtime_token: str,
) -> None:
    # S13: alice is not the runtime's owner nor an operator, so an answer that would hold for
    # every session is not hers; she may refuse this one request only.
    status, created = call(
        live_server,
        runtime_token,
        "POST",
        "/api/v1/approval-requests",
        {"skills": ["backup"], "principal": "alice", "reason": "Nightly run"},
    )
    assert status == 201, created
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    card = page.locator(f"#request-{created['id']}")
    expect(card).to_be_visible()
    expect(card).to_contain_text(
        "You may refuse it with Deny this request: the runtime is told Deny for this request, "
        "and nothing is stored."
    )
    expect(page.locator("#deny-this-request-help")).to_contain_text("Deny this request")
    # Only the one button: no Deny, no Allow for this session, no Always allow.
    expect(card.get_by_role("button")).to_have_count(1)
    deny = card.get_by_role("button", name="Deny this request: backup")
    assert_tappable(page, deny)
    main_page(page, shot, "inbox-deny-this-request")

    deny.click()
    expect(card).to_contain_text("Answered: backup.")
    expect(card).to_contain_text("Deny this request")

    status, body = call(live_server, runtime_token, "GET", f"/api/v1/approval-requests/{created['id']}")
    assert status == 200
    assert body["status"] == "ANSWERED"
    assert body["items"] == [{"skill": "backup", "decision": "DENY", "scope": "REQUEST"}]
    # Nothing stored: the next run, and every session, are asked again.
    assert decide(live_server, runtime_token, skills=["backup"]) == [("ASK", "DEFAULT")]
    assert decide(live_server, runtime_token, skills=["backup"], session_id="s-other") == [("ASK", "DEFAULT")]
