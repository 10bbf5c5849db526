"""The authorization matrix: every URL pattern x every kind of caller, GET and POST (S13, S11).

Generated from the URL configuration: `get_resolver()` is walked, and every pattern (pages,
htmx fragments, the API, the audit pages, django-admin) must have a row in EXPECTED, keyed
by its URL name (its route where it has none). A new view without a row fails
`test_every_url_is_classified`, so it cannot ship unclassified.

The world is made through the services: two runtimes (agent-one owned by Owen), a live,
another runtime's and a revoked token, Alice's session and request, her session grant, a
rule, an MCP server with a sync run, a local tool. Someone else's object is a 404. A POST
that is refused changes nothing: no audit event, grant, token, request status or setting.

The world is built once for the module, inside a transaction that is never committed, and
every test runs inside a savepoint of it that is rolled back when the test ends: each test
meets the world exactly as it was built, and nothing one test writes is there for the next.
Each test also gets its own copy of the world's objects, and starts and ends with this
process's caches of the database (the rule indexes, the enforcement-point writes, the
verification and checkpoint markers, the home page's forecast) forgotten. The module's
transaction is rolled back after its last test, so the modules after it meet the database
as they would without this one. The `world` fixture other modules import is built afresh
for each of their tests, as they change it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from pytest_django import DjangoDbBlocker

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, RequestKind, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, Grant, Session, SkillRule, ToolRule
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.audit import checkpoints, verify_now
from aimon_admin.audit.models import AuditEvent
from aimon_admin.notifications import services as notify
from aimon_admin.notifications.choices import ChannelKind
from aimon_admin.notifications.models import Channel as NotifyChannel
from aimon_admin.registry import home as registry_home
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.models import McpServer, McpSyncRun, RelayFinding, Tool, ToolSubject
from aimon_admin.registry.services import (
    local_tools_replace,
    mcp_server_create,
    mcp_sync_request,
    mcp_tools_relay,
    tool_subject_set,
)
from aimon_admin.runtimes import enforcement
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.services import runtime_create, token_issue, token_revoke
from tests.accounts.factories import person
from tests.conftest import TEST_ACTOR

# --- Outcomes ------------------------------------------------------------------------------------

OK = "200"
NO_CONTENT = "204"
LOGIN = "302 login"  # to the sign-in page, with ?next=
ADMIN_LOGIN = "302 admin login"  # django-admin's own sign-in (nobody here is staff)
MOVED = "302 elsewhere"  # a successful write's redirect
SEE_OTHER = "303"  # post/redirect/get: an invalid form back to its page, kept as a draft
BAD = "400"
UNAUTH = "401"
FORBID = "403"
NOT_READY = "503"
MISSING = "404"
NOT_ALLOWED = "405"
REFUSED = {LOGIN, ADMIN_LOGIN, UNAUTH, FORBID, MISSING, NOT_ALLOWED}

PEOPLE = ("anonymous", "alice", "bob", "operator", "auditor", "owner")
TOKENS = ("token", "other_token", "revoked_token")
CALLERS = PEOPLE + TOKENS


def _row(**outcomes: str) -> dict[str, str]:
    assert set(outcomes) == set(CALLERS), sorted(set(CALLERS) ^ set(outcomes))
    return outcomes


def page(*, alice: str, bob: str, operator: str, auditor: str, owner: str) -> dict[str, str]:
    """A browser page: a token is no sign-in, so every token caller is sent to sign in."""
    return _row(
        anonymous=LOGIN,
        alice=alice,
        bob=bob,
        operator=operator,
        auditor=auditor,
        owner=owner,
        token=LOGIN,
        other_token=LOGIN,
        revoked_token=LOGIN,
    )


def api(*, token: str, other_token: str, anonymous: str = UNAUTH, revoked: str = UNAUTH) -> dict[str, str]:
    """An API route: people (a session cookie, no token) are 401 like the anonymous."""
    return _row(
        anonymous=anonymous,
        alice=anonymous,
        bob=anonymous,
        operator=anonymous,
        auditor=anonymous,
        owner=anonymous,
        token=token,
        other_token=other_token,
        revoked_token=revoked,
    )


def everyone(outcome: str) -> dict[str, str]:
    return _row(**dict.fromkeys(CALLERS, outcome))


def operators(ok: str, *, auditor: str = FORBID) -> dict[str, str]:
    """Operator-only pages (approvers hold no such permission; auditors only read)."""
    return page(alice=FORBID, bob=FORBID, operator=ok, auditor=auditor, owner=FORBID)


def readers(ok: str = OK) -> dict[str, str]:
    """What operators and auditors read and approvers do not."""
    return page(alice=FORBID, bob=FORBID, operator=ok, auditor=ok, owner=FORBID)


def approvers(ok: str) -> dict[str, str]:
    """Approvers and operators, each scoped by the selectors; auditors answer nothing."""
    return page(alice=ok, bob=ok, operator=ok, auditor=FORBID, owner=ok)


def alices(ok: str) -> dict[str, str]:
    """Alice's own object: Bob and Owen (who owns the runtime, but she is its principal)
    get a 404, operators see all, auditors answer nothing (S13)."""
    return page(alice=ok, bob=MISSING, operator=ok, auditor=FORBID, owner=MISSING)


def agent_managers(ok: str) -> dict[str, str]:
    """Agent-wide approvals: operators and the runtime's owner (S13)."""
    return page(alice=FORBID, bob=FORBID, operator=ok, auditor=FORBID, owner=ok)


def own(ok: str) -> dict[str, str]:
    """A person's own object that is not a request: anyone else's is a 404, operators' too."""
    return page(alice=ok, bob=MISSING, operator=MISSING, auditor=MISSING, owner=MISSING)


@dataclass(frozen=True)
class Expect:
    get: dict[str, str]
    post: dict[str, str]


def only_get(get: dict[str, str]) -> Expect:
    """A GET-only page: its method check comes first, so a POST is a 405 for anyone."""
    return Expect(get=get, post=everyone(NOT_ALLOWED))


def only_post(post: dict[str, str]) -> Expect:
    """A POST-only view: its method check comes first, so a GET is a 405 for anyone."""
    return Expect(get=everyone(NOT_ALLOWED), post=post)


ADMIN_ONLY = Expect(get=everyone(ADMIN_LOGIN), post=everyone(ADMIN_LOGIN))

SIGN_IN = _row(**dict.fromkeys(("anonymous", *TOKENS), OK), **dict.fromkeys(PEOPLE[1:], MOVED))
# An empty sign-in form is sent back to the sign-in page with its error (post/redirect/get).
SIGN_IN_POST = _row(**dict.fromkeys(("anonymous", *TOKENS), SEE_OTHER), **dict.fromkeys(PEOPLE[1:], MOVED))

# Each row: what every caller gets for GET and for POST (an empty form, CSRF token sent).
EXPECTED: dict[str, Expect] = {
    "core:home": only_get(approvers(OK) | {"auditor": OK}),
    # Prometheus' scrape: its own token or an allowed address, neither configured here; a
    # person's session or a runtime's token reads nothing (tests/core/test_metrics.py).
    "metrics": only_get(everyone(FORBID)),
    # The probes answer anyone alike (the test settings name no audit signing key, so the
    # node is not ready: 503 for everyone).
    "healthz": only_get(everyone(OK)),
    "readyz": only_get(everyone(NOT_READY)),
    # The documentation in docs/ as pages: the repository's own, to everyone.
    "core:help": only_get(everyone(OK)),
    "core:help-page": only_get(everyone(OK)),
    # A signed-in person is sent on from the sign-in page; others' empty form is sent back to it.
    "accounts:login": Expect(get=SIGN_IN, post=SIGN_IN_POST),
    "accounts:logout": Expect(get=everyone(NOT_ALLOWED), post=everyone(MOVED)),
    # Sign-in through a provider: none is configured here (tests/accounts/test_oidc.py has one).
    "accounts:oidc-start": Expect(get=everyone(MISSING), post=everyone(NOT_ALLOWED)),
    "accounts:oidc-callback": Expect(get=everyone(MISSING), post=everyone(NOT_ALLOWED)),
    # A set-password link's page is for whoever holds the link (here a token that never was).
    "accounts:set-password": Expect(get=everyone(OK), post=everyone(OK)),
    # Administration: operators only; auditors do not read people either.
    "accounts:people": only_get(operators(OK)),
    "accounts:person-create": Expect(get=operators(OK), post=operators(SEE_OTHER)),  # invalid: back to it
    "accounts:person": only_get(operators(OK)),
    "accounts:person-roles": Expect(get=operators(MOVED), post=operators(MOVED)),  # GET: to the person
    "accounts:person-deactivate": Expect(get=operators(OK), post=operators(MOVED)),
    "accounts:person-reactivate": only_post(operators(MOVED)),
    "accounts:person-link": Expect(get=operators(OK), post=operators(MOVED)),  # to the page that shows it
    "accounts:locked": only_get(operators(OK)),
    "accounts:unlock": Expect(get=operators(OK), post=operators(MOVED)),
    # Runtimes (operators change; auditors read)
    "runtimes:list": only_get(readers()),
    "runtimes:create": Expect(get=operators(OK), post=operators(SEE_OTHER)),  # invalid form: back to it
    "runtimes:detail": only_get(readers()),
    # GET: to the runtime page; an invalid form back to it (post/redirect/get).
    "runtimes:settings": Expect(get=operators(MOVED), post=operators(SEE_OTHER)),
    "runtimes:token-issue": Expect(get=operators(MOVED), post=operators(MOVED)),  # to the page that shows it
    "runtimes:token-issued": only_get(operators(OK)),  # "already shown": the token waits in a session
    "runtimes:token-revoke": Expect(get=operators(OK), post=operators(MOVED)),
    "runtimes:disable": Expect(get=operators(OK), post=operators(MOVED)),  # a confirmation, then the POST
    "runtimes:enable": only_post(operators(MOVED)),
    "runtimes:retire": Expect(get=operators(OK), post=operators(MOVED)),
    # Registry
    "registry:server-list": only_get(readers()),
    # An invalid form is sent back to its page (post/redirect/get).
    "registry:server-create": Expect(get=operators(OK), post=operators(SEE_OTHER)),
    "registry:server-detail": only_get(readers()),
    "registry:server-edit": Expect(get=operators(OK), post=operators(SEE_OTHER)),
    "registry:server-sync": only_post(operators(MOVED)),
    "registry:server-sync-run": only_get(readers()),
    # An unreadable or stale confirmation: back to the page, as the list is now.
    "registry:server-trust": Expect(get=operators(OK), post=operators(MOVED)),
    # A confirmation, then the POST.
    "registry:server-retire": Expect(get=operators(OK), post=operators(MOVED)),
    "registry:tool-list": only_get(readers()),
    "registry:tool-detail": only_get(readers()),
    "registry:tool-accept": Expect(get=operators(OK), post=operators(MOVED)),
    # U1: an empty argument clears a subject that is not set: nothing changes, back to the page.
    "registry:tool-subject": Expect(get=operators(MOVED), post=operators(MOVED)),
    "registry:tool-review": Expect(get=operators(OK), post=operators(SEE_OTHER)),
    "registry:finding-accept": Expect(get=operators(OK), post=operators(MOVED)),  # T15 relay findings
    "registry:finding-dismiss": only_post(operators(MOVED)),
    "registry:simulator": only_get(readers()),
    "registry:worklist": only_get(readers()),
    # Approvals (S13: a request belongs to its principal; operators see all)
    "approvals:inbox": only_get(approvers(OK)),
    "approvals:inbox-poll": only_get(approvers(OK)),
    "approvals:request": only_get(alices(OK)),
    "approvals:answer": only_post(alices(MOVED)),
    "approvals:dismiss": Expect(get=alices(OK), post=alices(MOVED)),
    "approvals:sessions": only_get(approvers(OK)),
    "approvals:session": only_get(alices(OK)),
    "approvals:session-clear": Expect(get=alices(OK), post=alices(MOVED)),
    "approvals:session-revoke": Expect(get=alices(OK), post=alices(MOVED)),
    "approvals:grant-revoke": Expect(get=alices(OK), post=alices(MOVED)),
    # S14: Undo of an allow is its answerer's alone; auditors answer nothing.
    "approvals:grant-undo": only_post(
        page(alice=MOVED, bob=MISSING, operator=MISSING, auditor=FORBID, owner=MISSING)
    ),
    "approvals:agent": only_get(agent_managers(OK)),
    "approvals:agent-revoke": Expect(get=agent_managers(OK), post=agent_managers(MOVED)),
    "approvals:rules": only_get(readers()),
    "approvals:rule-add": only_get(operators(OK)),  # the form for a new rule
    # GET: to the add page; an invalid form back to it (post/redirect/get).
    "approvals:rule-create": Expect(get=operators(MOVED), post=operators(SEE_OTHER)),
    "approvals:rule-preview": only_get(operators(OK)),  # what a pattern matches, before saving
    "approvals:rule-delete": Expect(get=operators(OK), post=operators(MOVED)),
    # Tool rules (U1, U5) on the same page, added on their own; an empty POST is an invalid
    # form, sent back to its add page.
    "approvals:tool-rule-add": only_get(operators(OK)),
    "approvals:tool-rule-create": Expect(get=operators(MOVED), post=operators(SEE_OTHER)),
    "approvals:tool-rule-preview": only_get(operators(OK)),
    "approvals:tool-rule-delete": Expect(get=operators(OK), post=operators(MOVED)),
    # Notifications: a person's own channels (Alice's here), operators' webhooks,
    # the delivery log for operators and auditors.
    "notifications:channels": only_get(approvers(OK)),
    "notifications:channel-add": Expect(get=approvers(MOVED), post=approvers(SEE_OTHER)),  # invalid form
    "notifications:channel-test": only_post(own(MOVED)),
    "notifications:channel-remove": Expect(get=own(OK), post=own(MOVED)),  # confirm, then POST
    "notifications:preferences": Expect(get=approvers(MOVED), post=approvers(SEE_OTHER)),
    "notifications:my-deliveries": only_get(approvers(OK)),
    "notifications:log": only_get(readers()),
    "notifications:webhooks": only_get(operators(OK)),
    "notifications:webhook-create": Expect(get=operators(MOVED), post=operators(SEE_OTHER)),
    "notifications:webhook-rotate": Expect(get=operators(OK), post=operators(MOVED)),  # shows it next
    "notifications:webhook-secret": only_get(operators(OK)),  # "already shown": it waits in a session
    # Audit (auditors and operators read; nobody writes)
    "audit:home": only_get(readers()),
    "audit:log": only_get(readers()),
    "audit:export-csv": only_get(readers()),
    "audit:export-jsonl": only_get(readers()),
    "audit:event": only_get(readers()),
    "audit:escalations": only_get(readers()),
    "audit:in-force": only_get(readers()),
    "audit:analytics": only_get(readers()),
    # Verify now: the chain verification, asked for at once; its card, polled.
    "audit:verify": only_post(readers(MOVED)),
    "audit:verification": only_get(readers()),
    # A4: signed checkpoints and proofs. This world has no signing key and no checkpoint: the
    # downloads answer 404/400/409 saying so; Sign now is refused with the reason (a redirect).
    "audit:checkpoints": only_get(readers()),
    "audit:checkpoint-sign": only_post(readers(MOVED)),
    "audit:checkpoint-public-key": only_get(readers(MISSING)),
    "audit:checkpoint-latest": only_get(readers(MISSING)),
    "audit:checkpoint-export": only_get(readers(BAD)),
    "audit:event-proof": only_get(readers("409")),
    # The runtime API: the token's own runtime; another runtime's request is a 404
    "api:runtime-self": Expect(
        get=api(token=OK, other_token=OK), post=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED)
    ),
    # DRF views, the decisions too: the token before the method.
    "api:skill-decisions": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED),
        post=api(token=BAD, other_token=BAD),  # {} lacks skills
    ),
    "api:approval-requests": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=BAD, other_token=BAD)
    ),
    # The long-poll checks the method first too.
    "api:approval-request-detail": Expect(get=api(token=OK, other_token=MISSING), post=everyone(NOT_ALLOWED)),
    "api:approval-request-cancel": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=OK, other_token=MISSING)
    ),
    # Sessions are keyed by (runtime, session_id): another runtime's clear reaches its own
    # session of that name (none here), never agent-one's.
    "api:session-clear": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=OK, other_token=OK)
    ),
    "api:session-revoke": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=OK, other_token=OK)
    ),
    "api:tools": Expect(
        get=api(token=OK, other_token=OK), post=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED)
    ),
    "api:tool-decisions": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=BAD, other_token=BAD)
    ),
    # Tool approval requests (U2): as skill requests, agent-one's tool request is another's 404.
    "api:tool-approval-requests": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=BAD, other_token=BAD)
    ),
    "api:tool-approval-request-detail": Expect(
        get=api(token=OK, other_token=MISSING), post=everyone(NOT_ALLOWED)
    ),
    "api:tool-approval-request-cancel": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=OK, other_token=MISSING)
    ),
    "api:mcp-servers": Expect(
        get=api(token=OK, other_token=OK), post=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED)
    ),
    "api:mcp-server-tools": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=BAD, other_token=BAD)
    ),
    "^api/": Expect(get=everyone(MISSING), post=everyone(MISSING)),
    # The tool decision as an AuthZEN policy decision point: the same token as the API; its
    # discovery document is public (metadata only, it decides nothing).
    "authzen-evaluation": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=BAD, other_token=BAD)
    ),
    "authzen-evaluations": Expect(
        get=api(token=NOT_ALLOWED, other_token=NOT_ALLOWED), post=api(token=BAD, other_token=BAD)
    ),
    "authzen-configuration": only_get(everyone(OK)),
    "^access/": Expect(get=everyone(MISSING), post=everyone(MISSING)),
    # The schema and its docs are public: they describe the API, they grant nothing.
    "api-schema": only_get(everyone(OK)),
    "api-docs": only_get(everyone(OK)),
    # django-admin: nobody is staff, so everything but its sign-in sends you to it.
    "admin:login": Expect(get=everyone(OK), post=everyone(OK)),
    "admin:logout": Expect(get=everyone(MOVED), post=everyone(MOVED)),
}
# htmx fragments are fetched as htmx fetches them (a plain GET of a poll is sent to its page).
HTMX_FRAGMENTS = {"registry:server-sync-run", "approvals:inbox-poll"}
ADMIN_PATTERN = re.compile(r"^admin:|^django-admin/")


def expected_for(key: str) -> Expect | None:
    if key in EXPECTED:
        return EXPECTED[key]
    if ADMIN_PATTERN.match(key):
        # Every other django-admin page: staff only, and nobody here is staff.
        return ADMIN_ONLY
    return None


# --- The URL configuration, walked -------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    key: str  # the URL name, or the route where there is none
    name: str | None
    route: str
    parameters: tuple[str, ...]


def _walk(resolver: URLResolver, prefix: str = "", namespace: str | None = None) -> Iterator[Route]:
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            inner = namespace
            if pattern.namespace:
                inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
            yield from _walk(pattern, prefix + str(pattern.pattern), inner)
            continue
        assert isinstance(pattern, URLPattern)
        route = prefix + str(pattern.pattern)
        name = f"{namespace}:{pattern.name}" if namespace and pattern.name else pattern.name
        parameters = tuple(pattern.pattern.regex.groupindex)
        key = route if prefix.startswith("django-admin") and name is None else name or route
        yield Route(key=key, name=name, route=route, parameters=parameters)


ROUTES = list(_walk(get_resolver()))
ROUTE_BY_KEY = {route.key: route for route in ROUTES}


def test_every_url_is_classified() -> None:
    # A new view must say who may use it before it can ship (S13).
    unclassified = [route.key for route in ROUTES if expected_for(route.key) is None]
    assert unclassified == []
    stale = [key for key in EXPECTED if key not in ROUTE_BY_KEY]
    assert stale == []


def test_the_walk_sees_every_kind_of_url() -> None:
    keys = set(ROUTE_BY_KEY)
    for needed in (
        "approvals:answer",
        "approvals:inbox-poll",
        "api:skill-decisions",
        "audit:event",
        "admin:index",
    ):
        assert needed in keys
    assert len(ROUTES) > 70


# --- The world, made through the services ------------------------------------------------------


@dataclass
class World:
    users: dict[str, User]
    runtime: AgentRuntime
    other_runtime: AgentRuntime
    tokens: dict[str, str]
    request: ApprovalRequest
    tool_request: ApprovalRequest
    session: Session
    grant: Grant
    rule: SkillRule
    tool_rule: ToolRule
    server: McpServer
    run: McpSyncRun
    tool: Tool
    token_row: RuntimeToken
    finding: RelayFinding
    notify_channel: NotifyChannel
    webhook: NotifyChannel


def _build_world() -> World:
    users = {
        "alice": person("alice", Role.APPROVER),
        "bob": person("bob", Role.APPROVER),
        "operator": person("olivia", Role.OPERATOR),
        "auditor": person("audrey", Role.AUDITOR),
        "owner": person("owen", Role.APPROVER),
    }
    runtime = runtime_create(name="agent-one", owner=users["owner"], actor=TEST_ACTOR)
    other_runtime = runtime_create(name="agent-two", actor=TEST_ACTOR)
    token_row, token = token_issue(runtime=runtime, actor=TEST_ACTOR, label="live")
    _, other_token = token_issue(runtime=other_runtime, actor=TEST_ACTOR, label="other")
    revoked_row, revoked_token = token_issue(runtime=runtime, actor=TEST_ACTOR, label="revoked")
    token_revoke(token=revoked_row, actor=TEST_ACTOR)
    request, _ = request_create(
        RequestInput(
            runtime=runtime,
            skills=["deploy", "notify"],
            session_id="s-alice",
            principal="alice",
            turn_id="t-1",
            reason="ship it",
        )
    )
    answered, _ = request_create(
        RequestInput(runtime=runtime, skills=["backup"], session_id="s-alice", principal="alice")
    )
    request_answer(request=answered, user=users["alice"], answer=Answer.ALLOW_SESSION)
    grant = Grant.objects.get(request=answered)
    tool_request, _ = request_create(
        RequestInput(
            runtime=runtime,
            skills=[],
            kind=RequestKind.TOOL,
            tool="grep",
            arguments={"pattern": "TODO"},
            session_id="s-alice",
            principal="alice",
        )
    )
    rule = rules.rule_create(pattern="read-*", action=RuleAction.ALLOW, actor=TEST_ACTOR)
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_rule = rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    server = mcp_server_create(
        name="files", transport=McpTransport.STDIO, command="/bin/false", actor=TEST_ACTOR
    )
    run = mcp_sync_request(server=server, actor=TEST_ACTOR)  # queued; tests never commit
    local_tools_replace(runtime=runtime, tools=[{"name": "grep", "description": "search"}], actor=TEST_ACTOR)
    # A relay finding (T15): agent-two relays agent-one's listing of a tool with other text.
    mcp_tools_relay(server=server, runtime=runtime, listing=[{"name": "ls", "description": "list"}])
    [finding] = mcp_tools_relay(
        server=server, runtime=other_runtime, listing=[{"name": "ls", "description": "other"}]
    ).findings
    notify_channel = notify.channel_add(
        owner=users["alice"], kind=ChannelKind.EMAIL, name="work", target="a@example.test", actor=TEST_ACTOR
    )
    # A port nothing listens on: a delivery the world's requests set off fails at once, and
    # never leaves the machine.
    webhook, _ = notify.webhook_create(name="siem", url="http://127.0.0.1:9/hook", actor=TEST_ACTOR)
    return World(
        users=users,
        runtime=runtime,
        other_runtime=other_runtime,
        tokens={"token": token, "other_token": other_token, "revoked_token": revoked_token},
        request=request,
        tool_request=tool_request,
        session=Session.objects.get(runtime=runtime, session_id="s-alice"),
        grant=grant,
        rule=rule,
        tool_rule=tool_rule,
        server=server,
        run=run,
        tool=Tool.objects.get(runtime=runtime, name="grep"),
        token_row=token_row,
        finding=finding,
        notify_channel=notify_channel,
        webhook=webhook,
    )


def _forget_process_caches() -> None:
    """What this process keeps of the database outside it, which a rolled-back test's
    writes must not leave behind for the next test."""
    rules.rule_index_reset()  # the tool rule index with it
    enforcement.forget()
    verify_now.verification_forget()
    checkpoints.refusal_forget()
    registry_home.forecast_forget()


@pytest.fixture
def world(db: None) -> Iterator[World]:
    """The world built for one test and rolled back with it, for the modules that import this
    fixture (their tests change the world, some on a live server). This module's tests
    share one world instead (`shared_world`)."""
    rules.rule_index_reset()
    yield _build_world()
    rules.rule_index_reset()


@pytest.fixture(scope="module")
def built_world(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[World]:
    """The world, built once for the module in a transaction that is never committed.

    Between tests the database is blocked again (a test without the `db` fixture cannot
    reach it); the `db` fixture of each test opens a savepoint inside this transaction and
    rolls it back. After the module's last test the whole transaction is rolled back."""
    # Inside a test's transaction the world would be rolled back with that test.
    assert not connection.in_atomic_block, "the world must be built before any test's transaction"
    with django_db_blocker.unblock(), transaction.atomic():
        _forget_process_caches()
        world = _build_world()
        with django_db_blocker.block():
            yield world
        transaction.set_rollback(True)
    _forget_process_caches()


@pytest.fixture
def shared_world(built_world: World, db: None) -> Iterator[World]:
    """The module's world for one test: the test's savepoint rolls back whatever it writes,
    its objects are a copy of the world's as built, and the process's caches start empty."""
    _forget_process_caches()
    yield copy.deepcopy(built_world)
    _forget_process_caches()


def _admin_object_id(name: str, world: World) -> str:
    match = re.match(r"admin:(?P<app>[a-z]+)_(?P<model>[a-z]+)_", name)
    if match is None or name == "admin:view_on_site":
        return str(world.runtime.pk)
    model = apps.get_model(match["app"], match["model"])
    first = model.objects.order_by("pk").first()
    return str(first.pk) if first is not None else "1"


def path_of(route: Route, world: World) -> str:
    """The route's address with real objects of the world in its parameters."""
    values: dict[str, Callable[[], Any]] = {
        "name": lambda: (
            world.server.name if route.key.startswith(("registry:", "api:mcp")) else world.runtime.name
        ),
        "token_id": lambda: world.token_row.pk,
        "run_id": lambda: world.run.pk,
        "request_id": lambda: (
            world.tool_request.pk if route.key.startswith("api:tool-approval") else world.request.pk
        ),
        "session_id": lambda: "s-alice",
        "seq": lambda: AuditEvent.objects.order_by("seq").values_list("seq", flat=True).first(),
        "app_label": lambda: "runtimes",
        "content_type_id": lambda: ContentType.objects.get_for_model(AgentRuntime).pk,
        "object_id": lambda: _admin_object_id(route.name or "", world),
        "id": lambda: world.users["alice"].pk,
        "username": lambda: world.users["alice"].username,
        "uidb64": lambda: urlsafe_base64_encode(force_bytes(world.users["alice"].pk)),
        "token": lambda: "not-a-real-link-token",
        "url": lambda: "nowhere/",
        "page": lambda: "concepts",
    }
    pk_by_prefix = {
        "approvals:request": world.request.pk,
        "approvals:answer": world.request.pk,
        "approvals:dismiss": world.request.pk,
        "approvals:session": world.session.pk,
        "approvals:grant-": world.grant.pk,
        "approvals:rule-delete": world.rule.pk,
        "approvals:tool-rule-delete": world.tool_rule.pk,
        "registry:tool": world.tool.pk,
        "registry:finding": world.finding.pk,
        "notifications:channel-": world.notify_channel.pk,
        "notifications:webhook-": world.webhook.pk,
    }
    kwargs: dict[str, Any] = {}
    for parameter in route.parameters:
        if parameter == "pk":
            kwargs["pk"] = next(v for k, v in pk_by_prefix.items() if (route.name or "").startswith(k))
        else:
            kwargs[parameter] = values[parameter]()
    if route.key == "^api/":
        return "/api/v0/anything"
    if route.key == "^access/":
        return "/access/v0/anything"
    if route.name is None:
        # Unnamed django-admin routes: fill the regex by hand.
        path = "/" + route.route
        for parameter, value in kwargs.items():
            path = re.sub(rf"<path:{parameter}>|\(\?P<{parameter}>[^)]*\)", str(value), path)
        return path.replace("$", "").replace("^", "")
    return reverse(route.name, kwargs=kwargs)


# --- Callers ---------------------------------------------------------------------------------


def client_for(caller: str, world: World) -> Client:
    client = Client(enforce_csrf_checks=True)
    if caller in world.users:
        client.force_login(world.users[caller])
    elif caller in world.tokens:
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.tokens[caller]}"
    # A CSRF token as a page would hold it: a refusal here is never the CSRF check's.
    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret
    client.defaults["HTTP_X_CSRFTOKEN"] = secret
    return client


def outcome_of(response: Any) -> str:
    status = response.status_code
    if status == 302:
        location = response["Location"]
        if location.startswith("/accounts/login/?next="):
            return LOGIN
        if location.startswith("/django-admin/login/?next="):
            return ADMIN_LOGIN
        return MOVED
    return str(status)


def fingerprint() -> dict[str, Any]:
    """Everything a refused POST must leave as it was."""
    return {
        "audit": AuditEvent.objects.count(),
        "requests": sorted(ApprovalRequest.objects.values_list("pk", "status")),
        "grants": sorted(Grant.objects.values_list("pk", "revoked_at")),
        "tokens": sorted(RuntimeToken.objects.values_list("pk", "revoked_at")),
        "rules": SkillRule.objects.count(),
        "tool_rules": sorted(ToolRule.objects.values_list("pk", "action", "unattended")),
        "subjects": sorted(ToolSubject.objects.values_list("server", "tool", "argument")),
        "servers": sorted(
            McpServer.objects.values_list("pk", "annotation_trust", "command", "enabled", "retired_at")
        ),
        "runs": McpSyncRun.objects.count(),
        "findings": sorted(RelayFinding.objects.values_list("pk", "status")),
        "tools": sorted(Tool.objects.values_list("pk", "side_effect_level", "reviewed_at")),
        "runtimes": sorted(
            AgentRuntime.objects.values_list(
                "pk", "ceiling", "exempt_at_or_below", "owner", "is_active", "retired_at"
            )
        ),
        "users": sorted(User.objects.values_list("pk", "is_active", "password")),
        "roles": sorted(User.groups.through.objects.values_list("user_id", "group_id")),
        "sessions": Session.objects.count(),
    }


CASES = [
    pytest.param(route.key, caller, id=f"{route.key}-{caller}") for route in ROUTES for caller in CALLERS
]


@pytest.mark.parametrize(("key", "caller"), CASES)
def test_authorization_matrix(key: str, caller: str, shared_world: World) -> None:
    # S13 (who may see and answer what), S11 (a token never writes an approval), A3.
    route = ROUTE_BY_KEY[key]
    expect = expected_for(key)
    assert expect is not None, f"{key} has no row in EXPECTED"
    path = path_of(route, shared_world)

    client = client_for(caller, shared_world)
    headers = {"HX-Request": "true"} if key in HTMX_FRAGMENTS else {}
    got_get = outcome_of(client.get(path, headers=headers))
    assert got_get == expect.get[caller], f"GET {path} as {caller}"

    before = fingerprint()
    # A write that is allowed happens in a savepoint rolled back afterwards, so the next
    # method meets the same world.
    with transaction.atomic():
        if path.startswith(("/api/", "/access/")):
            response = client.post(path, data="{}", content_type="application/json")
        else:
            response = client.post(path, headers=headers)
        got_post = outcome_of(response)
        after = fingerprint()
        transaction.set_rollback(True)
    assert got_post == expect.post[caller], f"POST {path} as {caller}"
    if got_post in REFUSED:
        assert after == before, f"a refused POST {path} as {caller} changed something"


def test_the_matrix_counts_its_cases() -> None:
    # The figure to report: URL patterns x callers (each run with GET and POST).
    assert len(CASES) == len(ROUTES) * len(CALLERS)
    print(f"authorization matrix: {len(ROUTES)} URLs x {len(CALLERS)} callers = {len(CASES)} cases")


# --- CSRF: a person's write needs the page's token ----------------------------------------------

WRITES = [
    pytest.param(route.key, caller, id=f"{route.key}-{caller}")
    for route in ROUTES
    if not route.route.startswith(("^api/", "api/", "^access/")) and expected_for(route.key) is not None
    for caller in PEOPLE[1:]
    if expected_for(route.key).post[caller] not in REFUSED  # type: ignore[union-attr]
]


@pytest.mark.parametrize(("key", "caller"), WRITES)
def test_a_write_without_the_csrf_token_is_refused_and_changes_nothing(
    key: str, caller: str, shared_world: World
) -> None:
    # S11 S13: a page that would accept this person's POST refuses it from another site.
    client = Client(enforce_csrf_checks=True)
    client.force_login(shared_world.users[caller])
    path = path_of(ROUTE_BY_KEY[key], shared_world)
    before = fingerprint()
    response = client.post(path, {"answer": Answer.ALLOW_AGENT})
    assert response.status_code == 403
    assert fingerprint() == before
