"""Sync now shows that it is busy, in Chromium: while its request is in flight the button is
disabled and reads "Syncing…" (htmx's hx-disabled-elt and the htmx-request class), then the
run's own progress takes over until its outcome."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from playwright.sync_api import Page, Route, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.registry.services import mcp_server_create
from tests.browser import a11y
from tests.browser.conftest import LogIn
from tests.conftest import TEST_ACTOR

ROOT = Path(__file__).resolve().parents[2]


def test_sync_now_is_busy_while_its_request_is_in_flight(
    live_server: LiveServer, page: Page, log_in: LogIn, operator: User
) -> None:
    mcp_server_create(
        name="catalog",
        actor=TEST_ACTOR,
        transport="STDIO",
        command=sys.executable,
        args=["-m", "tests.registry.mcp_servers.catalog"],
        env={"PYTHONPATH": str(ROOT)},
    )
    log_in(page, operator)
    page.goto(f"{live_server.url}/registry/servers/catalog/")
    button = page.locator("#server-sync form button")
    expect(button).to_have_accessible_name("Sync now")
    expect(button).to_be_enabled()

    held: list[Route] = []

    def hold(route: Route) -> None:
        held.append(route)

    page.route(re.compile(r".*/registry/servers/catalog/sync/$"), hold)
    button.click()
    # The request is held in flight: the button says so and cannot be pressed twice.
    expect(button).to_be_disabled()
    expect(button).to_have_accessible_name("Syncing…")
    expect(button).to_have_text(re.compile(r"^\s*Syncing…\s*$"), use_inner_text=True)
    a11y.assert_accessible(page, "server page, a sync in flight")
    assert len(held) == 1
    held[0].continue_()
    page.unroute(re.compile(r".*/registry/servers/catalog/sync/$"), hold)

    progress = page.locator("#server-sync").get_by_role("status")
    expect(progress).to_contain_text("Saw 9 tools: 9 added, 0 changed, 0 now absent.", timeout=30_000)
    expect(button).to_be_enabled()
    expect(button).to_have_accessible_name("Sync now")
