"""The homes in the browser, at 1280 and 390 px: each role's home fits the width, passes
axe-core, its counts are tappable links, and one click on a count opens the list it counts.
Verify now works from the home as from the audit home."""

from __future__ import annotations

import datetime as dt

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.roles import Role
from aimon_admin.audit import verify_now
from aimon_admin.registry import home as registry_home
from aimon_admin.registry.choices import SyncStatus
from aimon_admin.registry.models import McpSyncRun
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.accounts.factories import person
from tests.approvals.factories import open_skill_request, open_tool_request
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import LogIn, Shot, assert_fits_width, assert_tappable, at_both_widths
from tests.conftest import TEST_ACTOR
from tests.registry.factories import mcp_server


@pytest.fixture
def world(db: None) -> AgentRuntime:
    """Alice's skill and tool requests, a runtime whose tools fail unattended, a server whose
    sync failed (with a long name and error, for the phone's width)."""
    registry_home.forecast_forget()
    runtime = runtime_create(name="agent-with-a-rather-long-name-for-a-phone", actor=TEST_ACTOR)
    local_tools_replace(runtime=runtime, tools=[{"name": "Bash", "description": "shell"}], actor=TEST_ACTOR)
    for skills in (["deploy"], ["backup", "notify"]):
        open_skill_request(runtime, *skills, session_id="s-a", principal="alice")
    open_tool_request(runtime, "Bash", {"command": "git push"}, session_id="s-a", principal="alice")
    server = mcp_server("an-mcp-server-whose-name-goes-on-and-on")
    McpSyncRun.objects.create(
        server=server, status=SyncStatus.FAILED, error="x" * 400, finished_at=dt.datetime.now(dt.UTC)
    )
    return runtime


def check_home(page: Page, shot: Shot, name: str) -> None:
    assert_fits_width(page)
    assert_accessible(page, f"the {name} home")
    assert_tappable(page, page.locator("a.home-figure"))
    shot(page, name)


@at_both_widths
def test_the_approver_opens_their_tool_requests_from_the_home_in_one_click(
    live_server: LiveServer, page: Page, log_in: LogIn, world: AgentRuntime, device: str, shot: Shot
) -> None:
    log_in(page, person("alice", Role.APPROVER))
    figure = page.locator('a[data-figure="requests-tool"]')
    expect(figure).to_have_text("1 tool request")
    expect(page.locator('a[data-figure="requests-all"] .home-count')).to_have_text("3")
    check_home(page, shot, "approver")
    figure.click()
    expect(page).to_have_url(f"{live_server.url}/approvals/?kind=TOOL")
    expect(page.get_by_test_id("inbox-filter")).to_contain_text("Showing tool requests only.")
    expect(page.locator("#inbox article.request")).to_have_count(1)


@at_both_widths
def test_the_operator_home_shows_every_section_once_and_opens_the_failed_syncs(
    live_server: LiveServer, page: Page, log_in: LogIn, world: AgentRuntime, device: str, shot: Shot
) -> None:
    log_in(page, person("olivia", Role.OPERATOR, Role.AUDITOR))
    sections = page.locator("[data-home-section]")
    expect(sections).to_have_count(4)
    assert [s.get_attribute("data-home-section") for s in sections.all()] == [
        "requests",
        "registry",
        "audit",
        "people",
    ]
    expect(page.locator("#verification-card")).to_have_count(1)
    expect(page.locator('a[data-figure="forecast"] .home-count')).to_have_text("1")
    check_home(page, shot, "operator")
    page.locator('a[data-figure="syncs"]').click()
    expect(page).to_have_url(f"{live_server.url}/registry/servers/?sync=attention")
    expect(page.get_by_role("link", name="an-mcp-server-whose-name-goes-on-and-on")).to_be_visible()


@at_both_widths
def test_the_auditor_verifies_the_chain_from_the_home(
    live_server: LiveServer, page: Page, log_in: LogIn, world: AgentRuntime, device: str, shot: Shot
) -> None:
    verify_now.verification_forget()
    log_in(page, person("audrey", Role.AUDITOR))
    card = page.locator("#verification-card")
    expect(card).to_contain_text("Never verified")
    check_home(page, shot, "auditor")
    card.get_by_role("button", name="Verify now").click()
    expect(card.locator(".verify-result")).to_have_text(verify_now.VERIFIED_MESSAGE)
    expect(page).to_have_url(f"{live_server.url}/")  # swapped in place, on the home
    assert_fits_width(page)


@at_both_widths
def test_a_first_operator_is_told_to_create_a_runtime(
    live_server: LiveServer, page: Page, log_in: LogIn, db: None, device: str, shot: Shot
) -> None:
    log_in(page, person("first", Role.OPERATOR))
    assert_fits_width(page)
    assert_accessible(page, "the empty operator home")
    shot(page, "empty")
    page.get_by_role("link", name=registry_home.CREATE_RUNTIME).click()
    expect(page).to_have_url(f"{live_server.url}/runtimes/new/")
