"""Every HTML page of the product, for the page-by-page sweeps.

The pages come from the URL configuration, walked by the authorization matrix
(tests/security/test_authorization_matrix.py): each route whose GET a signed-in person (or
the anonymous, for the sign-in page) may open becomes a page of the sweep, visited as the
first of those people. A new page is therefore swept as soon as it has its row in the
matrix, which a new page must have. Routes that are not pages of the product (the API,
django-admin, downloads, htmx fragments, the health check) are left out by name below,
and `test_every_route_is_swept_or_left_out_by_name` fails on any route neither swept nor
left out.

The world is the matrix's (two runtimes, Alice's session, request and grant, a rule, an
MCP server with a sync run, a local tool), with what the pages need to show their fuller
states: a pending request from a forked sub-agent, a pending sessionless one, an
escalated (agent-wide) grant, a mutating tool. Audit events come with all of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from django.test import Client
from django.urls import reverse
from playwright.sync_api import Browser, BrowserContext, Page
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.registry.choices import AnnotationTrust
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from tests.approvals.factories import open_tool_request
from tests.browser.conftest import TIMEOUT_MS
from tests.conftest import TEST_ACTOR
from tests.registry.factories import mcp_server, tools_synced
from tests.security.test_authorization_matrix import (
    EXPECTED,
    NOT_ALLOWED,
    OK,
    ROUTES,
    Route,
    World,
    path_of,
)
from tests.security.test_authorization_matrix import world as matrix_world

world = matrix_world  # the matrix's world fixture, for the sweep's modules

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
WIDTHS = {"desktop": DESKTOP, "phone": PHONE}

# Routes that are not HTML pages of the product, each with why.
LEFT_OUT: dict[str, str] = {
    "metrics": "Prometheus' text format, for its scraper",
    "healthz": "JSON for load balancers",
    "readyz": "JSON for load balancers",
    "audit:export-csv": "a download",
    "audit:export-jsonl": "a download",
    "audit:checkpoint-public-key": "a download",
    "audit:checkpoint-latest": "a download",
    "audit:checkpoint-export": "a download",
    "audit:event-proof": "a download",
    "api-schema": "the OpenAPI document (YAML)",
    "approvals:inbox-poll": "an htmx fragment: swept through the inbox's swap",
    "registry:server-sync-run": "an htmx fragment of the server page",
    "audit:verification": "an htmx fragment: the Chain verification card polls it (swept on the audit home)",
    "runtimes:settings": "a form's address: a GET goes to the runtime page (swept there)",
    "runtimes:token-issue": "a form's address: a GET goes to the runtime page (swept there)",
    "approvals:rule-create": "a form's address: a GET goes to its add page (swept there)",
    "accounts:person-roles": "a form's address: a GET goes to the person's page (swept there)",
    "registry:tool-subject": "a form's address: a GET goes to the tool page (swept there)",
    "approvals:tool-rule-create": "a form's address: a GET goes to its add page (swept there)",
    "notifications:channel-add": "a form's address: a GET goes to the channels page (swept there)",
    "notifications:preferences": "a form's address: a GET goes to the channels page (swept there)",
    "notifications:webhook-create": "a form's address: a GET goes to the webhooks page (swept there)",
    "notifications:channel-test": "Send a test: a button's POST on the channels and webhooks pages",
    "accounts:oidc-start": "a redirect to the OpenID Connect provider (tests/browser/test_oidc_sign_in.py)",
    "accounts:oidc-callback": "the provider's redirect back, to the home or the sign-in page",
}
LEFT_OUT_PREFIXES = {
    "api:": "the runtime API (JSON)",
    "^api/": "the runtime API (JSON)",
    "authzen-": "the AuthZEN decision endpoints and their discovery document (JSON)",
    "^access/": "the AuthZEN decision endpoints (JSON)",
    "admin:": "django-admin, not the product's pages",
    "django-admin/": "django-admin, not the product's pages",
}
# Who opens a page, in order of preference: the end user first, then whoever may.
VISITORS = ("alice", "operator", "owner", "auditor")


@dataclass(frozen=True)
class Visit:
    key: str  # what the page is (the route's name, or a label for an extra state)
    path: str
    who: str  # a key of World.users, or "anonymous"
    status: int = 200


def left_out(key: str) -> str | None:
    if key in LEFT_OUT:
        return LEFT_OUT[key]
    for prefix, why in LEFT_OUT_PREFIXES.items():
        if key.startswith(prefix):
            return why
    return None


def visitor(route: Route) -> str | None:
    """Who may open the route's page (None: nobody may GET it, it is POST only)."""
    get = EXPECTED[route.key].get
    order = ("auditor", "operator", "alice", "owner") if route.key.startswith("audit:") else VISITORS
    for who in order:
        if get[who] == OK:
            return who
    if get["anonymous"] == OK:
        return "anonymous"
    return None


def post_only(route: Route) -> bool:
    return all(outcome == NOT_ALLOWED for outcome in EXPECTED[route.key].get.values())


@dataclass
class SweepWorld:
    world: World
    fork: ApprovalRequest
    sessionless: ApprovalRequest
    visits: list[Visit] = field(default_factory=list)


def enrich(world: World) -> tuple[ApprovalRequest, ApprovalRequest, ApprovalRequest]:
    """The fuller states: a fork's and a sessionless pending request, an escalation, and a
    pending call of an MCP tool."""
    runtime = world.runtime
    fork, _ = request_create(
        RequestInput(
            runtime=runtime,
            skills=["deploy"],
            invoking_session_id="s-alice",
            principal="alice",
            reason="A sub-agent wants to ship the fix.",
        )
    )
    sessionless, _ = request_create(
        RequestInput(runtime=runtime, skills=["cleanup", "notify"], principal="alice", reason="Nightly run")
    )
    escalated, _ = request_create(RequestInput(runtime=runtime, skills=["report"], principal="alice"))
    request_answer(request=escalated, user=world.users["operator"], answer=Answer.ALLOW_SESSION)
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "grep", "description": "search"},
            # No declared axes: the worst defaults (T1-T3), a destructive write to review.
            {"name": "drop_table", "description": "Drops a table"},
        ],
        actor=TEST_ACTOR,
    )
    # The widest card there is: an MCP tool whose server's claims are trusted, with a subject
    # and arguments longer than a phone is wide.
    server = mcp_server("shell", trust=AnnotationTrust.TRUST)
    annotations = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    tools_synced(server, [{"name": "run", "description": "Run a command", "annotations": annotations}])
    tool_subject_set(server="shell", tool="run", argument="command", actor=TEST_ACTOR)
    command = "rm -rf /var/lib/a-rather-long-directory-name/with/more/segments/than/fit/on/a/phone"
    mcp_call = open_tool_request(
        runtime, "run", {"command": command, "cwd": "/srv"}, server="shell", session_id="s-alice"
    )
    return fork, sessionless, mcp_call


def visits_for(
    world: World, fork: ApprovalRequest, sessionless: ApprovalRequest, mcp_call: ApprovalRequest
) -> list[Visit]:
    visits = []
    post_only_example = None
    for route in ROUTES:
        if left_out(route.key):
            continue
        if post_only(route):
            post_only_example = post_only_example or route
            continue
        who = visitor(route)
        assert who is not None, f"{route.key}: nobody may open it, so it cannot be swept"
        visits.append(Visit(route.key, path_of(route, world), who))
    assert post_only_example is not None
    visits += [
        Visit("request (fork)", reverse("approvals:request", args=[fork.pk]), "alice"),
        Visit("request (sessionless)", reverse("approvals:request", args=[sessionless.pk]), "alice"),
        Visit("request (MCP tool call)", reverse("approvals:request", args=[mcp_call.pk]), "alice"),
        Visit("error 404", "/no-such-page/", "alice", 404),
        Visit("error 403", reverse("runtimes:list"), "alice", 403),
        Visit("error 405", path_of(post_only_example, world), "alice", 405),
    ]
    return visits


def unswept_routes() -> list[str]:
    """Routes neither swept nor left out by name (POST-only routes show the 405 page); a
    route without its row in the authorization matrix cannot be swept, so it is one too."""
    missing = []
    for route in ROUTES:
        if left_out(route.key):
            continue
        if route.key not in EXPECTED or (not post_only(route) and visitor(route) is None):
            missing.append(route.key)
    return missing


def visits_by_everyone(world: World) -> list[Visit]:
    """Every page as each person who may open it (an approver, an operator, the runtime's
    owner, an auditor, the anonymous), where `visits_for` opens each as one of them."""
    visits = []
    for route in ROUTES:
        if left_out(route.key) or post_only(route):
            continue
        allowed = [who for who in (*VISITORS, "anonymous") if EXPECTED[route.key].get[who] == OK]
        visits += [Visit(route.key, path_of(route, world), who) for who in allowed]
    return visits


@pytest.fixture
def sweep_world(live_server: LiveServer, world: World) -> SweepWorld:
    fork, sessionless, mcp_call = enrich(world)
    return SweepWorld(world, fork, sessionless, visits_for(world, fork, sessionless, mcp_call))


class Visitors:
    """One browser context per person at one width, signed in by session cookie."""

    def __init__(
        self, browser: Browser, live_server: LiveServer, users: dict[str, User], viewport: dict[str, int]
    ) -> None:
        self.browser = browser
        self.live_server = live_server
        self.users = users
        self.viewport = viewport
        self.contexts: dict[str, BrowserContext] = {}
        self.pages: dict[str, Page] = {}

    def page(self, who: str) -> Page:
        if who not in self.pages:
            context = self.browser.new_context(viewport=self.viewport)
            context.set_default_timeout(TIMEOUT_MS)
            if who != "anonymous":
                client = Client()
                client.force_login(self.users[who])
                cookie = client.cookies["sessionid"].value
                context.add_cookies([{"name": "sessionid", "value": cookie, "url": self.live_server.url}])
            self.contexts[who] = context
            self.pages[who] = context.new_page()
        return self.pages[who]

    def open(self, visit: Visit) -> Page:
        page = self.page(visit.who)
        response = page.goto(f"{self.live_server.url}{visit.path}")
        assert response is not None
        got = response.status
        assert got == visit.status, f"{visit.key}: {visit.path} as {visit.who} is {got}"
        return page

    def close(self) -> None:
        for context in self.contexts.values():
            context.close()


@pytest.fixture
def visitors_at(browser: Browser, live_server: LiveServer, sweep_world: SweepWorld) -> Iterator:
    made: list[Visitors] = []

    def at(width: str) -> Visitors:
        made.append(Visitors(browser, live_server, sweep_world.world.users, WIDTHS[width]))
        return made[-1]

    yield at
    for each in made:
        each.close()


def horizontal_overflow(page: Page) -> int:
    """How many CSS px the document is wider than the viewport (0: no sideways scroll)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def cut_off(page: Page, limit: int = 5) -> list[str]:
    """Text cut short by an ellipsis with no way to read it in full: an element showing "…"
    for text wider than itself, where neither it nor an element around it has a title."""
    return page.evaluate(
        """(limit) => {
             const found = [];
             for (const el of document.body.querySelectorAll('*')) {
               if (getComputedStyle(el).textOverflow !== 'ellipsis') continue;
               if (el.scrollWidth <= el.clientWidth + 1 || el.closest('[title]')) continue;
               if (el.closest('.visually-hidden')) continue;
               found.push(`${el.tagName.toLowerCase()}.${[...el.classList].join('.')}: `
                          + JSON.stringify(el.textContent.trim().slice(0, 60)));
             }
             return found.slice(0, limit);
           }""",
        limit,
    )


def cut_choices(page: Page, limit: int = 5) -> list[str]:
    """Drop-downs too narrow for the choice they show: its text, in the box's font, is wider
    than the box less its padding and arrow (a person reads "Attended: someon")."""
    return page.evaluate(
        """(limit) => {
             const found = [], canvas = document.createElement('canvas').getContext('2d');
             for (const select of document.querySelectorAll('select:not([multiple])')) {
               const option = select.options[select.selectedIndex];
               if (!option || select.offsetParent === null) continue;
               const style = getComputedStyle(select);
               canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
               const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
               const room = select.clientWidth - padding - 20;
               if (canvas.measureText(option.text).width > room) {
                 found.push(`select#${select.id}: ${JSON.stringify(option.text)}`);
               }
             }
             return found.slice(0, limit);
           }""",
        limit,
    )


def overflowing(page: Page, limit: int = 5) -> list[str]:
    """The outermost elements that stick out to the right of the viewport, to name in a failure."""
    return page.evaluate(
        """(limit) => {
             const width = window.innerWidth, found = [];
             for (const el of document.body.querySelectorAll('*')) {
               const box = el.getBoundingClientRect();
               if (box.right <= width + 1 || box.width === 0) continue;
               if (found.some((outer) => outer.contains(el))) continue;
               let clipped = false;
               for (let up = el.parentElement; up; up = up.parentElement) {
                 const o = getComputedStyle(up).overflowX;
                 if (o === 'auto' || o === 'scroll' || o === 'hidden') { clipped = true; break; }
               }
               if (!clipped) found.push(el);
             }
             return found.slice(0, limit).map((el) =>
               `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${[...el.classList].join('.')}`
               + ` right=${Math.round(el.getBoundingClientRect().right)}`);
           }""",
        limit,
    )
