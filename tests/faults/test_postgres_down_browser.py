"""An approver's click while PostgreSQL is down, in Chromium.

An answer POST must not get HTTP 500 "Something went wrong", nor a click committed just before
the stop look failed: htmx's failure toast says the database is unreachable and that the
answer may or may not have been saved (the server's own words, from its 503); nothing on the
card is swapped away; and once PostgreSQL is back the request's page shows what holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Error, Page, expect, sync_playwright

from aimon_admin.core.views import ERROR_MESSAGES, RETRY_AFTER_SECONDS
from tests.browser.conftest import SCREENSHOTS
from tests.conftest import skip_or_fail
from tests.faults.checks import register_tools
from tests.faults.clients import Recorder, Runtime, database_ready
from tests.faults.conftest import Node, PrivatePostgres, Product, wait_until
from tests.faults.product import PASSWORD

pytestmark = pytest.mark.postgres

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
TIMEOUT_MS = 15_000


@pytest.fixture
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        skip_or_fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        playwright = sync_playwright().start()
    except Error as exc:
        skip_or_fail(f"Playwright could not start its driver: {exc.message.splitlines()[0]}")
    try:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()
    finally:
        playwright.stop()


def sign_in(page: Page, url: str, username: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/")


def test_a_click_while_postgres_is_down_says_it_may_not_have_been_saved_and_the_page_shows_what_holds(
    product: Product, private_postgres: PrivatePostgres, start_node: Callable[..., Node], browser: Browser
) -> None:
    node = start_node()
    who = product.run("people", tag="pgbrowser")
    node.wait_ready()
    runtime = Runtime(node.url, who["token"], Recorder())
    register_tools(runtime)
    pending = runtime.open_request(["restart"], "s-1", who["approver"])

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    answers: list[tuple[int, str | None]] = []
    page.on(
        "response",
        lambda r: "/answer/" in r.url and answers.append((r.status, r.headers.get("retry-after"))),
    )
    sign_in(page, node.url, who["approver"])
    page.goto(f"{node.url}/approvals/")
    card = page.locator(f"#request-{pending['id']}")
    allow = card.locator('button[data-answer="ALLOW_SESSION"]').first
    expect(allow).to_be_visible()

    private_postgres.stop()
    allow.click()
    toast = page.locator("#htmx-toasts .toast-error[role=alert]")
    expect(toast).to_have_count(1)
    text = toast.inner_text()
    assert ERROR_MESSAGES["503-post"] in text, text
    assert "HTTP 503" in text
    assert "Something went wrong" not in text
    assert answers == [(503, str(RETRY_AFTER_SECONDS))]
    expect(allow).to_be_visible()  # nothing was swapped away: the card is as it was
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "postgres-down-toast.png"))

    private_postgres.start()
    wait_until(lambda: database_ready(node.url), 10, "the database")
    # What holds: the request page shows the answer was not saved, and it can be given now.
    page.goto(f"{node.url}/approvals/requests/{pending['id']}/")
    allow = page.locator('button[data-answer="ALLOW_SESSION"]').first
    expect(allow).to_be_visible()
    allow.click()
    expect(page.locator('.badge-decision[data-decision="ALLOW"]')).to_be_visible()
    assert runtime.skill_decisions(["restart"], "s-1") == [("restart", "ALLOW", "SESSION")]
    context.close()
