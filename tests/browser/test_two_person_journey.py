"""The two-person rule in a real browser (P3): an operator writes a rule needing two people,
a runtime asks, one approver allows and is told it waits for another person, and a second
approver, in their own browser, completes it: the waiting long-poll returns ALLOW."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Browser, Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals.models import Grant
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import VIEWPORT, LogIn, Shot, main_page
from tests.browser.test_approvals_journey import call


def test_two_approvers_each_allow_and_the_second_completes_it(
    live_server: LiveServer,
    page: Page,
    browser: Browser,
    shot: Shot,
    log_in: LogIn,
    make_user: Callable[..., User],
    approver: User,  # alice, whose agent asks: a person here, so she is the one who never counts
    runtime: AgentRuntime,
    runtime_token: str,
) -> None:  # P3 end to end
    olivia = make_user("olivia", Role.OPERATOR)
    oscar = make_user("oscar", Role.OPERATOR)

    # The operator writes the rule: deploy asks, and two people must allow.
    log_in(page, olivia)
    page.goto(f"{live_server.url}/approvals/rules/skills/add/")
    form = page.locator("main form")
    form.get_by_label("Pattern").fill("deploy")
    form.get_by_label("Action").select_option("ASK")
    form.get_by_label("People who must allow").select_option("2")
    form.get_by_role("button", name="Save rule").click()
    expect(page.get_by_text("Rule for deploy saved.")).to_be_visible()
    expect(page.get_by_text("2 people must allow")).to_be_visible()

    # alice's agent asks; she cannot count, so two operators must allow it.
    status, created = call(
        live_server,
        runtime_token,
        "POST",
        "/api/v1/approval-requests",
        {"skills": ["deploy"], "session_id": "s-two", "principal": "alice", "reason": "Ship it"},
    )
    assert status == 201, created
    waited: dict[str, Any] = {}

    def long_poll() -> None:
        waited["status"], waited["body"] = call(
            live_server, runtime_token, "GET", f"/api/v1/approval-requests/{created['id']}?wait=30"
        )

    # The first person allows: recorded, 1 of 2, and the runtime still waits.
    page.goto(f"{live_server.url}/approvals/")
    card = page.locator(f"#request-{created['id']}")
    expect(card).to_contain_text("0 of 2 approvals")
    card.get_by_role("button", name="Allow for this session: deploy").click()
    expect(card).to_contain_text("Your allow of deploy is recorded: 1 of 2 approvals.")
    expect(card).to_contain_text("1 of 2 approvals: olivia allowed")
    expect(card).to_contain_text("You allowed it. It is waiting for another person.")
    expect(card.get_by_role("button", name="Allow for this session: deploy")).to_have_count(0)
    expect(card.get_by_role("button", name="Deny: deploy")).to_be_visible()
    main_page(page, shot, "first-allow")
    poller = threading.Thread(target=long_poll)
    poller.start()

    # The second person, in their own browser, sees who allowed and how, and completes it.
    context = browser.new_context(viewport=VIEWPORT)
    try:
        second = context.new_page()
        log_in(second, oscar)
        second.goto(f"{live_server.url}/approvals/requests/{created['id']}/")
        card = second.locator(f"#request-{created['id']}")
        expect(card).to_contain_text("1 of 2 approvals: olivia allowed")
        expect(card).to_contain_text("olivia allowed it as Allow for this session")
        expect(card.get_by_role("button", name="Always allow for this agent: deploy")).to_have_count(0)
        main_page(second, shot, "second-sees-one-of-two")
        card.get_by_role("button", name="Allow for this session: deploy").click()
        expect(card).to_contain_text("Answered: deploy.")
        main_page(second, shot, "second-completes")
    finally:
        context.close()

    poller.join(timeout=35)
    assert not poller.is_alive()
    assert waited["status"] == 200
    assert waited["body"]["status"] == "ANSWERED"
    assert waited["body"]["answered_by"] == "oscar"
    assert waited["body"]["items"] == [{"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"}]
    assert Grant.objects.filter(skill="deploy").count() == 1
