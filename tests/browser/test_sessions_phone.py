"""My sessions on a phone: at 390 px the sessions table shows each session as a stack of
"label: value" lines, every column there to read, with nothing cut off and no sideways
scroll, not even inside the table's own region."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import LogIn, Shot, assert_fits_width

SESSIONS = ("s-1", "a-rather-long-session-id-from-a-terminal-2026-12-02T05:00", "s-3")


@pytest.mark.parametrize("device", ["phone"])
def test_my_sessions_fit_a_phone_without_sideways_scroll(
    page: Page, log_in: LogIn, approver: User, runtime: AgentRuntime, live_server: LiveServer, shot: Shot
) -> None:
    for session_id in SESSIONS:
        request = request_create(
            RequestInput(runtime=runtime, skills=["deploy"], session_id=session_id, principal="alice")
        )[0]
        request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/sessions/")
    region = page.get_by_role("region", name="Sessions")
    expect(region).to_be_visible()

    assert_fits_width(page)
    scroll = region.evaluate("n => [n.scrollWidth, n.clientWidth]")
    assert scroll[0] <= scroll[1] + 1, f"the sessions table scrolls sideways: {scroll}"
    for cell in region.locator("td").all():
        box = cell.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= 390 + 1, f"{cell.inner_text()!r} is cut off: {box}"
    # Every column is there to read, with its name beside it.
    first = region.locator("tbody tr").first
    for label in ("Runtime", "Principal", "Approvals in force", "Last seen"):
        expect(first.locator(f'td[data-label="{label}"]')).to_be_visible()
    expect(region.get_by_role("link", name=SESSIONS[1])).to_be_visible()
    assert_accessible(page, "my sessions on a phone")
    shot(page, "my sessions")
