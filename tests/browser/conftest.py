"""Browser fixtures: Debian's Chromium driven by Playwright against pytest-django's live server.

Chromium is launched once for the tests in this package (package scope: while Playwright's
sync API runs, the main thread has a running event loop, and Django refuses ORM calls from
such a thread unless DJANGO_ALLOW_ASYNC_UNSAFE is set; stopping Playwright when the package
is done keeps that allowance from leaking into the rest of the suite). Each test gets a
fresh browser context, and leaves a full-page screenshot of its last page in
test-artifacts/screenshots/<test name>.png, passed or failed; a journey also keeps its main
pages there with `shot(page, name)`: test-artifacts/screenshots/<test name>/<nn>-<name>.png.
(`make test` runs the suite on both databases at once: test-artifacts/sqlite/screenshots/
and test-artifacts/postgresql/screenshots/.)

A test runs at desktop width unless it asks for a `device` (the journeys also pass on a
phone): `@at_both_widths` runs it once at 1280x800 and once at 390x844, touch and mobile
viewport on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Error, Locator, Page, Playwright, expect, sync_playwright
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
PHONE = {"width": 390, "height": 844}
DEVICES: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": VIEWPORT},
    "phone": {"viewport": PHONE, "is_mobile": True, "has_touch": True},
}
# Runs a test once per width; the test takes `device` (the page fixture reads it).
at_both_widths = pytest.mark.parametrize("device", list(DEVICES))
# scripts/run_tests.py gives each of its two runs its own folder (AIMON_TEST_ARTIFACTS).
_DEFAULT_ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARTIFACTS = Path(os.environ.get("AIMON_TEST_ARTIFACTS") or _DEFAULT_ARTIFACTS)
SCREENSHOTS = ARTIFACTS / "screenshots"
# Playwright's default is 30 s; a local page that takes 10 s is already a failure.
TIMEOUT_MS = 10_000

LogIn = Callable[..., Page]
Shot = Callable[[Page, str], Path]


@pytest.hookimpl(tryfirst=True)  # marks read by tests/conftest.py's selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Journeys in a browser check what a person sees and does (pages, htmx, focus, layout),
    not the database: the views and services under them run on both databases in the rest
    of the suite. So they run once, in the SQLite run (the embedded default a newcomer
    clicks through first); a journey that needs the production stack is marked `postgres`."""
    here = Path(__file__).parent
    for item in items:
        if here not in item.path.parents:
            continue
        item.add_marker(pytest.mark.browser)
        if not item.get_closest_marker("postgres"):
            item.add_marker(pytest.mark.sqlite_run)


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
    context_options.setdefault("viewport", VIEWPORT)
    context = browser.new_context(**context_options)
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        _screenshot(page, item)
        context.close()


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _screenshot(page: Page, item: pytest.Item) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / (_file_name(item.name) + ".png")
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
def device() -> str:
    """The width a test runs at; `@at_both_widths` parametrizes it."""
    return "desktop"


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest, device: str) -> Iterator[Page]:
    with _open_page(browser, request.node, **DEVICES[device]) as page:
        yield page


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Shot:
    """`shot(page, name)`: keep a full-page screenshot of one of the journey's main pages,
    numbered in the order taken, in test-artifacts/screenshots/<test name>/."""
    folder = SCREENSHOTS / _file_name(request.node.name)
    taken: list[Path] = []

    def take(page: Page, name: str) -> Path:
        if not taken and folder.exists():  # last run's pages would mislead
            for old in folder.glob("*.png"):
                old.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{len(taken) + 1:02d}-{_file_name(name)}.png"
        page.screenshot(path=str(path), full_page=True)
        taken.append(path)
        return path

    return take


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


def follow_nav(page: Page, name: str) -> None:
    """Click the main navigation's link `name`, opening the Menu first where the navigation
    is behind it (narrow screens)."""
    toggle = page.locator("button.nav-toggle")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    click_through(page, page.locator("nav[aria-label=Main]").get_by_role("link", name=name, exact=True))


def click_through(page: Page, control: Locator) -> None:
    """Click a link, or a plain form's button, and wait until the page it leads to has loaded.

    A check that reads the page (its width, axe, a screenshot) right after such a click would
    otherwise read the page being left, or the next one half-built (for a moment its
    `document.documentElement` is null)."""
    with page.expect_navigation(wait_until="load"):
        control.click()


# --- Fitting a phone ------------------------------------------------------------------------------

TAP_TARGET = 44  # px, each side: WCAG 2.5.5's target size, what a thumb needs
# The class of the nearest ancestor that scrolls or clips the element sideways and cuts part
# of it off (a table wider than its .table-wrap), or null when all of it shows.
_CLIPPED_BY = """element => {
    const box = element.getBoundingClientRect();
    for (let up = element.parentElement; up && up !== document.body; up = up.parentElement) {
        if (getComputedStyle(up).overflowX === "visible") continue;
        const frame = up.getBoundingClientRect();
        const left = frame.left + up.clientLeft;
        if (box.left < left - 0.5 || box.right > left + up.clientWidth + 0.5) {
            return up.className || up.tagName;
        }
    }
    return null;
}"""


def assert_fits_width(page: Page) -> None:
    """Nothing on the page is wider than the viewport: no sideways scrolling."""
    width = page.viewport_size["width"] if page.viewport_size else VIEWPORT["width"]
    page.wait_for_load_state("load")  # a navigation under way: the page it leads to
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"{page.url} scrolls sideways: {scroll_width} px wide in {width} px"


def assert_tappable(page: Page, controls: Locator) -> int:
    """Every control matched is at least 44x44 px and lies inside the viewport's width, not
    cut off by a sideways-scrolling box (visible without scrolling sideways); returns how
    many were checked (never none)."""
    width = page.viewport_size["width"] if page.viewport_size else VIEWPORT["width"]
    found = controls.all()
    assert found, f"no control matched {controls} on {page.url}"
    for control in found:
        # Not scrolled into view: that could scroll a box sideways and hide the very fault.
        expect(control).to_be_visible()
        box = control.bounding_box()
        assert box is not None, f"{control} has no box on {page.url}"
        label = control.inner_text().strip() or control.get_attribute("aria-label")
        left = box["x"] + page.evaluate("window.scrollX")  # from the page's left edge
        size = f"{box['width']:.0f}x{box['height']:.0f} px"
        assert box["width"] >= TAP_TARGET, f"{label!r} on {page.url} is {size}, narrower than {TAP_TARGET}"
        assert box["height"] >= TAP_TARGET, f"{label!r} on {page.url} is {size}, lower than {TAP_TARGET}"
        span = f"x={left:.0f}..{left + box['width']:.0f}"
        assert left >= 0, f"{label!r} on {page.url} spans {span}, off the left edge"
        assert left + box["width"] <= width, f"{label!r} on {page.url} spans {span}, past {width} px"
        clipped_by = control.evaluate(_CLIPPED_BY)
        assert clipped_by is None, f"{label!r} on {page.url} is cut off by its scrolling box .{clipped_by}"
    return len(found)


def main_page(page: Page, shot: Shot, name: str) -> None:
    """One of a journey's main pages, as it is now: no sideways scrolling, no serious or
    critical axe-core violation, and kept as a screenshot."""
    from tests.browser import a11y  # looked up at each call

    assert_fits_width(page)
    a11y.assert_accessible(page, name)
    shot(page, name)
