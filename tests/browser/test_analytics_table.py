"""The decision analytics table in the browser: at 1280 px it fits its box (it overflowed),
on a phone it scrolls inside its own region, and days without a decision are folded into one
row per quiet stretch (30 all-zero rows were listed)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import LogIn, Shot, assert_fits_width, at_both_widths

# How far the table's content reaches past its box, in px (0: it fits).
_OVERFLOW = "el => el.scrollWidth - el.clientWidth"


@pytest.fixture
def two_busy_days(runtime: AgentRuntime, approver: User) -> list[dt.date]:
    """Requests answered five and two days ago; every other day of the period is quiet."""
    today = timezone.now().date()
    days = [today - dt.timedelta(days=5), today - dt.timedelta(days=2)]
    for number, day in enumerate(days):
        request, _ = request_create(
            RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{number}", principal="alice")
        )
        request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
        opened = dt.datetime.combine(day, dt.time(10), tzinfo=dt.UTC)
        answered = opened + dt.timedelta(seconds=42)
        ApprovalRequest.objects.filter(pk=request.pk).update(created_at=opened, answered_at=answered)
        Grant.objects.filter(request=request).update(created_at=answered)
    return days


@at_both_widths
def test_the_daily_table_fits_and_folds_quiet_days(
    live_server: LiveServer,
    page: Page,
    log_in: LogIn,
    auditor: User,
    two_busy_days: list[dt.date],
    device: str,
    shot: Shot,
) -> None:
    log_in(page, auditor)
    page.goto(f"{live_server.url}/audit/analytics/?period=30d")
    table = page.locator("table.analytics-table")
    expect(table).to_be_visible()
    rows = table.locator("tbody tr")
    # Quiet, busy, quiet, busy, quiet: 5 rows for 30 days.
    expect(rows).to_have_count(5)
    expect(rows.nth(0)).to_contain_text("No decisions on these 24 days.")
    expect(rows.nth(1).locator("th")).to_have_text(two_busy_days[0].isoformat())
    expect(rows.nth(2)).to_contain_text("No decisions on these 2 days.")
    assert_fits_width(page)
    wrap = page.locator(".analytics-data .table-wrap")
    if device == "desktop":
        assert wrap.evaluate(_OVERFLOW) <= 0, "the daily table overflows its box at 1280 px"
        assert page.locator(".analytics-runtimes").locator("xpath=..").evaluate(_OVERFLOW) <= 0
    else:
        expect(wrap).to_have_attribute("tabindex", "0")  # a phone scrolls it inside its own region
    assert_accessible(page, "decision analytics")
    shot(page, "analytics")
