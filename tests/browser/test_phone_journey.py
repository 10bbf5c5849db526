"""Approving and revoking from a phone: at 390x844 with touch, the inbox, a request, the
session page with Clear and Revoke and their confirmations, and the agent-wide page with
Revoke agent-wide all fit the screen (no sideways scrolling), and every answer, revoke and
confirm button is at least 44x44 px and inside the screen's width. Each is used, not only
looked at: the answers and revokes land (S4, S10, S11)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import GrantScope
from aimon_admin.approvals.models import Grant
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot, assert_tappable, click_through, follow_nav, main_page

pytestmark = pytest.mark.parametrize("device", ["phone"])


def test_at_phone_width_a_person_answers_then_revokes_session_and_agent_wide_approvals(
    live_server: LiveServer, page: Page, shot: Shot, log_in: LogIn, approver: User, runtime: AgentRuntime
) -> None:
    # alice owns the runtime, so she is offered "Always allow for this agent" (S13).
    runtime.owner = approver
    runtime.save(update_fields=["owner"])
    in_session, _ = request_create(
        RequestInput(
            runtime=runtime,
            skills=["deploy-staging", "notify-team"],
            session_id="s-phone",
            principal="alice",
            reason="Deploy the release branch to staging, then tell the team.",
        )
    )
    request_create(
        RequestInput(
            runtime=runtime, skills=["read-logs"], invoking_session_id="s-phone", reason="A sub-agent's logs."
        )
    )
    request_create(
        RequestInput(runtime=runtime, skills=["nightly-backup"], principal="alice", reason="Nightly.")
    )
    assert page.viewport_size == {"width": 390, "height": 844}

    # The inbox: three kinds of request, every answer a thumb-sized button.
    log_in(page, approver)
    follow_nav(page, "Inbox")
    inbox = page.locator("#inbox")
    expect(inbox.locator("article.request")).to_have_count(3)
    expect(inbox).to_contain_text("becomes agent-wide")  # the sessionless request's warning (S6)
    main_page(page, shot, "inbox")
    assert assert_tappable(page, inbox.locator("button.btn-answer")) >= 10
    assert_tappable(page, inbox.get_by_role("link", name="Deny the rest…"))

    # A request on its own page: answer one skill per button.
    click_through(page, inbox.locator(f"#request-{in_session.pk}").get_by_role("link", name=runtime.name))
    expect(page).to_have_url(f"{live_server.url}/approvals/requests/{in_session.pk}/")
    card = page.locator(f"#request-{in_session.pk}")
    expect(card.locator(".reach")).to_contain_text("reaches every session of agent-one")
    main_page(page, shot, "request")
    assert_tappable(page, card.locator("button.btn-answer"))
    card.get_by_role("button", name="Allow for this session: deploy-staging").click()
    expect(card).to_contain_text("Answered: deploy-staging.")
    card.get_by_role("button", name="Always allow for this agent: notify-team").click()
    expect(card).to_contain_text("Answered: notify-team.")
    main_page(page, shot, "request-answered")
    assert Grant.objects.filter(scope=GrantScope.SESSION, skill="deploy-staging").exists()
    assert Grant.objects.filter(scope=GrantScope.AGENT, skill="notify-team").exists()

    # The session page: Clear and Revoke, and a Revoke… per approval.
    page.goto(f"{live_server.url}/approvals/sessions/")
    click_through(page, page.get_by_role("link", name="s-phone"))
    expect(page.get_by_role("heading", name="Session s-phone")).to_be_visible()
    main_page(page, shot, "session")
    assert_tappable(page, page.get_by_role("link", name="Clear session"))
    assert_tappable(page, page.get_by_role("link", name="Revoke session approvals"))
    assert_tappable(page, page.get_by_role("link", name="Revoke…"))
    session_url = page.url

    click_through(page, page.get_by_role("link", name="Clear session"))
    expect(page.get_by_role("heading", name="Clear session s-phone?")).to_be_visible()
    main_page(page, shot, "session-clear-confirm")
    assert_tappable(page, page.get_by_role("button", name="Clear session"))
    assert_tappable(page, page.get_by_role("link", name="Cancel"))
    click_through(page, page.get_by_role("link", name="Cancel"))

    page.goto(session_url)
    click_through(page, page.get_by_role("link", name="Revoke session approvals"))
    expect(page.get_by_role("heading", name="Revoke the approvals of session s-phone?")).to_be_visible()
    main_page(page, shot, "session-revoke-confirm")
    assert_tappable(page, page.get_by_role("button", name="Revoke session approvals"))
    click_through(page, page.get_by_role("button", name="Revoke session approvals"))
    expect(page.get_by_text("Session approvals revoked: 1 removed.")).to_be_visible()
    assert not Grant.objects.active().filter(scope=GrantScope.SESSION, skill="deploy-staging").exists()

    # The agent-wide page: Revoke agent-wide and its confirmation.
    page.goto(f"{live_server.url}/approvals/agents/{runtime.name}/")
    expect(page.get_by_role("heading", name=f"Agent-wide approvals of {runtime.name}")).to_be_visible()
    expect(page.locator("main")).to_contain_text("notify-team")
    main_page(page, shot, "agent-wide")
    assert_tappable(page, page.get_by_role("link", name="Revoke agent-wide"))
    assert_tappable(page, page.get_by_role("link", name="Revoke…"))
    click_through(page, page.get_by_role("link", name="Revoke agent-wide"))
    heading = f"Revoke every agent-wide approval of {runtime.name}?"
    expect(page.get_by_role("heading", name=heading)).to_be_visible()
    main_page(page, shot, "agent-wide-revoke-confirm")
    assert_tappable(page, page.get_by_role("button", name="Revoke agent-wide"))
    assert_tappable(page, page.get_by_role("link", name="Cancel"))
    click_through(page, page.get_by_role("button", name="Revoke agent-wide"))
    expect(page.get_by_text("Agent-wide approvals revoked: 1 removed.")).to_be_visible()
    main_page(page, shot, "agent-wide-revoked")
    assert not Grant.objects.active().filter(scope=GrantScope.AGENT).exists()
