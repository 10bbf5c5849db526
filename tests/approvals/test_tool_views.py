"""A tool request in the browser (U2, U3, S5, S13): the card shows the tool, its server's trust
and raw claims beside the resolved axes in plain words, the arguments in full (escaped, long
ones folded), the subject highlighted, the pattern picker and each button's reach; the answer
carries the pattern picked; the session and agent pages list tool grants with theirs."""

from __future__ import annotations

import re

import pytest
from django.utils.html import escape

from aimon_admin.accounts.models import User
from aimon_admin.approvals import services
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.tool_card import ARGUMENT_FOLD_CHARS, CALL_REACH
from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace, mcp_server_create, mcp_tools_record
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_tool_request
from tests.conftest import TEST_ACTOR

HTMX = {"HX-Request": "true"}
PUSH = {"command": "git push origin main", "cwd": "/srv/app"}


@pytest.fixture(autouse=True)
def tools(runtime: AgentRuntime) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "Bash"},
            {"name": "Edit", "side_effect_level": "MUTATING", "destructive_behavior": "NON_DESTRUCTIVE"},
        ],
        actor=TEST_ACTOR,
    )
    ToolSubject.objects.create(server="", tool="Bash", argument="command")


def buttons(html: str) -> list[str]:
    return re.findall(r'<button type="submit" name="answer" value="([A-Z_]+)"', html)


def patterns(html: str) -> list[str]:
    return re.findall(r'<input type="radio" name="pattern" value="([^"]*)"', html)


def test_the_card_shows_the_call_in_full(runtime: AgentRuntime, approver: User) -> None:  # U2
    open_tool_request(
        runtime, "Bash", {"command": "git push origin main", "note": "<script>alert(1)</script>"}
    )

    html = logged_in(approver).get("/approvals/").content.decode()

    assert "wants to run <code>Bash</code>" in html
    assert "writes · destructive · not idempotent" in html
    assert '<mark data-testid="subject">git push origin main</mark>' in html
    assert "<mark>&quot;git push origin main&quot;</mark>" in html  # the subject argument, highlighted
    assert escape('"<script>alert(1)</script>"') in html  # shown as text, never as HTML
    assert "<script>alert(1)</script>" not in html
    assert "sha256:" in html


def test_the_buttons_and_their_reach(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # U3, S5, S13
    request = open_tool_request(runtime, "Bash", PUSH)

    mine = logged_in(approver).get("/approvals/").content.decode()
    theirs = logged_in(operator).get(f"/approvals/requests/{request.pk}/").content.decode()

    assert buttons(mine) == ["ALLOW_CALL", "ALLOW_SESSION", "DENY"]
    assert buttons(theirs) == ["ALLOW_CALL", "ALLOW_SESSION", "ALLOW_AGENT", "DENY"]
    labels = re.findall(r'data-answer="[A-Z_]+" aria-describedby="[^"]+">([^<]+)</button>', theirs)
    assert labels == ["Allow this call", "Allow for this session", "Always allow for this agent", "Deny"]
    assert CALL_REACH.capitalize() in theirs
    assert "in session s-1, until the session is cleared" in theirs
    assert "in every session of agent-one: the 1 session it has now and every future one" in theirs


def test_a_destructive_tool_offers_its_whole_for_a_deny_only(
    runtime: AgentRuntime, approver: User
) -> None:  # U3
    open_tool_request(runtime, "Bash", PUSH)

    html = logged_in(approver).get("/approvals/").content.decode()

    assert patterns(html) == ["git push origin main", "git push origin:*", "git push:*", "git:*", ""]
    assert "(Deny only: a destructive tool is never allowed wholesale)" in html
    assert re.search(r'value="git push origin main" checked', html)  # the narrowest is picked first


def test_a_non_destructive_tool_may_be_allowed_whole(runtime: AgentRuntime, approver: User) -> None:  # U3
    open_tool_request(runtime, "Edit", {"path": "a.txt"})

    html = logged_in(approver).get("/approvals/").content.decode()

    assert patterns(html) == [""]  # no subject argument named for Edit: the whole tool only
    assert "Deny only" not in html
    assert buttons(html) == ["ALLOW_CALL", "ALLOW_SESSION", "DENY"]


def test_a_destructive_tool_without_a_subject_is_allowed_one_call_at_a_time(
    runtime: AgentRuntime, approver: User
) -> None:  # U3: never wholesale
    open_tool_request(runtime, "Bash", {"cmd": "ls"})

    html = logged_in(approver).get("/approvals/").content.decode()

    assert buttons(html) == ["ALLOW_CALL", "DENY"]
    assert "is absent or not text" in html


def test_a_long_argument_is_folded_and_expandable(runtime: AgentRuntime, approver: User) -> None:  # U2
    long = "x" * (ARGUMENT_FOLD_CHARS + 50)
    open_tool_request(runtime, "Bash", {"command": "ls", "body": long})

    html = logged_in(approver).get("/approvals/").content.decode()

    folded = re.search(
        r"<details><summary>(.*?)</summary><pre class=\"json\">(.*?)</pre></details>", html, re.S
    )
    assert folded is not None
    assert f"({len(long) + 2} characters: show all)" in folded.group(1)
    assert folded.group(2) == f"&quot;{long}&quot;"


def test_an_mcp_tool_shows_its_server_trust_and_claims(
    runtime: AgentRuntime, operator: User
) -> None:  # U2, T10
    server = mcp_server_create(
        name="git",
        transport=McpTransport.STDIO,
        command="git-mcp",
        annotation_trust=AnnotationTrust.IGNORE,
        actor=TEST_ACTOR,
    )
    mcp_tools_record(
        server=server,
        listing=[{"name": "git_push", "annotations": {"readOnlyHint": False, "destructiveHint": False}}],
        actor=TEST_ACTOR,
        complete=True,
    )
    request = open_tool_request(runtime, "git_push", {"remote": "origin"}, server="git")

    html = logged_in(operator).get(f"/approvals/requests/{request.pk}/").content.decode()

    assert "on MCP server <code>git</code>" in html
    # The trust in words, its code on hover.
    assert 'title="IGNORE">Ignore the server&#x27;s claims</span>: its claims are shown' in html
    assert escape('"destructiveHint": false') in html
    assert "writes · destructive · not idempotent" in html  # IGNORE: the claims decide nothing


def test_the_answer_carries_the_pattern_picked(runtime: AgentRuntime, approver: User) -> None:  # U3
    request = open_tool_request(runtime, "Bash", PUSH)

    response = logged_in(approver).post(
        f"/approvals/requests/{request.pk}/answer/",
        {"answer": "ALLOW_SESSION", "skill": "Bash", "pattern": "git push:*"},
        headers=HTMX,
    )

    assert response.status_code == 200
    grant = Grant.objects.get()
    assert (grant.kind, grant.pattern, grant.scope) == ("TOOL", "git push:*", "SESSION")
    html = response.content.decode()
    assert "Allow for this session" in html
    assert "<code>Bash(git push:*)</code>" in html


def test_a_pattern_not_offered_is_refused_saying_why(runtime: AgentRuntime, operator: User) -> None:  # U3
    request = open_tool_request(runtime, "Bash", PUSH)

    response = logged_in(operator).post(
        f"/approvals/requests/{request.pk}/answer/",
        {"answer": "ALLOW_AGENT", "skill": "Bash", "pattern": ""},
        headers=HTMX,
    )

    assert response.status_code == 200
    assert "not one of the patterns offered" in response.content.decode()
    assert not Grant.objects.exists()
    assert ApprovalRequest.objects.get().status == "PENDING"


def test_allow_this_call_is_shown_as_answered(runtime: AgentRuntime, approver: User) -> None:  # U3, U4
    request = open_tool_request(runtime, "Bash", PUSH)
    client = logged_in(approver)

    client.post(
        f"/approvals/requests/{request.pk}/answer/", {"answer": "ALLOW_CALL", "skill": "Bash", "pattern": ""}
    )

    html = client.get(f"/approvals/requests/{request.pk}/").content.decode()
    assert ">Allow this call</span>" in html
    assert not Grant.objects.exists()


def test_dismissing_says_what_is_denied(runtime: AgentRuntime, approver: User) -> None:  # S9
    request = open_tool_request(runtime, "Bash", PUSH)

    html = logged_in(approver).get(f"/approvals/requests/{request.pk}/dismiss/").content.decode()

    assert "The call is denied for this session, as Bash(git push origin main) (never agent-wide)" in html


def test_session_and_agent_pages_list_tool_grants_with_their_patterns(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # U3, S10
    services.request_answer(
        request=open_tool_request(runtime, "Bash", PUSH),
        user=approver,
        answer=Answer.ALLOW_SESSION,
        pattern="git push:*",
    )
    services.request_answer(
        request=open_tool_request(runtime, "Bash", PUSH, session_id="s-2"),
        user=operator,
        answer=Answer.ALLOW_AGENT,
        pattern="git:*",
    )
    session = Grant.objects.get(scope="SESSION").session
    client = logged_in(operator)

    session_page = client.get(f"/approvals/sessions/{session.pk}/").content.decode()
    agent_page = client.get("/approvals/agents/agent-one/").content.decode()
    clear_page = client.get(f"/approvals/sessions/{session.pk}/clear/").content.decode()

    assert "<code>Bash(git push:*)</code>" in session_page
    assert "<code>Bash(git:*)</code>" in agent_page
    assert "Bash(git push:*): Allow for this session" in clear_page
    # The session's skill table lists skills only: a tool's grant is not a skill.
    assert "<td><code>Bash</code></td>" not in session_page
