"""Counts in words: one wording for exactly one, another for every other number (never
"1 approvals removed")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client, override_settings

from aimon_admin.accounts.models import User
from aimon_admin.accounts.views import lockout_message
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.services import request_answer
from aimon_admin.approvals.session_views import CLEARED_MESSAGE
from aimon_admin.core.plurals import counted
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.services import local_tools_replace, mcp_server_create, mcp_tools_record
from aimon_admin.registry.sync.messages import PROGRESS_DONE, PROGRESS_LISTED, PROGRESS_STORING
from aimon_admin.registry.views.gate import FORECAST
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request
from tests.conftest import TEST_ACTOR

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, "Session cleared: 0 approvals removed."),
        (1, "Session cleared: 1 approval removed."),
        (2, "Session cleared: 2 approvals removed."),
    ],
)
def test_counted_words_a_message_for_its_number(count: int, expected: str) -> None:
    assert counted(CLEARED_MESSAGE, count) == expected


@pytest.mark.parametrize(
    ("message", "values", "one"),
    [
        (PROGRESS_LISTED, {"page": 1}, "Listed 1 tool (page 1)…"),
        (PROGRESS_STORING, {}, "Storing 1 tool…"),
        (
            PROGRESS_DONE,
            {"added": 1, "changed": 0, "absent": 0},
            "Done: 1 tool; 1 added, 0 changed, 0 absent.",
        ),
        (
            FORECAST,
            {},
            "If the gate were wired now with these settings, 1 write tool would fail on unattended paths.",
        ),
    ],
)
def test_every_counted_message_has_a_singular(message: tuple[str, str], values: dict, one: str) -> None:
    assert counted(message, 1, **values).startswith(one)
    assert counted(message, 3, **values) != one.replace("1", "3")  # the plural differs


def test_lockout_page_words_one_minute_and_one_attempt() -> None:
    assert lockout_message(minutes=1, limit=1) == (
        "Sign-in for this username from your address is paused for 1 minute after 1 failed attempt. "
        "Wait and try again, or ask an operator, who can unlock it on their Locked sign-ins page."
    )
    assert "for 15 minutes after 5 failed attempts." in lockout_message(minutes=15, limit=5)


@pytest.mark.django_db
def test_clearing_a_session_with_one_approval_says_one_approval(
    runtime: AgentRuntime, approver: User
) -> None:
    # It once read "Session cleared: 1 approvals removed."
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    request.refresh_from_db()
    response = logged_in(approver).post(f"/approvals/sessions/{request.session_id}/clear/", follow=True)
    assert "Session cleared: 1 approval removed." in response.content.decode()


@pytest.mark.django_db
def test_the_simulator_counts_one_tool_as_one(runtime: AgentRuntime, operator: User) -> None:
    local_tools_replace(runtime=runtime, tools=[{"name": "only"}], actor=TEST_ACTOR)
    html = logged_in(operator).get("/registry/simulator/?runtime=agent-one").content.decode()
    assert 'aria-label="Outcomes of the one tool"' in html
    local_tools_replace(runtime=runtime, tools=[{"name": "only"}, {"name": "other"}], actor=TEST_ACTOR)
    html = logged_in(operator).get("/registry/simulator/?runtime=agent-one").content.decode()
    assert 'aria-label="Outcomes of all 2 tools"' in html


@pytest.mark.django_db
def test_the_trust_confirmation_words_one_changing_tool(operator: User) -> None:
    server = mcp_server_create(name="one", transport=McpTransport.STDIO, command="x", actor=TEST_ACTOR)
    mcp_tools_record(
        server=server,
        listing=[{"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}],
        actor=TEST_ACTOR,
        complete=True,
    )
    html = logged_in(operator).get("/registry/servers/one/trust/").content.decode()
    assert "This tool changes axes when you confirm" in html
    assert "These 1 tool" not in html


@pytest.mark.django_db
@override_settings(AXES_FAILURE_LIMIT=1)
def test_unlock_login_says_one_failure_record(make_user) -> None:  # type: ignore[no-untyped-def]
    from io import StringIO

    from django.core.management import call_command

    person = make_user("pat")
    Client().post(
        "/accounts/login/",
        {"username": "pat", "password": "wrong"},
        REMOTE_ADDR="10.0.0.9",
    )
    out = StringIO()
    call_command("unlock_login", "pat", stdout=out)
    assert f"unlocked {person.username} (1 failure record cleared)" in out.getvalue()


# Hand-made plurals in what people read: "record(s)", "tool{s}", "error{s}".
_HAND_MADE = re.compile(r"""["'][^"']*(?:[a-z]\(s\)|\{s\})[^"']*["']""")


def test_no_message_or_template_makes_its_plural_by_hand() -> None:
    found = []
    for folder, pattern in (("aimon_admin", "*.py"), ("templates", "*.html")):
        for path in sorted((ROOT / folder).rglob(pattern)):
            if "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _HAND_MADE.search(line) and "http(s)" not in line:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
