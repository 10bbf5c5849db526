"""Undo in a real browser (S14): a person answers the last skill of a request, its card gives
way to a line saying how it was answered, and Undo… on it opens to say what it takes back;
Revoke the allow revokes that one answer. With htmx the line is redrawn in place, with no
reload; without JavaScript the same forms post and the inbox comes back saying so."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import Grant
from aimon_admin.approvals.session_views import UNDONE_MESSAGE
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import open_skill_request, skill_decisions
from tests.browser.conftest import LogIn, Shot, assert_tappable, at_both_widths, click_through, main_page

UNDONE = UNDONE_MESSAGE.format(how="Allow for this session", label="deploy", runtime="agent-one")


@at_both_widths
def test_undo_revokes_the_allow_just_given_in_place(
    live_server: LiveServer, page: Page, shot: Shot, log_in: LogIn, approver: User, runtime: AgentRuntime
) -> None:  # S14
    request = open_skill_request(runtime, "deploy", reason="Ship it")
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    page.evaluate("window.__noReload = 1")
    page.get_by_role("button", name="Allow for this session: deploy").click()

    # The card gives way (at the next poll) to the line saying what became of it.
    line = page.locator(f'.just-answered li[data-request="{request.pk}"]')
    expect(line).to_contain_text("deploy: Allow for this session")
    expect(page.locator(f"#request-{request.pk}")).to_have_count(0)
    undo = line.get_by_text("Undo…")
    revoke = line.get_by_role("button", name="Revoke the allow of deploy")
    expect(revoke).to_be_hidden()  # nothing is revoked by a stray tap: it opens first
    undo.click()
    expect(line).to_contain_text("agent-one asks again the next time")
    expect(revoke).to_be_visible()
    assert_tappable(page, line.locator("summary, button"))
    main_page(page, shot, "undo-open")

    revoke.click()
    expect(line).to_contain_text(UNDONE)
    expect(line.get_by_test_id("undone")).to_contain_text("revoked by you")
    expect(line.locator("summary")).to_have_count(0)
    assert page.evaluate("window.__noReload") == 1  # redrawn in place
    main_page(page, shot, "undone")
    assert Grant.objects.get(request=request).revoked_by == approver
    assert skill_decisions(runtime, "deploy") == {"deploy": ("ASK", "DEFAULT")}


def test_undo_works_without_javascript(
    live_server: LiveServer,
    page_without_javascript: Page,
    log_in: LogIn,
    approver: User,
    runtime: AgentRuntime,
) -> None:  # S14
    page = log_in(page_without_javascript, approver)
    request = open_skill_request(runtime, "deploy")
    page.goto(f"{live_server.url}/approvals/")
    click_through(page, page.get_by_role("button", name="Allow for this session: deploy"))
    line = page.locator(f'.just-answered li[data-request="{request.pk}"]')
    line.get_by_text("Undo…").click()  # <details> opens without any script
    click_through(page, line.get_by_role("button", name="Revoke the allow of deploy"))
    expect(page).to_have_url(f"{live_server.url}/approvals/")
    expect(page.get_by_text(UNDONE)).to_be_visible()
    expect(line.get_by_test_id("undone")).to_contain_text("revoked by you")
    assert skill_decisions(runtime, "deploy") == {"deploy": ("ASK", "DEFAULT")}
