"""The visual design's component rules, pinned.

- Dates: every template shows a time through the `{% when %}` tag (aimon_admin/core/
  templatetags/ui.py), so every <time> on every swept page carries the exact UTC time, ISO
  8601, in its datetime attribute, and either relative text ("3 minutes ago", "in 4
  minutes") with that exact time as its title, or (where the moment itself matters: the
  audit log) the exact time as text with the relative one as its title.
- Empty states say what to do next: on every list page, with nothing in it, the empty
  state holds a link onward.
- Confirmation pages look and work alike: a heading, what will happen, a POST form with
  one danger (or primary) button, and a Cancel link back.
- Toasts: Django messages sit in a polite live region (role=status) on every page; an htmx
  request that fails (a 403, a 500, no answer at all) becomes a toast saying what failed,
  never silence.

Pages are fetched with Django's test client where the rule is about the HTML, and in
Chromium where it is about behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

from django.contrib.sessions.models import Session as DjangoSession
from django.test import Client
from django.urls import reverse
from playwright.sync_api import Page, Route, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import user_set_roles
from aimon_admin.runtimes.services import runtime_create
from tests.accounts.factories import person
from tests.browser import sweep
from tests.browser.conftest import SCREENSHOTS
from tests.browser.sweep import SweepWorld, Visitors, enrich, visits_for
from tests.conftest import PASSWORD, TEST_ACTOR
from tests.security.test_authorization_matrix import World

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
WHEN_TEMPLATE = TEMPLATES / "core" / "_when.html"
SHOTS = SCREENSHOTS / "design"

# The sweep's fixtures, used here.
world = sweep.world
sweep_world = sweep.sweep_world
visitors_at = sweep.visitors_at


class Elements(HTMLParser):
    """Every start tag of a page, with its attributes and the text up to its end tag."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        text: list[str] = []
        self.found.append((tag, {k: v or "" for k, v in attrs}, text))
        if tag not in {"input", "br", "img", "meta", "link", "hr"}:
            self._open.append(text)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for text in self._open:
            text.append(data)


def elements(html: str) -> list[tuple[str, dict[str, str], str]]:
    parser = Elements()
    parser.feed(html)
    return [(tag, attrs, "".join(text)) for tag, attrs, text in parser.found]


def client_for(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


# --- Dates ---------------------------------------------------------------------------------------


def test_no_template_formats_a_relative_time_itself() -> None:
    # Every time goes through {% when %}: a bare |timesince or a hand-made <time> could
    # leave out the exact time.
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        for pattern in (r"\|timesince", r"\|timeuntil", r"<time\b"):
            if template == WHEN_TEMPLATE and pattern == r"<time\b":
                continue  # the tag's own template
            if re.search(pattern, text):
                offenders.append(f"{template.relative_to(TEMPLATES)}: {pattern}")
    assert offenders == []


RELATIVE = re.compile(r"^(in \S.*|\S.* ago)$")


def test_every_time_on_every_page_shows_the_exact_time_on_hover(db: None, world: World) -> None:
    times = 0
    for visit in visits_for(world, *enrich(world)):
        user = None if visit.who == "anonymous" else world.users[visit.who]
        response = client_for(user).get(visit.path)
        assert response.status_code == visit.status, visit
        for tag, attrs, text in elements(response.content.decode()):
            if tag != "time":
                continue
            times += 1
            where = f"{visit.key}: <time {attrs}>{text}</time>"
            stamp = attrs.get("datetime", "")
            assert stamp.endswith("Z"), where  # UTC, said so
            datetime.fromisoformat(stamp)  # ISO 8601, exact
            shown = " ".join(text.split())
            if RELATIVE.match(shown):
                assert attrs.get("title") == stamp, where  # the exact time on hover
            else:  # the exact time to read, UTC said, and the relative one on hover
                assert shown == stamp.replace("T", " ").replace("Z", " UTC"), where
                assert RELATIVE.match(attrs.get("title", "")), where
    # Requests, sessions, grants, tokens, sync runs, tools and audit events all show times.
    assert times > 40


LEVELS = {
    "READ_ONLY",
    "MUTATING",
    "DESTRUCTIVE",
    "NON_DESTRUCTIVE",
    "IDEMPOTENT",
    "NON_IDEMPOTENT",
}
DECISIONS = {"ALLOW", "DENY", "ASK"}


def test_levels_and_decisions_are_badges_coloured_by_their_value(db: None, world: World) -> None:
    # One component each: the colour comes from data-level / data-decision (app.css), so
    # a badge without its value, or with one the stylesheet does not know, is caught.
    seen: dict[str, set[str]] = {"level": set(), "decision": set()}
    for visit in visits_for(world, *enrich(world)):
        user = None if visit.who == "anonymous" else world.users[visit.who]
        html = client_for(user).get(visit.path).content.decode()
        for _tag, attrs, _text in elements(html):
            classes = attrs.get("class", "").split()
            if "badge-level" in classes:
                assert attrs.get("data-level") in LEVELS, f"{visit.key}: {attrs}"
                seen["level"].add(attrs["data-level"])
            if "badge-decision" in classes:
                assert attrs.get("data-decision") in DECISIONS, f"{visit.key}: {attrs}"
                seen["decision"].add(attrs["data-decision"])
    assert {"MUTATING", "DESTRUCTIVE", "NON_IDEMPOTENT"} <= seen["level"]
    assert {"ALLOW"} <= seen["decision"]


# --- Empty states --------------------------------------------------------------------------------


def test_every_empty_list_says_what_to_do_next(db: None) -> None:
    users = {
        "approver": person("alice", Role.APPROVER),
        "operator": person("olivia", Role.OPERATOR),
        "auditor": person("audrey", Role.AUDITOR),
    }
    before_any_runtime = [
        ("operator", reverse("runtimes:list")),
        ("auditor", reverse("runtimes:list")),
        ("operator", reverse("registry:worklist")),
        ("auditor", reverse("registry:worklist")),
        ("operator", reverse("registry:simulator")),
        ("auditor", reverse("registry:simulator")),
    ]
    with_a_runtime = [
        ("approver", reverse("approvals:inbox")),
        ("approver", reverse("approvals:sessions")),
        ("operator", reverse("approvals:agent", args=["agent-one"])),
        ("operator", reverse("approvals:rules")),
        ("auditor", reverse("approvals:rules")),
        ("operator", reverse("registry:tool-list")),
        ("operator", reverse("registry:tool-list") + "?q=nothing-like-this"),
        ("operator", reverse("registry:server-list")),
        ("auditor", reverse("registry:server-list")),
        ("operator", reverse("registry:worklist")),
        ("auditor", reverse("audit:escalations")),
        ("auditor", reverse("audit:log") + "?actor=nobody-at-all"),
    ]
    checked = []

    def check(pages: list[tuple[str, str]]) -> None:
        for who, path in pages:
            response = client_for(users[who]).get(path)
            assert response.status_code == 200, (who, path)
            html = response.content.decode()
            empties = re.findall(r'<p class="empty">(.*?)</p>', html, re.S)
            assert empties, f"{path} as {who}: no empty state"
            for empty in empties:
                assert re.search(r'<a [^>]*href="[^"]+"', empty), (
                    f"{path} as {who}: no next step in {empty!r}"
                )
                checked.append(path)

    check(before_any_runtime)
    runtime_create(name="agent-one", actor=TEST_ACTOR)
    check(with_a_runtime)
    assert len(checked) >= len(before_any_runtime) + len(with_a_runtime)


# --- Confirmation pages --------------------------------------------------------------------------

CONFIRMATIONS = (
    "approvals:dismiss",
    "approvals:session-clear",
    "approvals:session-revoke",
    "approvals:grant-revoke",
    "approvals:agent-revoke",
    "approvals:rule-delete",
    "runtimes:token-revoke",
    "registry:server-trust",
    "registry:server-retire",
    "runtimes:disable",
    "runtimes:retire",
    "accounts:person-deactivate",
    "accounts:unlock",
)


def test_confirmation_pages_look_and_work_alike(db: None, world: World) -> None:
    visits = {visit.key: visit for visit in visits_for(world, *enrich(world))}
    for key in CONFIRMATIONS:
        visit = visits[key]
        path = visit.path + ("?trust=TRUST" if key == "registry:server-trust" else "")
        response = client_for(world.users[visit.who]).get(path)
        assert response.status_code == 200, key
        html = response.content.decode()
        section = re.search(r'<section class="card[^"]*\bconfirm\b[^"]*"[^>]*>(.*?)</section>', html, re.S)
        assert section, f"{key}: no confirmation card"
        body = section.group(1)
        assert re.search(r"<h([12])[^>]*>.+?</h\1>", body, re.S), f"{key}: no heading"
        assert re.search(r"<p>.{20,}?</p>", body, re.S), f"{key}: does not say what will happen"
        form = re.search(r'<form method="post"[^>]*>(.*?)</form>', body, re.S)
        assert form, f"{key}: no POST form"
        buttons = re.findall(r'<button type="submit" class="btn (btn-danger|btn-primary)">', form.group(1))
        assert len(buttons) == 1, f"{key}: {buttons}"
        assert re.search(r'<a class="btn" href="/[^"]*">Cancel</a>', form.group(1)), f"{key}: no Cancel link"


# --- Toasts --------------------------------------------------------------------------------------


def test_messages_are_toasts_in_a_polite_live_region_on_every_page(db: None, world: World) -> None:
    for user, path in ((world.users["alice"], reverse("approvals:inbox")), (None, reverse("accounts:login"))):
        html = client_for(user).get(path).content.decode()
        assert '<div class="messages" role="status" aria-live="polite">' in html
        assert '<div id="htmx-toasts" class="toasts-floating"></div>' in html
        assert '<script src="/static/js/app.js" defer></script>' in html


def _error_toast(page: Page) -> str:
    toast = page.locator("#htmx-toasts .toast-error[role=alert]")
    expect(toast).to_have_count(1)
    return toast.inner_text()


def test_an_htmx_request_that_fails_says_so_in_a_toast(
    sweep_world: SweepWorld, visitors_at: Callable[[str], Visitors], live_server: LiveServer
) -> None:
    world = sweep_world.world
    page = visitors_at("desktop").page("alice")
    page.goto(f"{live_server.url}{reverse('approvals:inbox')}")
    # S13: on a request with no session, alice's only answer is Deny this request.
    card = page.locator(f"#request-{sweep_world.sessionless.pk}")
    answer_url = reverse("approvals:answer", args=[sweep_world.sessionless.pk])

    # 403, for real: Alice's role is taken away while her page is open.
    user_set_roles(user=world.users["alice"], roles=[], actor=TEST_ACTOR)
    card.locator('button[data-answer="DENY_REQUEST"]').first.click()
    text = _error_toast(page)
    assert "Deny" in text
    assert "failed" in text
    assert "HTTP 403" in text
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "htmx-error-toast.png"))
    page.get_by_role("button", name="Dismiss this message").click()
    expect(page.locator("#htmx-toasts .toast")).to_have_count(0)
    user_set_roles(user=world.users["alice"], roles=[Role.APPROVER], actor=TEST_ACTOR)

    # 500: the server's crash is played by the network (a view cannot be made to fail on
    # demand without changing the product).
    def crash(route: Route) -> None:
        route.fulfill(status=500, content_type="text/html", body="<h1>Server Error</h1>")

    page.route(f"**{answer_url}", crash)
    card.locator('button[data-answer="DENY_REQUEST"]').first.click()
    text = _error_toast(page)
    assert "HTTP 500" in text
    assert "the server hit an error" in text
    expect(card.locator('button[data-answer="DENY_REQUEST"]').first).to_be_visible()  # nothing swapped away
    page.get_by_role("button", name="Dismiss this message").click()
    page.unroute(f"**{answer_url}")

    # No answer at all (the server is unreachable): said too, and a failing poll says it once.
    page.route(f"**{reverse('approvals:inbox-poll')}*", lambda route: route.abort("connectionrefused"))
    text = _error_toast(page)
    assert text.startswith("Checking for new requests failed: the server could not be reached")
    page.wait_for_timeout(2500)  # another poll fails meanwhile
    expect(page.locator("#htmx-toasts .toast")).to_have_count(1)
    assert sweep_world.sessionless.items.filter(answered_by__isnull=False).count() == 0


def test_the_favicon_is_linked_and_served_so_nothing_on_the_page_is_a_404(
    live_server: LiveServer, page: Page
) -> None:
    missing: list[str] = []
    page.on("response", lambda response: response.status >= 400 and missing.append(response.url))
    page.goto(f"{live_server.url}{reverse('accounts:login')}")
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon == "/static/favicon.svg"
    assert page.request.get(f"{live_server.url}{icon}").status == 200
    assert missing == []


def test_when_the_session_ends_an_htmx_request_takes_the_page_to_sign_in_and_back(
    sweep_world: SweepWorld, visitors_at: Callable[[str], Visitors], live_server: LiveServer
) -> None:
    # Without this, htmx would put the whole sign-in page inside the request card.
    page = visitors_at("desktop").page("alice")
    inbox = reverse("approvals:inbox")
    page.goto(f"{live_server.url}{inbox}")
    DjangoSession.objects.all().delete()  # signed out elsewhere, or expired
    page.locator(f"#request-{sweep_world.sessionless.pk} button[data-answer='DENY_REQUEST']").first.click()
    expect(page).to_have_url(f"{live_server.url}{reverse('accounts:login')}?next={inbox.replace('/', '%2F')}")
    expect(page.locator("article.request")).to_have_count(0)
    page.locator("input[name=username]").fill("alice")
    page.locator("input[name=password]").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{live_server.url}{inbox}")
    assert sweep_world.sessionless.items.filter(answered_by__isnull=False).count() == 0


# --- Form fields ---------------------------------------------------------------------------------

IDREFS = ("aria-describedby", "aria-labelledby", "aria-controls", "for")


def _dangling_idrefs(html: str) -> list[str]:
    found = elements(html)
    ids = {attrs["id"] for _tag, attrs, _text in found if attrs.get("id")}
    dangling = []
    for tag, attrs, _text in found:
        for name in IDREFS:
            for ref in attrs.get(name, "").split():
                if ref not in ids:
                    dangling.append(f"<{tag} {name}={ref!r}>")
    return dangling


def test_every_field_reference_points_at_something_on_every_page_and_invalid_form(
    db: None, world: World
) -> None:
    # Django points each widget's aria-describedby at <id>_helptext and <id>_error; a field
    # template that names them otherwise leaves the help and the error unannounced.
    problems: dict[str, list[str]] = {}
    described = 0
    for visit in visits_for(world, *enrich(world)):
        user = None if visit.who == "anonymous" else world.users[visit.who]
        html = client_for(user).get(visit.path).content.decode()
        described += html.count("aria-describedby=")
        if dangling := _dangling_idrefs(html):
            problems[visit.key] = dangling
    operator = client_for(world.users["operator"])
    for name in ("runtimes:create", "registry:server-create", "approvals:rule-create"):
        response = operator.post(
            reverse(name), {"name": "", "pattern": "", "transport": "STDIO"}, follow=True
        )
        # The form again, with its errors, after post/redirect/get.
        assert response.redirect_chain[0][1] == 303, name
        assert response.status_code == 200, name
        html = response.content.decode()
        assert 'aria-invalid="true"' in html, name
        assert '_error"' in html, name
        if dangling := _dangling_idrefs(html):
            problems[f"{name} (invalid)"] = dangling
    assert problems == {}
    assert described > 20
