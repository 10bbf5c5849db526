"""The homes per role: what needs doing, each count a link to the list it counts, each
section once, and what to do first when there is nothing to count.

Counts are asserted against data made here through the services; each count's link is then
opened and shown to list exactly what was counted (the filtered inbox, the tools awaiting
review, the servers whose sync failed, the warnings in the log)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import home as approvals_home
from aimon_admin.approvals.choices import Answer, RequestKind
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import request_answer
from aimon_admin.audit import home as audit_home
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_record
from aimon_admin.core import home as core_home
from aimon_admin.core.actors import Actor
from aimon_admin.registry import home as registry_home
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, SyncStatus
from aimon_admin.registry.models import McpSyncRun, Tool
from aimon_admin.registry.services import (
    local_tools_replace,
    mcp_server_create,
    mcp_tools_record,
    mcp_tools_relay,
)
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request, open_tool_request
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

# The most queries each home may make, cold (nothing cached), with the data of `busy_world`:
# a fixed number whatever the data (6, 10 and 21 today, Django's ModelBackend reading the
# person's permissions and groups as the page asks; the operator's includes the forecast's
# two or three, for every runtime at once, and one each for the MCP servers and channels
# whose stored secrets no key decrypts).
HOME_QUERIES = {"approver": 6, "auditor": 10, "operator": 21}
# The forecast's own queries, which a second home within FORECAST_SECONDS does not make.
FORECAST_QUERIES = 2

FIGURE = re.compile(
    r'<a class="home-figure[^"]*" href="(?P<url>[^"]+)" data-figure="(?P<key>[^"]+)" '
    r'data-count="(?P<count>\d+)"><span class="home-count">(?P<shown>[^<]+)</span>'
)


def home(user: User) -> str:
    response = logged_in(user).get(reverse("core:home"))
    assert response.status_code == 200
    return response.content.decode()


def figures(html: str) -> dict[str, tuple[int, str, str]]:
    """Each figure of a home: key -> (count, what is shown, the link's address)."""
    found = {}
    for match in FIGURE.finditer(html):
        url = match["url"].replace("&amp;", "&")
        assert match["key"] not in found, f"{match['key']} shown twice"
        found[match["key"]] = (int(match["count"]), match["shown"], url)
    return found


def sections(html: str) -> list[str]:
    return re.findall(r'data-home-section="([^"]+)"', html)


@pytest.fixture(autouse=True)
def fresh_forecast() -> Any:
    registry_home.forecast_forget()
    yield
    registry_home.forecast_forget()


@pytest.fixture
def requests_world(runtime: AgentRuntime, approver: User, other_approver: User) -> dict[str, Any]:
    """Alice's two skill requests and one tool request, Bob's skill and tool requests, and
    requests that no longer wait: answered, and past their deadline."""
    local_tools_replace(runtime=runtime, tools=[{"name": "Bash", "description": "shell"}], actor=TEST_ACTOR)
    made = {
        "alice_skill": [
            open_skill_request(runtime, "deploy", session_id="s-a", principal="alice"),
            open_skill_request(runtime, "backup", "notify", session_id="s-a", principal="alice"),
        ],
        "alice_tool": [
            open_tool_request(runtime, "Bash", {"command": "git push"}, session_id="s-a", principal="alice")
        ],
        "bob_skill": [open_skill_request(runtime, "rollback", session_id="s-b", principal="bob")],
        "bob_tool": [
            open_tool_request(runtime, "Bash", {"command": "git push"}, session_id="s-b2", principal="bob")
        ],
    }
    answered = open_skill_request(runtime, "lint", session_id="s-a", principal="alice")
    request_answer(request=answered, user=approver, answer=Answer.ALLOW_SESSION)
    late = open_skill_request(runtime, "restart", session_id="s-a", principal="alice")
    ApprovalRequest.objects.filter(pk=late.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=5))
    return made


def inbox_ids(client: Client, url: str) -> set[str]:
    response = client.get(url)
    assert response.status_code == 200, url
    return set(re.findall(r'<article[^>]* id="request-([0-9a-f-]{36})"', response.content.decode()))


def ids(*requests: ApprovalRequest) -> set[str]:
    return {str(r.pk) for r in requests}


# --- Approvers and operators: requests to answer ---------------------------------------------


def test_the_approver_home_counts_the_requests_they_may_answer_and_each_count_opens_them(
    requests_world: dict[str, Any], approver: User
) -> None:
    # S13 (an approver answers their own requests, and as a runtime's owner its requests that
    # are nobody's): mine and all, by kind.
    owned = runtime_create(name="alices-agent", owner=approver, actor=TEST_ACTOR)
    nightly = open_skill_request(owned, "nightly-backup", session_id=None, principal=None)
    html = home(approver)
    found = figures(html)
    assert {k: v[0] for k, v in found.items()} == {
        "requests-all": 4,
        "requests-mine": 3,
        "requests-skill": 3,
        "requests-tool": 1,
    }
    assert sections(html) == ["requests"]
    client = logged_in(approver)
    alice = requests_world["alice_skill"] + requests_world["alice_tool"]
    assert inbox_ids(client, found["requests-all"][2]) == ids(nightly, *alice)
    assert inbox_ids(client, found["requests-mine"][2]) == ids(*alice)
    assert inbox_ids(client, found["requests-skill"][2]) == ids(nightly, *requests_world["alice_skill"])
    assert inbox_ids(client, found["requests-tool"][2]) == ids(*requests_world["alice_tool"])


def test_the_operator_home_counts_every_request_and_theirs_apart(
    requests_world: dict[str, Any], operator: User, runtime: AgentRuntime
) -> None:
    # Operators answer every request (S13); "from your own sessions" is what names them.
    own = open_skill_request(runtime, "migrate", session_id="s-o", principal="olivia")
    found = figures(home(operator))
    assert found["requests-all"][0] == 6
    assert found["requests-mine"][0] == 1
    assert found["requests-skill"][0] == 4
    assert found["requests-tool"][0] == 2
    client = logged_in(operator)
    assert inbox_ids(client, found["requests-mine"][2]) == ids(own)
    every = [r for key in ("alice_skill", "alice_tool", "bob_skill", "bob_tool") for r in requests_world[key]]
    assert inbox_ids(client, found["requests-all"][2]) == ids(own, *every)
    tools = requests_world["alice_tool"] + requests_world["bob_tool"]
    assert inbox_ids(client, found["requests-tool"][2]) == ids(*tools)
    assert parse_qs(urlsplit(found["requests-tool"][2]).query) == {"kind": [RequestKind.TOOL]}


# --- Operators: the registry and people ------------------------------------------------------

V1 = [
    {"name": "write_file", "annotations": {"readOnlyHint": False, "destructiveHint": True}},
    {"name": "read_file", "annotations": {"readOnlyHint": True}},
]
# write_file now claims it destroys nothing: less risk, held for review (T15).
V2 = [
    {"name": "write_file", "annotations": {"readOnlyHint": False, "destructiveHint": False}},
    {"name": "read_file", "annotations": {"readOnlyHint": True}},
]


@pytest.fixture
def registry_world(runtime: AgentRuntime, other_runtime: AgentRuntime) -> dict[str, Any]:
    """A trusted server with a tool awaiting review and a relay finding, a server whose
    last sync failed, one whose sync is stuck (its worker's lease lapsed), one that synced,
    and local tools that fail unattended: Bash (destructive) and Write (asks) on agent-one."""
    op = Actor.system("pytest")
    files = mcp_server_create(
        name="files",
        transport=McpTransport.STDIO,
        command="files-mcp",
        annotation_trust=AnnotationTrust.TRUST,
        actor=op,
    )
    mcp_tools_record(server=files, listing=V1, actor=op, complete=True)
    mcp_tools_record(server=files, listing=V2, actor=op, complete=True)
    mcp_tools_relay(
        server=files,
        runtime=runtime,
        listing=[{"name": "read_file", "description": "relayed", "annotations": {"readOnlyHint": True}}],
    )
    now = timezone.now()
    broken = mcp_server_create(name="broken", transport=McpTransport.STDIO, command="x", actor=op)
    McpSyncRun.objects.create(
        server=broken, status=SyncStatus.SUCCEEDED, finished_at=now - dt.timedelta(days=1)
    )
    McpSyncRun.objects.create(server=broken, status=SyncStatus.FAILED, error="unreachable", finished_at=now)
    stuck = mcp_server_create(name="stuck", transport=McpTransport.STDIO, command="x", actor=op)
    McpSyncRun.objects.create(
        server=stuck,
        status=SyncStatus.RUNNING,
        attempts=1,
        started_at=now,
        lease_expires_at=now - dt.timedelta(minutes=1),
    )
    fine = mcp_server_create(name="fine", transport=McpTransport.STDIO, command="x", actor=op)
    McpSyncRun.objects.create(
        server=fine, status=SyncStatus.FAILED, error="once", finished_at=now - dt.timedelta(days=1)
    )
    McpSyncRun.objects.create(server=fine, status=SyncStatus.SUCCEEDED, finished_at=now)
    # A disabled server's failed sync is nobody's work.
    off = mcp_server_create(name="off", transport=McpTransport.STDIO, command="x", enabled=False, actor=op)
    McpSyncRun.objects.create(server=off, status=SyncStatus.FAILED, error="off", finished_at=now)
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "Bash", "description": "shell"},
            {"name": "Write", "side_effect_level": "MUTATING", "destructive_behavior": "NON_DESTRUCTIVE"},
            {"name": "Read", "side_effect_level": "READ_ONLY"},
        ],
        actor=TEST_ACTOR,
    )
    return {"files": files, "broken": broken, "stuck": stuck}


def test_the_operator_home_counts_the_registry_work_and_each_count_opens_its_list(
    registry_world: dict[str, Any], operator: User
) -> None:
    # Tools awaiting review, relay findings, syncs in trouble, the forecast.
    held = Tool.objects.get(server=registry_world["files"], name="write_file")
    assert held.awaiting_review
    found = figures(home(operator))
    assert found["awaiting-review"][0] == 1
    assert found["relay-findings"][0] == 1
    assert found["syncs"][0] == 2
    client = logged_in(operator)
    tools = client.get(found["awaiting-review"][2]).content.decode()
    assert reverse("registry:tool-detail", args=[held.pk]) in tools
    assert len(re.findall(r'href="/registry/tools/\d+/"', tools)) == 1  # only the tool held for review
    assert urlsplit(found["relay-findings"][2]).fragment == "relay-findings"
    assert 'id="relay-findings"' in client.get(found["relay-findings"][2]).content.decode()
    servers = client.get(found["syncs"][2]).content.decode()
    listed = re.findall(r'<a href="/registry/servers/([^/]+)/">', servers)
    assert listed == ["broken", "stuck"]


def test_the_forecast_counts_what_the_worklist_counts_for_each_runtime(
    registry_world: dict[str, Any], operator: User, runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:
    # U5: the home's forecast is the worklist's, runtime by runtime, rules included.
    from aimon_admin.approvals.choices import RuleAction
    from aimon_admin.approvals.rules import tool_rule_create

    client = logged_in(operator)

    def worklist(name: str) -> int:
        return client.get(reverse("registry:worklist"), {"runtime": name}).context["failing"]

    # A pre-approval of every Write call answers it whole on agent-one's unattended paths.
    tool_rule_create(
        text="Write", action=RuleAction.ALLOW, runtime=runtime, unattended=True, actor=TEST_ACTOR
    )
    expected = {name: worklist(name) for name in ("agent-one", "agent-two")}
    assert expected == {"agent-one": 2, "agent-two": 1}  # Bash and write_file; write_file
    assert registry_home.unattended_forecast() == [("agent-one", 2), ("agent-two", 1)]
    html = home(operator)
    found = figures(html)
    assert found["forecast"][0] == 2
    assert urlsplit(found["forecast"][2]).path == reverse("registry:worklist")
    assert f'href="{reverse("registry:worklist")}?runtime=agent-one">agent-one: 2 write tools</a>' in html
    assert f'href="{reverse("registry:worklist")}?runtime=agent-two">agent-two: 1 write tool</a>' in html


def test_the_operator_home_counts_locked_sign_ins_and_links_the_unlock_page(
    operator: User, runtime: AgentRuntime, settings
) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(
            reverse("accounts:login"), {"username": "mallory", "password": "wrong"}, REMOTE_ADDR="10.0.0.9"
        )
    found = figures(home(operator))
    assert found["locked"][0] == 1
    assert "mallory" in logged_in(operator).get(found["locked"][2]).content.decode()


# --- Auditors and operators: the audit log ---------------------------------------------------


def test_the_auditor_home_counts_escalations_and_recent_warnings_and_shows_verify_now(
    auditor: User, runtime: AgentRuntime, operator: User
) -> None:
    # S6: a session answer to a request with no session is made agent-wide.
    escalated = open_skill_request(runtime, "report", principal="alice", session_id=None)
    request_answer(request=escalated, user=operator, answer=Answer.ALLOW_SESSION)
    system = Actor.system("pytest")
    for _ in range(2):
        audit_record(action=AuditAction.LOGIN_FAILED, actor=system, level=AuditLevel.WARNING, subject="x")
    html = home(auditor)
    found = figures(html)
    assert set(found) == {"escalated", "warnings"}
    assert found["escalated"][0] == 1
    assert found["escalated"][2] == reverse("audit:escalations")
    warnings = AuditEvent.objects.filter(level=AuditLevel.WARNING).count()
    assert found["warnings"][0] == warnings >= 2
    log = logged_in(auditor).get(found["warnings"][2])
    assert log.status_code == 200
    assert len(log.context["events"]) == warnings
    assert {row.level for row in log.context["events"]} == {AuditLevel.WARNING}
    assert sections(html) == ["audit"]
    assert 'id="verification-card"' in html
    assert 'action="/audit/verify/"' in html
    assert ">Verify now</button>" in html


def test_warnings_older_than_a_day_are_not_counted(auditor: User) -> None:
    since = timezone.now() + dt.timedelta(seconds=1)
    audit_record(action=AuditAction.LOGIN_FAILED, actor=Actor.system("pytest"), level=AuditLevel.WARNING)
    assert audit_home.warnings_since(since) == 0
    assert audit_home.warnings_since(since - dt.timedelta(minutes=1)) == 1


# --- Every role, each section once -----------------------------------------------------------


def test_each_role_sees_its_sections_and_a_person_with_every_role_sees_each_once(
    make_user, requests_world: dict[str, Any]
) -> None:  # type: ignore[no-untyped-def]
    expected = {
        Role.APPROVER: ["requests"],
        Role.AUDITOR: ["audit"],
        Role.OPERATOR: ["requests", "registry", "audit", "people"],
    }
    for role, shown in expected.items():
        assert sections(home(make_user(f"only-{role}", role))) == shown
    everything = home(make_user("all-of-them", Role.OPERATOR, Role.APPROVER, Role.AUDITOR))
    assert sections(everything) == ["requests", "registry", "audit", "people"]
    assert everything.count('id="verification-card"') == 1
    assert len(figures(everything)) == len(set(figures(everything)))


def test_sections_two_providers_give_under_one_key_are_one_card(rf) -> None:  # type: ignore[no-untyped-def]
    first = core_home.Section("x", "First", figures=(core_home.Figure("a", 1, "a", "/a"),))
    second = core_home.Section("x", "Second", figures=(core_home.Figure("b", 2, "b", "/b"),), help="why")
    saved = dict(core_home._providers)
    try:
        core_home._providers.clear()
        core_home.provide("late", lambda request: [second], order=2)
        core_home.provide("early", lambda request: [first], order=1)
        core_home.provide("early", lambda request: [first], order=1)  # again: replaces, not twice
        (merged,) = core_home.sections_for(rf.get("/"))
    finally:
        core_home._providers.clear()
        core_home._providers.update(saved)
    assert merged.title == "First"
    assert [f.key for f in merged.figures] == ["a", "b"]
    assert merged.help == "why"


def test_a_count_past_its_limit_is_shown_with_a_plus() -> None:
    assert core_home.Figure("f", 51, "x", "/", limit=50).shown == "50+"
    assert core_home.Figure("f", 50, "x", "/", limit=50).shown == "50"


# --- Empty states ----------------------------------------------------------------------------


def test_empty_homes_say_what_to_do_first(make_user) -> None:  # type: ignore[no-untyped-def]
    operator = make_user("first-operator", Role.OPERATOR)
    html = home(operator)
    assert registry_home.NO_RUNTIME in html
    assert f'<a href="{reverse("runtimes:create")}">{registry_home.CREATE_RUNTIME}</a>' in html
    assert approvals_home.NOTHING_PENDING in html
    assert f'<a href="{reverse("approvals:inbox")}">{approvals_home.OPEN_INBOX}</a>' in html
    assert not any(key.startswith("requests-") for key in figures(html))  # a sentence, not four zeros
    runtime_create(name="agent-one", actor=TEST_ACTOR)
    html = home(operator)
    assert registry_home.NO_RUNTIME not in html
    assert {
        k: v[0]
        for k, v in figures(html).items()
        if k in ("awaiting-review", "relay-findings", "syncs", "forecast")
    } == {
        "awaiting-review": 0,
        "relay-findings": 0,
        "syncs": 0,
        "forecast": 0,
    }
    assert f'href="{reverse("registry:server-create")}">{registry_home.ADD_SERVER}</a>' in html
    assert "home-figure-pressing" not in html  # nothing waits: every count is muted
    approver_html = home(make_user("first-approver", Role.APPROVER))
    assert approvals_home.NOTHING_PENDING in approver_html
    assert "Your account has no role yet" in home(make_user("nobody"))


# --- Query counts ----------------------------------------------------------------------------


@pytest.fixture
def busy_world(
    requests_world: dict[str, Any], registry_world: dict[str, Any], operator: User, runtime: AgentRuntime
) -> None:
    escalated = open_skill_request(runtime, "report", principal="alice", session_id=None)
    request_answer(request=escalated, user=operator, answer=Answer.ALLOW_SESSION)


@pytest.mark.parametrize("role", ["approver", "auditor", "operator"])
def test_each_home_makes_a_bounded_number_of_queries(
    busy_world: None, make_user, role: str, django_assert_max_num_queries: Any
) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(make_user(f"q-{role}", Role(role)))
    client.get(reverse("approvals:inbox") if role != "auditor" else reverse("audit:home"))  # session warm
    registry_home.forecast_forget()
    with django_assert_max_num_queries(HOME_QUERIES[role]):
        assert client.get(reverse("core:home")).status_code == 200
    if role == "operator":
        # The forecast is kept for a while: the next home does not work it out again.
        with django_assert_max_num_queries(HOME_QUERIES[role] - FORECAST_QUERIES):
            assert client.get(reverse("core:home")).status_code == 200


def test_a_figure_words_its_label_for_its_count() -> None:
    # "1 tool request", not "1 tool requests".
    from aimon_admin.core.home import Figure

    pair = ("tool request", "tool requests")
    assert [Figure("f", n, pair, "/").words for n in (0, 1, 2)] == [
        "tool requests",
        "tool request",
        "tool requests",
    ]
    assert Figure("f", 51, ("row", "rows"), "/", limit=50).words == "rows"
    assert Figure("f", 1, "waiting for an answer", "/").words == "waiting for an answer"
