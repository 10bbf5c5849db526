"""The runtime page's Connect section in Chromium (G1-G3): each snippet copied by the
product's own script under the page's policy, the page accessible and no wider than the
screen, and the enforcement points' readings shown."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.core.actors import Actor
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.services import mcp_server_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import DEVICES, LogIn, assert_fits_width, at_both_widths
from tests.browser.test_csp import LISTEN, CspWatch, assert_strict

SNIPPETS = ("connect-install", "connect-gateway-yaml", "connect-hook-settings", "connect-hook-environment")


@at_both_widths
def test_each_snippet_is_copied_as_shown(
    live_server: LiveServer, browser, log_in: LogIn, operator: User, runtime: AgentRuntime, device: str
) -> None:
    mcp_server_create(
        name="git", actor=Actor.system("pytest"), transport=McpTransport.STDIO, command="uvx", args=["x"]
    )
    # The clipboard is readable in this context only: the copy buttons use it as they would
    # on any secure origin (the live server is on 127.0.0.1, which the browser treats so).
    context = browser.new_context(
        **DEVICES[device], permissions=["clipboard-read", "clipboard-write"], base_url=live_server.url
    )
    page: Page = context.new_page()
    try:
        csp = CspWatch()
        context.expose_function("__cspReport", csp.report)
        context.add_init_script(LISTEN)
        page.on("console", csp.on_console)
        page.on("response", csp.on_response)
        log_in(page, operator)
        page.goto(f"{live_server.url}/runtimes/{runtime.name}/")
        expect(page.get_by_role("heading", name="Connect")).to_be_visible()
        expect(page.locator('dd[data-point="GATEWAY"]')).to_have_text("never called")
        for element_id in SNIPPETS:
            shown = page.locator(f"#{element_id}").inner_text()
            page.locator(f'button[data-copy="{element_id}"]').click()
            expect(page.locator(f'button[data-copy="{element_id}"]')).to_have_text("Copied")
            assert page.evaluate("navigator.clipboard.readText()").strip() == shown.strip()
        assert "#   git" in page.locator("#connect-gateway-yaml").inner_text()
        assert_fits_width(page)
        assert_accessible(page, "the runtime page's Connect section")
        assert_strict(csp)
    finally:
        context.close()
