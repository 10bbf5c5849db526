"""Browser fixtures: Debian's Chromium driven by Playwright against pytest-django's live server.

Chromium is launched once for the tests in this package (package scope: while Playwright's
sync API runs, the main thread has a running event loop, and Django refuses ORM calls from
such a thread unless DJANGO_ALLOW_ASYNC_UNSAFE is set; stopping Playwright when the package
is done keeps that allowance from leaking into the rest of the suite). Each test gets a
fresh browser context, and leaves a full-page screenshot of its last page in
test-artifacts/screenshots/<test name>.png, passed or failed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Error, Page, Playwright, expect, sync_playwright
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from tests.conftest import PASSWORD, skip_or_fail

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
# Playwright's default is 30 s; a local page that takes 10 s is already a failure.
TIMEOUT_MS = 10_000

LogIn = Callable[..., Page]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, so fixtures can tell a failed test."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="package", autouse=True)
def _allow_orm_beside_playwright() -> Iterator[None]:
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package")
def playwright(_allow_orm_beside_playwright: None) -> Iterator[Playwright]:
    try:
        pw = sync_playwright().start()
    except Error as exc:
        skip_or_fail(f"Playwright could not start its driver: {exc.message.splitlines()[0]}")
    yield pw
    pw.stop()


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        skip_or_fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    except Error as exc:
        skip_or_fail(f"Playwright could not launch {CHROMIUM}: {exc.message.splitlines()[0]}")
    yield browser
    browser.close()


@contextmanager
def _open_page(browser: Browser, item: pytest.Item, **context_options: Any) -> Iterator[Page]:
    """A page in a fresh context; on the way out, a full-page screenshot of where it ended."""
    context = browser.new_context(viewport=VIEWPORT, **context_options)
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        _screenshot(page, item)
        context.close()


def _screenshot(page: Page, item: pytest.Item) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name).strip("_") + ".png")
    report = getattr(item, "report_call", None)
    failed = report is not None and report.failed
    try:
        page.screenshot(path=str(path), full_page=True)
    except Error as exc:
        # A screenshot that cannot be taken must not hide the test's own failure.
        if not failed:
            raise
        print(f"no screenshot of the failed page ({page.url}): {exc.message}")
    else:
        if failed:
            print(f"screenshot of the failed page ({page.url}): {path}")


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    with _open_page(browser, request.node) as page:
        yield page


@pytest.fixture
def page_without_javascript(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A page that runs no script, as with JavaScript off: htmx never loads."""
    with _open_page(browser, request.node, java_script_enabled=False) as page:
        yield page


@pytest.fixture
def log_in(live_server: LiveServer) -> LogIn:
    """Sign `user` in on `page` through the login form; returns the page, on the home page."""

    def log_in_on(page: Page, user: User, password: str = PASSWORD) -> Page:
        page.goto(f"{live_server.url}/accounts/login/")
        page.locator("input[name=username]").fill(user.username)
        page.locator("input[name=password]").fill(password)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{live_server.url}/")
        return page

    return log_in_on
