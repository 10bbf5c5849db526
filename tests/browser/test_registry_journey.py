"""The operator's registry journey in a real browser (issue: tool and MCP registry):
sync a real MCP server and watch the outcome, read the trust confirmation, switch to
TRUST, see the axes change, and check the gate simulator's outcomes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.models import Tool
from aimon_admin.registry.services import mcp_server_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn
from tests.conftest import TEST_ACTOR

ROOT = Path(__file__).resolve().parents[2]


def row(page: Page, tool: str):  # type: ignore[no-untyped-def]
    return page.locator("#simulator-results tr", has=page.get_by_role("link", name=tool, exact=True))


def test_operator_syncs_switches_trust_and_simulates_the_gate(
    live_server: LiveServer, page: Page, log_in: LogIn, operator: User, runtime: AgentRuntime
) -> None:
    # T10-T13 and T6-T9 through the pages.
    mcp_server_create(
        name="catalog",
        transport=McpTransport.STDIO,
        command=sys.executable,
        args=["-m", "tests.registry.mcp_servers.catalog"],
        env={"PYTHONPATH": str(ROOT)},
        timeout_seconds=30,
        actor=TEST_ACTOR,
    )
    log_in(page, operator)
    page.goto(f"{live_server.url}/registry/servers/")
    page.get_by_role("link", name="catalog", exact=True).click()
    expect(page.get_by_text("Never synced.")).to_be_visible()

    page.get_by_role("button", name="Sync now").click()
    outcome = page.locator("#server-sync .sync-outcome")
    expect(outcome).to_contain_text("Saw 9 tools: 9 added, 0 changed, 0 now absent.", timeout=30_000)
    tools = page.locator("#server-tools")
    expect(tools.get_by_role("link", name="lookup_record")).to_be_visible()
    # Under IGNORE (the default) every claim is ignored: all nine are MUTATING + DESTRUCTIVE.
    assert set(Tool.objects.values_list("side_effect_level", flat=True)) == {"MUTATING"}

    page.get_by_role("link", name="Switch to TRUST…").click()
    confirm = page.locator("#trust-confirm")
    expect(confirm.get_by_role("heading", name=re.compile(r"Switch catalog to\s*TRUST\s*\?"))).to_be_visible()
    expect(confirm).to_contain_text("lookup_record")
    assert Tool.objects.get(name="lookup_record").side_effect_level == "MUTATING"  # not until confirmed
    confirm.get_by_role("button", name="Switch to TRUST").click()
    expect(page.locator("#server-trust .badge-trust")).to_have_text("TRUST")
    lookup = Tool.objects.get(name="lookup_record")
    assert (lookup.side_effect_level, lookup.destructive_behavior) == ("READ_ONLY", "NON_DESTRUCTIVE")
    sloppy = Tool.objects.get(name="sloppy_flags")
    assert sloppy.side_effect_level == "MUTATING"  # "readOnlyHint": "yes" is not true (T10)

    page.goto(f"{live_server.url}/registry/simulator/?runtime={runtime.name}")
    expect(row(page, "lookup_record")).to_contain_text("No question")
    expect(row(page, "delete_record")).to_contain_text("Asks")
    expect(row(page, "upsert_record")).to_contain_text("Asks")  # threshold READ_ONLY by default
    page.get_by_label("Execution").select_option("unattended")
    expect(row(page, "delete_record")).to_contain_text("Denied unattended")
    expect(row(page, "lookup_record")).to_contain_text("No question")
    page.get_by_label("Ceiling").select_option("READ_ONLY")
    expect(row(page, "delete_record")).to_contain_text("Hidden and refused")
