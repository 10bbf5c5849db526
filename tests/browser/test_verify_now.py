"""Verify now in the browser: the auditor's click verifies the chain and the card shows the
outcome in place, at both widths."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.audit import verify_now
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import LogIn, Shot, assert_fits_width, assert_tappable, at_both_widths


@at_both_widths
def test_an_auditor_verifies_the_chain_from_the_audit_home(
    live_server: LiveServer, page: Page, log_in: LogIn, auditor: User, device: str, shot: Shot
) -> None:
    verify_now.verification_forget()
    log_in(page, auditor)
    page.goto(f"{live_server.url}/audit/")
    card = page.locator("#verification-card")
    expect(card).to_contain_text("Never verified")
    button = card.get_by_role("button", name="Verify now")
    assert_tappable(page, button)
    button.click()
    expect(card.locator(".verify-result")).to_have_text(verify_now.VERIFIED_MESSAGE)
    expect(card.locator(".badge-ok")).to_have_text("Verified")
    expect(page).to_have_url(f"{live_server.url}/audit/")  # swapped in place
    assert_fits_width(page)
    assert_accessible(page, "the audit home after Verify now")
    shot(page, "verified")
    # Without htmx's swap (a reload), the page shows the same outcome.
    page.reload()
    expect(page.locator("#verification-card .badge-ok")).to_have_text("Verified")
