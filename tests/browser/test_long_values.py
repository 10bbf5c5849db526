"""Tokens and long values in the browser: a new token is shown once and a reload issues no
second one; long values (at the limits the forms and the database now hold) wrap or are cut
instead of widening a page at 1280 px."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import TYPED_USERNAME_MAX
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, RuleAction
from aimon_admin.approvals.models import REQUEST_REASON_MAX, RULE_NOTE_MAX
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import RUNTIME_DESCRIPTION_MAX, AgentRuntime, RuntimeToken
from aimon_admin.runtimes.services import runtime_update_settings, token_issue
from aimon_admin.runtimes.views import TOKEN_ALREADY_SHOWN_MESSAGE
from tests.browser.conftest import LogIn, Shot, assert_fits_width
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.parametrize("device", ["desktop"])


def test_a_new_token_is_shown_once_and_a_reload_issues_no_second_one(
    live_server: LiveServer, page: Page, log_in: LogIn, operator: User, runtime: AgentRuntime
) -> None:
    # The page showing the token was once the POST's answer; a reload issued another.
    log_in(page, operator)
    page.goto(f"{live_server.url}/runtimes/{runtime.name}/")
    page.locator("input[name=label]").fill("ci host")
    page.get_by_role("button", name="Issue token").click()
    token_input = page.locator("#new-token")
    expect(token_input).to_have_attribute("readonly", "")
    token = token_input.input_value()
    assert token.startswith("aimon_")
    assert token not in page.url
    page.get_by_role("button", name="Copy").click()  # static JS (CSP): copies, or selects the value
    expect(page.locator("button[data-copy]")).not_to_have_text("Copy")

    page.reload()
    expect(page.locator("#token-already-shown")).to_have_text(TOKEN_ALREADY_SHOWN_MESSAGE)
    expect(page.locator("#new-token")).to_have_count(0)
    assert token not in page.content()
    assert RuntimeToken.objects.filter(runtime=runtime).count() == 1

    # An invalid settings form reloaded (GET on its address) goes to the runtime page, no 405.
    page.goto(f"{live_server.url}/runtimes/{runtime.name}/settings/")
    expect(page).to_have_url(f"{live_server.url}/runtimes/{runtime.name}/")


def test_long_values_do_not_widen_any_page_at_1280px(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    operator: User,
    auditor: User,
    runtime: AgentRuntime,
    make_user: Callable[..., User],
) -> None:
    # A 100,000-character description, a 20,000-character note and a 150-character username
    # typed at sign-in widened pages to 1,840 px. Now the longest value each field holds,
    # without a space to break at, must fit.
    runtime_update_settings(
        runtime=runtime,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        owner=operator,
        description="d" * RUNTIME_DESCRIPTION_MAX,
        actor=TEST_ACTOR,
    )
    token_issue(runtime=runtime, actor=TEST_ACTOR, label="L" * 100)
    rules.rule_create(
        pattern="p" * 199 + "*", action=RuleAction.ASK, note="n" * RULE_NOTE_MAX, actor=TEST_ACTOR
    )
    long_skill = "s" * 200
    approval, _ = request_create(
        RequestInput(
            runtime=runtime,
            skills=[long_skill, "deploy"],
            session_id="x" * 200,
            principal=operator.username,
            turn_id="t" * 200,
            reason="r" * REQUEST_REASON_MAX,
        )
    )
    request_answer(request=approval, user=operator, answer=Answer.ALLOW_SESSION, skills=["deploy"])
    pending, _ = request_create(
        RequestInput(
            runtime=runtime, skills=["k" * 200], session_id="y" * 200, reason="q" * REQUEST_REASON_MAX
        )
    )
    local_tools_replace(
        runtime=runtime, tools=[{"name": "t" * 200, "description": "w" * 5000}], actor=TEST_ACTOR
    )

    # A 150-character username typed at sign-in, no account needed.
    typed = "u" * 150
    page.goto(f"{live_server.url}/accounts/login/")
    page.locator("input[name=username]").fill(typed)
    page.locator("input[name=password]").fill("wrong password")
    page.get_by_role("button", name="Sign in").click()
    failed = AuditEvent.objects.get(action=AuditAction.LOGIN_FAILED)
    assert len(failed.subject) == TYPED_USERNAME_MAX
    assert failed.details["username_length"] == 150

    # An operator whose name is as long as a username can be (150): the top bar cuts it.
    long_named = make_user("o" * 150, Role.OPERATOR)
    log_in(page, long_named)
    tool_pk = runtime.tools.get().pk
    pages = [
        "/runtimes/",
        f"/runtimes/{runtime.name}/",
        "/approvals/rules/",
        "/approvals/",
        f"/approvals/requests/{approval.pk}/",
        f"/approvals/requests/{pending.pk}/",
        "/approvals/sessions/",
        f"/approvals/sessions/{approval.session.pk}/",
        f"/approvals/agents/{runtime.name}/",
        "/registry/tools/",
        f"/registry/tools/{tool_pk}/",
    ]
    for path in pages:
        page.goto(f"{live_server.url}{path}")
        assert_fits_width(page)
        shot(page, path.strip("/").replace("/", " ")[:40])

    page.context.clear_cookies()
    log_in(page, auditor)
    for path in ["/audit/", "/audit/events/", f"/audit/events/{failed.seq}/", "/audit/escalations/"]:
        page.goto(f"{live_server.url}{path}")
        assert_fits_width(page)
    page.goto(f"{live_server.url}/audit/")
    shot(page, "auditor overview")
