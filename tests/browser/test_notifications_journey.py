"""Reaching a person, in a real browser (P1): Alice adds an ntfy-style channel on her
notifications page and presses *Send a test*; a runtime asks on her behalf; the message
arrives at a local ntfy-style receiver (Apprise's ntfy URL pointed at 127.0.0.1) with the
request's link as its tap and Open action; the link, opened signed out, asks for sign-in and
then lands on the request, which answers nothing until she clicks. At desktop and at phone
width; each main page is kept as a screenshot and checked with axe-core."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Browser, Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestStatus
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.notifications.views import CHANNEL_ADDED, TEST_SENT
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import DEVICES, LogIn, Shot, at_both_widths, follow_nav, main_page
from tests.browser.test_approvals_journey import call
from tests.conftest import PASSWORD
from tests.notifications.receivers import http_receiver


@at_both_widths
def test_a_person_adds_a_phone_channel_and_the_request_reaches_it_with_its_link(
    live_server: LiveServer,
    page: Page,
    browser: Browser,
    device: str,
    shot: Shot,
    log_in: LogIn,
    approver: User,
    runtime: AgentRuntime,
    runtime_token: str,
    settings: Any,
) -> None:
    settings.AIMON_BASE_URL = live_server.url
    with http_receiver() as phone:
        log_in(page, approver)
        follow_nav(page, "My notifications")
        expect(page.get_by_role("heading", name="My notifications", level=1)).to_be_visible()
        main_page(page, shot, "no channels")

        page.get_by_label("Kind").select_option("APPRISE")
        page.get_by_label("Name").fill("phone")
        page.get_by_label("Address or URL").fill(f"ntfy://{phone.base}/alice-phone")
        page.get_by_role("button", name="Add channel").click()
        expect(page.get_by_text(CHANNEL_ADDED)).to_be_visible()
        page.get_by_role("button", name="Send a test").click()
        expect(page.get_by_text(TEST_SENT)).to_be_visible()
        (test,) = phone.wait(1)
        assert json.loads(test.body)["title"] == "AIMON Admin: test message"
        main_page(page, shot, "a channel that works")

        status, opened = call(
            live_server,
            runtime_token,
            "POST",
            "/api/v1/approval-requests",
            {
                "skills": ["deploy"],
                "session_id": "s-phone",
                "principal": "alice",
                "reason": "ship the release",
            },
        )
        assert status == 201, opened
        _, message = phone.wait(2)
    body = json.loads(message.body)
    link = f"{live_server.url}/approvals/requests/{opened['id']}/"
    assert body["title"] == "agent-one asks for deploy"
    assert "Reason: ship the release" in body["message"]
    assert message.headers["x-click"] == link
    assert message.headers["x-actions"] == f"view, Open, {link}"

    # The link, tapped on a phone that is not signed in: sign-in first, then the request.
    context = browser.new_context(**DEVICES[device])
    try:
        tapped = context.new_page()
        tapped.goto(link)
        expect(tapped).to_have_url(
            f"{live_server.url}/accounts/login/?next=/approvals/requests/{opened['id']}/"
        )
        tapped.locator("input[name=username]").fill(approver.username)
        tapped.locator("input[name=password]").fill(PASSWORD)
        tapped.get_by_role("button", name="Sign in").click()
        expect(tapped).to_have_url(link)
        expect(tapped.get_by_text("deploy").first).to_be_visible()
        main_page(tapped, shot, "the request, reached from the message")
    finally:
        context.close()
    # Opening it answered nothing.
    assert ApprovalRequest.objects.get(pk=opened["id"]).status == RequestStatus.PENDING
