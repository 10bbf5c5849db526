"""What each role sees and can do in the browser, and an operator's runtime-and-token journey."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.choices import SideEffectLevel
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, follow_nav
from tests.core.test_views import APPROVER_NAV, AUDITOR_NAV, OPERATOR_NAV


def main_nav(page: Page) -> list[str]:
    return [text.strip() for text in page.locator("nav[aria-label=Main] a").all_inner_texts()]


def api_get_runtime(live_server: LiveServer, token: str) -> tuple[int, dict[str, object]]:
    """GET /api/v1/runtime over real HTTP, as an agent runtime would call it."""
    request = urllib.request.Request(  # noqa: S310 - an http:// URL of our own live server
        f"{live_server.url}/api/v1/runtime",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - as above
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    ("role", "expected_nav"),
    [("operator", OPERATOR_NAV), ("approver", APPROVER_NAV), ("auditor", AUDITOR_NAV)],
    ids=["operator", "approver", "auditor"],
)
def test_each_role_sees_its_own_navigation_and_badge_then_signs_out(
    role: str,
    expected_nav: list[str],
    request: pytest.FixtureRequest,
    page: Page,
    log_in: LogIn,
    live_server: LiveServer,
) -> None:
    user: User = request.getfixturevalue(role)  # the operator, approver, auditor fixtures
    log_in(page, user)

    assert main_nav(page) == expected_nav
    expect(page.locator("nav[aria-label=Main] a[aria-current=page]")).to_have_text("Home")
    badge = page.locator(".who .badge-role")
    expect(badge).to_have_count(1)
    expect(badge).to_have_text(role)
    expect(page.locator(".who-name")).to_have_text(user.username)

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{live_server.url}/accounts/login/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.locator("nav[aria-label=Main]")).to_have_count(0)
    # Signed out for real: the home page now sends the browser back to the login page.
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/accounts/login/?next=/")


def test_wrong_password_shows_an_error_and_stays_on_the_login_page(
    page: Page, operator: User, live_server: LiveServer
) -> None:
    login_url = f"{live_server.url}/accounts/login/"
    page.goto(login_url)
    page.locator("input[name=username]").fill(operator.username)
    page.locator("input[name=password]").fill("not the password")
    page.get_by_role("button", name="Sign in").click()

    expect(page.locator(".form-error[role=alert]")).to_contain_text("enter a correct username and password")
    expect(page.locator(".form-error[role=alert]")).to_contain_text("4 more failed attempts pause sign-in")
    # Post/redirect/get: the sign-in page again at its own address, the username kept,
    # never the password; a reload shows a fresh form and posts nothing.
    expect(page).to_have_url(login_url)
    expect(page.locator("nav[aria-label=Main]")).to_have_count(0)
    expect(page.locator("input[name=username]")).to_have_value(operator.username)
    expect(page.locator("input[name=password]")).to_have_value("")
    page.reload()
    expect(page.locator(".form-error[role=alert]")).to_have_count(0)
    # Not signed in: the start page still asks for a sign-in.
    page.goto(f"{login_url.removesuffix('/accounts/login/')}/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))


def test_auditor_reads_runtimes_but_cannot_create_change_or_issue_tokens(
    auditor: User, runtime: AgentRuntime, page: Page, log_in: LogIn, live_server: LiveServer
) -> None:
    log_in(page, auditor)
    # The page for creating one is refused, not merely unlinked.
    response = page.goto(f"{live_server.url}/runtimes/new/")
    assert response is not None
    assert response.status == 403

    page.goto(f"{live_server.url}/")
    follow_nav(page, "Runtimes")
    expect(page).to_have_url(f"{live_server.url}/runtimes/")
    expect(page.get_by_role("heading", name="Agent runtimes")).to_be_visible()
    expect(page.get_by_role("link", name=runtime.name)).to_be_visible()
    expect(page.get_by_role("link", name="New runtime")).to_have_count(0)

    page.get_by_role("link", name=runtime.name).click()
    expect(page).to_have_url(f"{live_server.url}/runtimes/{runtime.name}/")
    settings = page.locator("#runtime-settings")
    # The ceiling in words, its code on hover.
    expect(settings.locator("dl.facts")).to_contain_text(SideEffectLevel(runtime.ceiling).label)
    expect(settings.locator(f'dl.facts [title="{runtime.ceiling}"]')).to_have_count(1)
    expect(settings.locator("form, select, input, textarea")).to_have_count(0)
    expect(page.get_by_role("button", name="Save settings")).to_have_count(0)
    expect(page.get_by_role("button", name="Issue token")).to_have_count(0)
    expect(page.get_by_role("link", name="Revoke…")).to_have_count(0)


def test_approver_gets_a_403_page_for_the_runtime_list(
    approver: User, runtime: AgentRuntime, page: Page, log_in: LogIn, live_server: LiveServer
) -> None:
    log_in(page, approver)
    response = page.goto(f"{live_server.url}/runtimes/")
    assert response is not None
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.get_by_text("Your role does not allow this page.")).to_be_visible()
    expect(page.get_by_text(runtime.name)).to_have_count(0)


def test_operator_creates_runtime_changes_ceiling_by_htmx_and_issues_then_revokes_a_token(
    operator: User, page: Page, log_in: LogIn, live_server: LiveServer
) -> None:
    log_in(page, operator)

    # Create a runtime through the form.
    page.goto(f"{live_server.url}/runtimes/")
    page.get_by_role("link", name="New runtime").click()
    expect(page).to_have_url(f"{live_server.url}/runtimes/new/")
    page.locator("input[name=name]").fill("browser-agent")
    page.locator("select[name=ceiling]").select_option(SideEffectLevel.MUTATING)
    page.locator("select[name=exempt_at_or_below]").select_option(SideEffectLevel.READ_ONLY)
    page.locator("select[name=owner]").select_option(operator.username)
    page.locator("textarea[name=description]").fill("Made in a browser test.")
    page.get_by_role("button", name="Create runtime").click()

    detail_url = f"{live_server.url}/runtimes/browser-agent/"
    expect(page).to_have_url(detail_url)
    expect(page.get_by_role("heading", name="browser-agent", exact=True)).to_be_visible()
    expect(page.locator(".messages")).to_contain_text("Runtime browser-agent created.")
    runtime = AgentRuntime.objects.get(name="browser-agent")
    assert runtime.ceiling == SideEffectLevel.MUTATING
    assert runtime.owner == operator
    assert runtime.description == "Made in a browser test."

    # Lower the ceiling: htmx swaps the settings card in place, the page never reloads.
    page.evaluate("window.__marker = 1")
    settings = page.locator("#runtime-settings")
    settings.locator("select[name=ceiling]").select_option(SideEffectLevel.READ_ONLY)
    with page.expect_response(f"{detail_url}settings/") as settings_response:
        page.get_by_role("button", name="Save settings").click()
    assert settings_response.value.request.headers.get("hx-request") == "true"
    expect(settings.locator(".toast")).to_have_text("Settings saved.")
    assert page.evaluate("window.__marker") == 1
    expect(page).to_have_url(detail_url)
    expect(settings.locator("select[name=ceiling]")).to_have_value(SideEffectLevel.READ_ONLY)
    runtime.refresh_from_db()
    assert runtime.ceiling == SideEffectLevel.READ_ONLY
    change = AuditEvent.objects.get(action=AuditAction.RUNTIME_SETTINGS_CHANGED, subject="browser-agent")
    assert change.details["changed"] == ["ceiling"]

    # Issue a token; it is shown once, and the API accepts it over real HTTP.
    page.locator("input[name=label]").fill("ci host")
    page.get_by_role("button", name="Issue token").click()
    token_input = page.locator("#new-token")
    expect(token_input).to_have_attribute("readonly", "")
    token = token_input.input_value()
    assert token.startswith("aimon_")
    status, body = api_get_runtime(live_server, token)
    assert status == 200
    assert body["name"] == "browser-agent"
    assert body["ceiling"] == SideEffectLevel.READ_ONLY

    # Back to the runtime, revoke the token through the confirmation page.
    page.get_by_role("link", name="Done").click()
    expect(page).to_have_url(detail_url)
    row = page.locator("#runtime-tokens tbody tr", has_text="ci host")
    expect(row).to_contain_text("Active")
    row.get_by_role("link", name="Revoke…").click()
    expect(page.get_by_role("heading", name="Revoke token")).to_be_visible()
    page.get_by_role("button", name="Revoke token").click()

    expect(page).to_have_url(detail_url)
    expect(page.locator(".messages")).to_contain_text("revoked")
    expect(row).to_contain_text("Revoked")
    expect(row.get_by_role("link", name="Revoke…")).to_have_count(0)
    status, _ = api_get_runtime(live_server, token)
    assert status == 401
    assert AuditEvent.objects.filter(action=AuditAction.TOKEN_REVOKED).count() == 1


def test_settings_form_still_saves_with_javascript_off(
    operator: User,
    runtime: AgentRuntime,
    page_without_javascript: Page,
    log_in: LogIn,
    live_server: LiveServer,
) -> None:
    page = log_in(page_without_javascript, operator)
    detail_url = f"{live_server.url}/runtimes/{runtime.name}/"
    page.goto(detail_url)
    assert page.evaluate("typeof window.htmx") == "undefined"  # the page ran no script
    page.locator("#runtime-settings select[name=ceiling]").select_option(SideEffectLevel.READ_ONLY)
    page.get_by_role("button", name="Save settings").click()

    # The plain POST is answered with a redirect back to the page and a message.
    expect(page).to_have_url(detail_url)
    expect(page.locator(".messages")).to_have_text("Settings saved.")
    expect(page.locator("#runtime-settings select[name=ceiling]")).to_have_value(SideEffectLevel.READ_ONLY)
    runtime.refresh_from_db()
    assert runtime.ceiling == SideEffectLevel.READ_ONLY
