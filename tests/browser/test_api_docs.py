"""/api/docs/ in the browser: the product's header above Swagger UI and a way back,
everything loaded from this server, at both widths."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import LogIn, Shot, assert_fits_width, at_both_widths


@at_both_widths
def test_api_docs_have_the_header_and_lead_back_home(
    live_server: LiveServer, page: Page, log_in: LogIn, operator: User, device: str, shot: Shot
) -> None:
    log_in(page, operator)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{live_server.url}/api/docs/")
    header = page.locator("header.docs-topbar")
    expect(header.get_by_role("link", name="AIMON Admin", exact=True)).to_be_visible()
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("AIMON Admin runtime API")
    # The header sits above Swagger UI, across the page.
    header_box, ui_box = header.bounding_box(), page.locator("#swagger-ui").bounding_box()
    assert header_box is not None
    assert ui_box is not None
    assert header_box["y"] + header_box["height"] <= ui_box["y"] + 1
    assert_fits_width(page)
    assert_accessible(page, "/api/docs/")
    # Nothing from the internet: every request went to this server.
    assert requested
    assert [url for url in requested if not url.startswith(live_server.url)] == []

    shot(page, "api-docs")
    page.get_by_test_id("docs-back").click()
    expect(page).to_have_url(f"{live_server.url}/")
