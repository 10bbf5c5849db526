"""The operator's journey through the tool and MCP registry in a real browser: register a
real MCP server through the form, sync it and watch the outcome, read the trust confirmation,
trust the server's claims, see the axes change, and check the gate simulator's outcomes. At
desktop and at phone width; each main page is kept as a screenshot and checked with
axe-core."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.registry.models import McpServer, Tool
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot, at_both_widths, main_page

ROOT = Path(__file__).resolve().parents[2]


def row(page: Page, tool: str):  # type: ignore[no-untyped-def]
    return page.locator("#simulator-results tr", has=page.get_by_role("link", name=tool, exact=True))


@at_both_widths
def test_operator_registers_syncs_switches_trust_and_simulates_the_gate(
    live_server: LiveServer, page: Page, shot: Shot, log_in: LogIn, operator: User, runtime: AgentRuntime
) -> None:
    # T10-T13 and T6-T9 through the pages.
    log_in(page, operator)
    page.goto(f"{live_server.url}/registry/servers/")
    expect(page.get_by_text("No MCP servers yet.")).to_be_visible()
    main_page(page, shot, "servers-empty")
    page.get_by_role("link", name="New MCP server").click()
    page.get_by_role("textbox", name="Name", exact=True).fill("catalog")
    page.get_by_role("radio", name="stdio (a local command)").check()
    page.get_by_role("textbox", name="Command", exact=True).fill(sys.executable)
    page.get_by_role("textbox", name="Arguments", exact=True).fill("-m\ntests.registry.mcp_servers.catalog")
    page.get_by_role("textbox", name="Environment", exact=True).fill(f"PYTHONPATH={ROOT}")
    main_page(page, shot, "server-new")
    page.get_by_role("button", name="Create server").click()
    expect(page.get_by_role("heading", name="catalog")).to_be_visible()
    server = McpServer.objects.get(name="catalog")
    assert (server.command, server.args) == (sys.executable, ["-m", "tests.registry.mcp_servers.catalog"])
    expect(page.get_by_text("Never synced.")).to_be_visible()
    main_page(page, shot, "server-registered")

    page.get_by_role("button", name="Sync now").click()
    # The run's progress is a live region: it reads the run's state until the outcome.
    progress = page.locator("#server-sync").get_by_role("status")
    expect(progress).to_contain_text("Saw 9 tools: 9 added, 0 changed, 0 now absent.", timeout=30_000)
    expect(progress.locator(".badge-sync")).to_have_attribute("data-status", "SUCCEEDED")
    tools = page.locator("#server-tools")
    expect(tools.get_by_role("link", name="lookup_record")).to_be_visible()
    lookup_row = tools.locator("tr", has=page.get_by_role("link", name="lookup_record", exact=True))
    expect(lookup_row.locator(".badge-level").first).to_have_text("Writes")  # MUTATING, in words
    # Under IGNORE (the default) every claim is ignored: all nine are MUTATING + DESTRUCTIVE.
    assert set(Tool.objects.values_list("side_effect_level", flat=True)) == {"MUTATING"}
    main_page(page, shot, "server-synced")

    page.get_by_role("link", name="Trust the server's claims…").click()
    confirm = page.locator("#trust-confirm")
    expect(
        confirm.get_by_role("heading", name=re.compile(r"Switch catalog to\s*Trust the server's claims\s*\?"))
    ).to_be_visible()
    expect(confirm).to_contain_text("lookup_record")
    main_page(page, shot, "trust-confirm")
    assert Tool.objects.get(name="lookup_record").side_effect_level == "MUTATING"  # not until confirmed
    confirm.get_by_role("button", name="Trust the server's claims").click()
    expect(page.locator("#server-trust .badge-trust")).to_have_attribute("data-trust", "TRUST")
    expect(page.locator("#server-trust .badge-trust")).to_have_text("Trust the server's claims")
    # The page shows the axes change without a reload (the tools table is swapped too).
    expect(lookup_row.locator(".badge-level").first).to_have_text("Read-only")
    expect(lookup_row.locator(".badge-level").nth(1)).to_have_text("Not destructive")
    lookup = Tool.objects.get(name="lookup_record")
    assert (lookup.side_effect_level, lookup.destructive_behavior) == ("READ_ONLY", "NON_DESTRUCTIVE")
    sloppy = Tool.objects.get(name="sloppy_flags")
    assert sloppy.side_effect_level == "MUTATING"  # "readOnlyHint": "yes" is not true (T10)
    main_page(page, shot, "server-trusted")
    page.goto(f"{live_server.url}/registry/tools/")
    expect(page.get_by_role("link", name="lookup_record")).to_be_visible()
    main_page(page, shot, "tools")

    page.goto(f"{live_server.url}/registry/simulator/?runtime={runtime.name}")
    expect(row(page, "lookup_record")).to_contain_text("No question")
    expect(row(page, "delete_record")).to_contain_text("Asks")
    expect(row(page, "upsert_record")).to_contain_text("Asks")  # threshold READ_ONLY by default
    main_page(page, shot, "simulator")
    page.get_by_label("Execution").select_option("unattended")
    expect(row(page, "delete_record")).to_contain_text("Denied unattended")
    expect(row(page, "lookup_record")).to_contain_text("No question")
    page.get_by_label("Ceiling").select_option("READ_ONLY")
    expect(row(page, "delete_record")).to_contain_text("Hidden and refused")
