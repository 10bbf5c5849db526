"""The main navigation in the browser and the administration pages on a phone.

At 390 px the navigation is behind the top bar's Menu button, a disclosure: it opens and
closes by keyboard, says which in aria-expanded, and Tab goes from it into the menu; Escape
closes it and gives focus back. At 1280 px the navigation is a sidebar: the top bar is one
row and every link one line, all in view without scrolling. Without JavaScript the
navigation is simply shown. The administration pages fit 390 px (no sideways scroll) and
pass axe-core.
"""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.services import mcp_server_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.a11y import assert_accessible
from tests.browser.conftest import LogIn, Shot, assert_fits_width, main_page
from tests.conftest import TEST_ACTOR
from tests.core.test_views import OPERATOR_NAV


def nav(page: Page):  # type: ignore[no-untyped-def]
    return page.locator("nav[aria-label=Main]")


def focused(page: Page) -> str:
    return page.evaluate("document.activeElement.outerHTML.slice(0, 80)")


@pytest.mark.parametrize("device", ["phone"])
def test_the_phone_menu_opens_and_closes_by_keyboard(
    page: Page, log_in: LogIn, operator: User, live_server: LiveServer, shot: Shot
) -> None:
    log_in(page, operator)
    toggle = page.get_by_role("button", name="Menu")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(toggle).to_have_attribute("aria-controls", "site-nav")
    expect(nav(page)).to_be_hidden()
    assert_fits_width(page)
    top = page.locator(".topbar").bounding_box()
    assert top is not None
    assert top["height"] <= 60, f"the top bar is {top['height']} px high at 390 px: not one row"

    # Keyboard only: Tab from the top of the page to the button, Enter opens.
    page.keyboard.press("Tab")  # the skip link
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('nav-toggle')"):
            break
    assert "nav-toggle" in focused(page)
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(nav(page)).to_be_visible()
    labels = [text.strip() for text in nav(page).get_by_role("link").all_inner_texts()]
    assert labels == OPERATOR_NAV
    main_page(page, shot, "menu-open")  # fits, axe-clean while open

    # Tab goes from the button into the menu.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('nav[aria-label=Main]') !== null"), focused(page)
    expect(page.locator(":focus")).to_have_text("Home")
    # Escape closes it and gives focus back to the button.
    page.keyboard.press("Escape")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(nav(page)).to_be_hidden()
    assert "nav-toggle" in focused(page)
    # Space opens it again, Enter closes it.
    page.keyboard.press(" ")
    expect(nav(page)).to_be_visible()
    page.keyboard.press("Enter")
    expect(nav(page)).to_be_hidden()

    # Used for real: open it and go to People.
    toggle.click()
    nav(page).get_by_role("link", name="People", exact=True).click()
    expect(page).to_have_url(f"{live_server.url}/accounts/people/")
    expect(toggle).to_have_attribute("aria-expanded", "false")  # a new page starts closed
    toggle.click()
    expect(nav(page).locator("a[aria-current=page]")).to_have_text("People")


def test_at_1280_the_navigation_is_a_sidebar_that_fits(
    page: Page, log_in: LogIn, operator: User, live_server: LiveServer, shot: Shot
) -> None:
    log_in(page, operator)
    page.goto(f"{live_server.url}/approvals/rules/")
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    sidebar = nav(page)
    expect(sidebar).to_be_visible()
    # The top bar is one row.
    top = page.locator(".topbar").bounding_box()
    assert top is not None
    assert top["height"] <= 60, f"the top bar is {top['height']} px high at 1280 px: not one row"
    # Every link is one line, and the whole navigation is in view without scrolling.
    links = sidebar.get_by_role("link")
    assert links.count() == len(OPERATOR_NAV)
    for link in links.all():
        box = link.bounding_box()
        assert box is not None
        assert box["height"] <= 44, f"{link.inner_text()} wraps: {box}"
        assert link.evaluate("a => a.scrollWidth <= a.clientWidth"), f"{link.inner_text()} is cut off"
    assert sidebar.evaluate("n => n.scrollHeight <= n.clientHeight + 1"), "the sidebar scrolls"
    last = links.last.bounding_box()
    assert last is not None
    assert last["y"] + last["height"] <= 800
    # One item is current: the rules page (/approvals/rules/) is not the inbox's too.
    expect(sidebar.locator("a[aria-current=page]")).to_have_count(1)
    expect(sidebar.locator("a[aria-current=page]")).to_have_text("Rules")
    # The page beside it keeps its width: nothing scrolls sideways.
    assert_fits_width(page)
    main = page.locator("main").bounding_box()
    assert main is not None
    assert main["width"] >= 1000
    assert_accessible(page, "skill rules with the sidebar")
    shot(page, "sidebar")


def test_without_javascript_the_navigation_is_shown(
    page_without_javascript: Page, log_in: LogIn, operator: User
) -> None:
    page = page_without_javascript
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, operator)
    expect(nav(page)).to_be_visible()
    expect(page.locator("button.nav-toggle")).to_be_hidden()
    assert_fits_width(page)


@pytest.fixture
def admin_world(operator: User, make_user, runtime: AgentRuntime) -> dict[str, str]:  # type: ignore[no-untyped-def]
    make_user("a-rather-long-username-for-a-phone@example.com", Role.APPROVER, Role.AUDITOR)
    mcp_server_create(
        name="search",
        transport=McpTransport.STREAMABLE_HTTP,
        url="https://mcp.example.test/mcp",
        headers={"Authorization": "Bearer x"},
        actor=TEST_ACTOR,
    )
    return {"runtime": runtime.name}


@pytest.mark.parametrize("device", ["phone"])
@override_settings(AXES_FAILURE_LIMIT=2)
def test_the_administration_pages_fit_a_phone(
    page: Page,
    log_in: LogIn,
    operator: User,
    live_server: LiveServer,
    shot: Shot,
    admin_world: dict[str, str],
) -> None:
    for _ in range(2):  # a locked sign-in to list
        Client().post(
            "/accounts/login/", {"username": "nobody-at-all", "password": "wrong"}, REMOTE_ADDR="10.9.8.7"
        )
    log_in(page, operator)
    long_name = "a-rather-long-username-for-a-phone@example.com"
    pages = [
        ("people", "/accounts/people/"),
        ("add a person", "/accounts/people/new/"),
        ("person", f"/accounts/people/{long_name}/"),
        ("deactivate", f"/accounts/people/{long_name}/deactivate/"),
        ("locked sign-ins", "/accounts/sign-ins/locked/"),
        ("unlock", "/accounts/sign-ins/locked/nobody-at-all/unlock/"),
        ("runtime", f"/runtimes/{admin_world['runtime']}/"),
        ("disable runtime", f"/runtimes/{admin_world['runtime']}/disable/"),
        ("retire runtime", f"/runtimes/{admin_world['runtime']}/retire/"),
        ("retire server", "/registry/servers/search/retire/"),
    ]
    for name, path in pages:
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None
        assert response.status == 200, path
        main_page(page, shot, name)
    # A set-password link's page too, as its person sees it.
    page.goto(f"{live_server.url}/accounts/people/{long_name}/")
    page.get_by_role("button", name="Make a set-password link").click()
    link = page.locator("#password-link")
    expect(link).to_be_visible()
    main_page(page, shot, "set-password link")
    url = link.input_value()
    page.context.clear_cookies()
    page.goto(url)
    expect(page.get_by_role("heading", name="Set your password")).to_be_visible()
    main_page(page, shot, "set your password")
