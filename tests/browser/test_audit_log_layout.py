"""The audit log as dense as an admin's log, in Chromium: at 1280 px one line per event (50
rows well under the ~5,500 px they took), long values cut to their cell, "anonymous" never
broken, the header stuck to the top while the rows scroll, and the exact UTC time with the
relative one on hover; at 390 px each event is a card with every value whole and nothing
scrolls sideways. A filter that cannot be read is said beside its field, the form kept."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser import a11y
from tests.browser.conftest import LogIn, Shot, assert_fits_width, at_both_widths

LONG_SESSION = "session-" + "0123456789abcdef" * 6
LONG_SUBJECT = "mcp__filesystem__" + "write_a_very_long_file_name_" * 4


@pytest.fixture
def sixty_events(runtime: AgentRuntime) -> None:
    """Sixty events with long values and the anonymous actor, as a busy log holds them."""
    with transaction.atomic():
        for n in range(60):
            audit_record(
                action=AuditAction.LOGIN_FAILED if n % 3 == 0 else AuditAction.SKILL_GRANT_ESCALATED,
                actor=Actor.system("anonymous") if n % 3 == 0 else Actor.for_runtime(runtime),
                level=AuditLevel.WARNING if n % 5 == 0 else AuditLevel.INFO,
                runtime=runtime,
                session_key=f"{LONG_SESSION}-{n}",
                subject_type="tool",
                subject=LONG_SUBJECT,
            )


@at_both_widths
def test_the_log_is_one_line_per_event_and_a_card_per_event_on_a_phone(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    auditor: User,
    sixty_events: None,
    device: str,
) -> None:
    log_in(page, auditor)
    page.goto(f"{live_server.url}/audit/events/")
    rows = page.locator("table.audit-log tbody tr")
    expect(rows).to_have_count(50)
    assert_fits_width(page)
    a11y.assert_accessible(page, f"audit log ({device})")
    shot(page, "log")

    # The exact UTC time to read, the relative one on hover.
    time = rows.first.locator("time")
    expect(time).to_have_text(re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$"))
    expect(time).to_have_attribute("title", "less than a minute ago")
    subject = page.locator(f'table.audit-log tbody td[title="{LONG_SUBJECT}"]').first
    expect(subject).to_have_text(LONG_SUBJECT)

    if device == "phone":
        # Each event a card of "label value" lines, every value whole: nothing cut, nothing
        # sideways, no table to scroll.
        assert subject.evaluate("cell => cell.scrollWidth <= cell.clientWidth + 1")
        labels = rows.first.locator("td").evaluate_all(
            "cells => cells.map(cell => getComputedStyle(cell, '::before').content)"
        )
        assert labels[:4] == ['"#"', '"When"', '"Level"', '"Action"'], labels
        region = page.locator(".audit-log-wrap")
        assert region.evaluate("box => box.scrollWidth <= box.clientWidth + 1")
        return

    heights = rows.evaluate_all("rows => rows.map(row => row.getBoundingClientRect().height)")
    line = page.locator("table.audit-log tbody td").first.evaluate(
        "cell => parseFloat(getComputedStyle(cell).lineHeight)"
    )
    # One line each: no row is taller than a line of text, its padding and its border.
    assert max(heights) < line + 14, heights
    table = page.locator("table.audit-log").bounding_box()
    assert table is not None
    assert table["height"] < 2000, table

    # "anonymous" is never broken mid-word, and a cut value keeps its whole on hover.
    anonymous = page.locator("table.audit-log tbody td", has_text="anonymous").first
    assert anonymous.evaluate("cell => getComputedStyle(cell).whiteSpace") == "nowrap"
    assert subject.evaluate("cell => cell.scrollWidth > cell.clientWidth")  # cut, with an ellipsis

    # The header stays at the top of the window while the rows scroll under it.
    header = page.locator("table.audit-log thead th").first
    rows.nth(40).scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 500
    box = header.bounding_box()
    assert box is not None
    assert -1 <= box["y"] <= 1, box


@at_both_widths
def test_a_bad_filter_is_said_beside_its_field_with_the_form_kept(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    auditor: User,
    sixty_events: None,
    device: str,
) -> None:
    log_in(page, auditor)
    # Without htmx in the way: the address typed (a bookmark, a shared link).
    page.goto(f"{live_server.url}/audit/events/?runtime=nope&actor=anonymous")
    expect(page.locator("#f-runtime-error")).to_have_text("No runtime is named 'nope'.")
    expect(page.locator("#f-runtime")).to_have_value("nope")
    expect(page.locator("#f-actor")).to_have_value("anonymous")
    expect(page.get_by_role("alert")).to_contain_text("Runtime: No runtime is named 'nope'.")
    assert_fits_width(page)
    a11y.assert_accessible(page, f"audit log, a filter error ({device})")
    shot(page, "bad-filter")

    # Corrected in place (htmx): the events come back, filtered.
    page.locator("#f-runtime").fill("agent-one")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("table.audit-log tbody tr")).to_have_count(20)
    expect(page).to_have_url(f"{live_server.url}/audit/events/?actor=anonymous&runtime=agent-one")

    # The range pickers are native date-time inputs, in UTC.
    since = page.locator("#f-since")
    expect(since).to_have_attribute("type", "datetime-local")
    since.fill("2020-01-31T14:05")
    since.dispatch_event("change")
    expect(page).to_have_url(
        f"{live_server.url}/audit/events/?actor=anonymous&runtime=agent-one&since=2020-01-31T14%3A05"
    )
    expect(page.locator("table.audit-log tbody tr")).to_have_count(20)
