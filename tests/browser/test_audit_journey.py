"""The auditor's journey in a real browser: a runtime asks with no session, the runtime's
owner answers "for this session" on the card that warns it becomes agent-wide, and the
auditor finds that escalated grant on the escalations page, opens its audit event, filters
the log (htmx, kept in the URL) and exports the filtered log as JSON Lines whose lines verify
against the chain (S6, A1, A2). At desktop and at phone width; each main page is kept as a
screenshot and checked with axe-core."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import GrantOrigin, GrantScope
from aimon_admin.approvals.models import Grant
from aimon_admin.audit import chain
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot, at_both_widths, follow_nav, main_page
from tests.browser.test_approvals_journey import call


@at_both_widths
def test_auditor_finds_an_escalated_grant_opens_it_filters_and_exports(
    live_server: LiveServer,
    page: Page,
    shot: Shot,
    log_in: LogIn,
    auditor: User,
    approver: User,
    runtime: AgentRuntime,
    runtime_token: str,
) -> None:
    # S6: alice owns the runtime (so may answer agent-wide, S13). The runtime asks over the
    # API with no session; alice reads the warning on the card and answers "for this
    # session": it is written agent-wide, with a WARNING event.
    runtime.owner = approver
    runtime.save(update_fields=["owner"])
    status, created = call(
        live_server,
        runtime_token,
        "POST",
        "/api/v1/approval-requests",
        {"skills": ["deploy"], "principal": "alice", "reason": "Nightly release"},
    )
    assert status == 201, created
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    card = page.locator(f"#request-{created['id']}")
    expect(card.locator(f"#request-{created['id']}-escalation")).to_contain_text(
        "A session answer here, Deny included, becomes agent-wide"
    )
    card.get_by_role("button", name="Allow for this session: deploy").click()
    expect(card).to_contain_text("Answered: deploy.")
    grant = Grant.objects.get(request_id=created["id"])
    assert (grant.scope, grant.origin) == (GrantScope.AGENT, GrantOrigin.ESCALATION)
    event = AuditEvent.objects.get(action=AuditAction.SKILL_GRANT_ESCALATED)
    page.context.clear_cookies()

    log_in(page, auditor)
    follow_nav(page, "Audit log")
    expect(page.get_by_test_id("escalations-in-force")).to_have_text("1")
    main_page(page, shot, "audit-home")
    page.get_by_role("link", name="See escalated grants").click()
    expect(page).to_have_url(f"{live_server.url}/audit/escalations/")
    row = page.locator(f'li[data-seq="{event.seq}"]')
    expect(row).to_contain_text("deploy")
    expect(row).to_contain_text(
        "All sessions of runtime agent-one, no expiry, survives Clear, "
        "holds until it is revoked, on its own or with Revoke agent-wide"
    )
    expect(row).to_contain_text(re.compile(r"Granted by\s*alice"))
    expect(row).to_contain_text("Nightly release")
    expect(row.locator(".badge", has_text="In force")).to_be_visible()
    main_page(page, shot, "escalations")

    row.get_by_role("link", name=f"Audit event #{event.seq}").click()
    expect(page).to_have_url(f"{live_server.url}/audit/events/{event.seq}/")
    expect(
        page.get_by_role("heading", name=f"#{event.seq} Session answer escalated to agent-wide")
    ).to_be_visible()
    expect(page.locator("#grant-head")).to_be_visible()
    expect(page.get_by_text("Its hash matches its content.")).to_be_visible()
    expect(page.get_by_text(event.hash)).to_be_visible()
    main_page(page, shot, "event")

    # Filter the log: htmx swaps the results and keeps the filter in the URL.
    page.goto(f"{live_server.url}/audit/events/")
    page.evaluate("window.__noReload = 1")
    page.locator("#f-action").select_option("SKILL_GRANT_ESCALATED")
    expect(page).to_have_url(re.compile(r"/audit/events/\?action=SKILL_GRANT_ESCALATED$"))
    rows = page.locator("#log-results tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-seq", str(event.seq))
    assert page.evaluate("window.__noReload") == 1
    main_page(page, shot, "log-filtered")
    page.locator("#f-level").select_option("INFO")
    expect(page.get_by_text("No event matches these filters.")).to_be_visible()
    page.locator("#f-level").select_option("")
    expect(rows).to_have_count(1)

    # Export what is shown: one line, the event's hashed content plus its hash.
    with page.expect_download() as download_info:
        page.locator("#log-results").get_by_role("link", name="JSON Lines").click()
    download = download_info.value
    assert re.fullmatch(r"audit-events-\d{8}T\d{6}Z\.jsonl", download.suggested_filename)
    lines = download.path().read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    stored_hash = record.pop("hash")
    assert record == event.content()
    assert chain.compute_hash(record) == stored_hash == event.hash
