"""The Content-Security-Policy in a real browser.

Every main page is opened, and its htmx controls clicked, in Chromium with a listener for
`securitypolicyviolation` events and CSP console errors; any violation fails the test.
The policy is strict (no 'unsafe-inline', no 'unsafe-eval'), so this is what proves htmx
and the Swagger UI still work under it. A control test shows the listener does catch an
inline script, so a silent run means no violation, not a deaf listener.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Page, Response, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.accounts.views import LOCKOUT_TITLE
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"

# Reports each violation to Python through an exposed binding, so reports survive the
# full-page navigations between pages.
LISTEN = """
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspReport(`${e.effectiveDirective} blocked ${e.blockedURI || 'inline'}`
                     + ` on ${e.documentURI} (${e.sourceFile}:${e.lineNumber}) ${e.sample}`);
});
"""


@dataclass
class CspWatch:
    violations: list[str] = field(default_factory=list)
    policies: dict[str, str] = field(default_factory=dict)

    def report(self, text: str) -> None:
        self.violations.append(text)

    def on_console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.violations.append(f"console: {message.text}")

    def on_response(self, response: Response) -> None:
        if response.request.resource_type == "document":
            self.policies[response.url] = response.headers.get("content-security-policy", "")


@pytest.fixture
def watch(page: Page) -> CspWatch:
    found = CspWatch()
    page.context.expose_function("__cspReport", found.report)
    page.context.add_init_script(LISTEN)
    page.on("console", found.on_console)
    page.on("response", found.on_response)
    return found


def assert_strict(watch: CspWatch) -> None:
    assert watch.violations == []
    assert watch.policies, "no page was loaded"
    for url, policy in watch.policies.items():
        parts = (part.strip().partition(" ") for part in policy.split(";"))
        directives = {name: value for name, _, value in parts if name}
        assert directives.get("default-src") == "'self'", (url, policy)
        assert directives.get("frame-ancestors") == "'none'", (url, policy)
        assert directives.get("form-action") == "'self'", (url, policy)
        assert directives.get("base-uri") == "'none'", (url, policy)
        assert directives.get("object-src") == "'none'", (url, policy)
        for name in ("script-src", "style-src"):
            assert "'unsafe-inline'" not in directives[name], (url, policy)
            assert "'unsafe-eval'" not in directives[name], (url, policy)


def settle(page: Page) -> None:
    """Wait until htmx has nothing in flight (a violation is reported by then)."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('.htmx-request')")


def test_listener_catches_an_inline_script(live_server: LiveServer, page: Page, watch: CspWatch) -> None:
    # The control: a strict policy refuses an inline script, and the watch sees it.
    page.goto(f"{live_server.url}/accounts/login/")
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__ran = 1'; document.body.appendChild(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("window.__ran") is None
    assert any("script-src" in v for v in watch.violations), watch.violations


def test_operator_pages_and_htmx_controls_raise_no_violation(
    live_server: LiveServer, page: Page, watch: CspWatch, log_in: LogIn, operator: User, runtime: AgentRuntime
) -> None:
    log_in(page, operator)
    settle(page)
    assert page.evaluate("typeof htmx") == "object"
    assert page.evaluate("htmx.config.includeIndicatorStyles") is False
    assert page.evaluate("htmx.config.allowEval") is False

    # Runtime settings: an htmx POST that swaps the settings card.
    page.goto(f"{live_server.url}/runtimes/{runtime.name}/")
    page.evaluate("window.__noReload = 1")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#runtime-settings .toast-success")).to_be_visible()
    assert page.evaluate("window.__noReload") == 1
    settle(page)

    # Tools list and the gate simulator: htmx GET filters.
    page.goto(f"{live_server.url}/registry/tools/")
    page.get_by_role("button", name="Apply filters").click()
    settle(page)
    page.goto(f"{live_server.url}/registry/simulator/")
    page.get_by_role("button", name="Simulate").click()
    expect(page.locator("#simulator-results")).to_be_visible()
    settle(page)

    for path in (
        "/",
        "/runtimes/",
        "/registry/servers/",
        "/registry/simulator/worklist/",
        "/approvals/rules/",
        "/approvals/rules/skills/add/",
        "/approvals/rules/tools/add/",
        "/approvals/sessions/",
        "/audit/",
        "/audit/escalations/",
        "/audit/in-force/",
        "/audit/analytics/",
    ):
        page.goto(f"{live_server.url}{path}")
        settle(page)

    # Audit log: a filter change is an htmx swap with a pushed URL.
    page.goto(f"{live_server.url}/audit/events/")
    page.evaluate("window.__noReload = 1")
    page.locator("#f-level").select_option("WARNING")
    expect(page).to_have_url(re.compile(r"level=WARNING"))
    assert page.evaluate("window.__noReload") == 1
    settle(page)
    assert_strict(watch)


def test_approver_answers_through_htmx_without_violation(
    live_server: LiveServer, page: Page, watch: CspWatch, log_in: LogIn, approver: User, runtime_token: str
) -> None:
    log_in(page, approver)
    page.goto(f"{live_server.url}/approvals/")
    page.evaluate("window.__noReload = 1")
    request = urllib.request.Request(  # noqa: S310 - the test's own live server
        f"{live_server.url}/api/v1/approval-requests",
        data=json.dumps(
            {"skills": ["deploy"], "session_id": "s-csp", "principal": approver.username}
        ).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {runtime_token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        created = json.loads(response.read())
    card = page.locator(f"#request-{created['id']}")
    expect(card).to_be_visible()  # arrived by the htmx poll
    card.get_by_role("button", name="Allow for this session: deploy").click()
    expect(card).to_contain_text("Answered: deploy.")
    assert page.evaluate("window.__noReload") == 1
    settle(page)
    page.goto(f"{live_server.url}/approvals/sessions/")
    settle(page)
    assert_strict(watch)


def test_swagger_ui_runs_under_the_policy(live_server: LiveServer, page: Page, watch: CspWatch) -> None:
    page.goto(f"{live_server.url}/api/docs/")
    # The UI rendered: its start-up script ran (nonce) and it fetched the schema.
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("AIMON Admin runtime API")
    page.locator(".opblock-summary").first.click()
    settle(page)
    assert_strict(watch)


def test_login_and_lockout_pages_raise_no_violation(
    live_server: LiveServer, page: Page, watch: CspWatch, make_user
) -> None:
    person = make_user("csp-lock", "approver")
    page.goto(f"{live_server.url}/accounts/login/")
    for _ in range(5):
        page.locator("input[name=username]").fill(person.username)
        page.locator("input[name=password]").fill("wrong password, surely")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()
        if page.get_by_role("heading", name=LOCKOUT_TITLE).count():
            break
    expect(page.get_by_role("heading", name=LOCKOUT_TITLE)).to_be_visible()
    assert_strict(watch)


def test_templates_hold_nothing_the_policy_would_refuse() -> None:
    # Inline scripts, inline event handlers, style attributes, hx-on (needs eval),
    # javascript: URLs. The Swagger page's two inline blocks carry the nonce.
    found = []
    pattern = re.compile(
        r"<script(?![^>]*\bsrc=)(?![^>]*\bnonce=)|<style(?![^>]*\bnonce=)|\son[a-z]+\s*=|\sstyle\s*=|"
        r"hx-on|javascript:",
        re.IGNORECASE,
    )
    for path in TEMPLATES.rglob("*.html"):
        if path.relative_to(TEMPLATES).parts[0] == "email":
            # Mail bodies are never served under the page policy, and mail readers
            # drop <style> blocks: their styles have to be inline.
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(TEMPLATES)}:{number}: {line.strip()}")
    assert found == []
