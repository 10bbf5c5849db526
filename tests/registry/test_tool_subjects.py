"""A tool's subject argument (U1): the selector every tool decision reads, and the service
the tool page and load_config write through."""

from __future__ import annotations

import html

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.models import Tool, ToolSubject
from aimon_admin.registry.selectors import subject_argument_for
from aimon_admin.registry.services import local_tools_replace, subjects, tool_subject_set
from aimon_admin.registry.views.tools import REPLAY_REASKS, REPLAY_REUSES
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads

pytestmark = pytest.mark.django_db


def test_no_subject_named_reads_as_empty() -> None:
    # U1: none by default.
    assert subject_argument_for("", "Bash").argument == ""
    assert subject_argument_for(None, "Bash").argument == ""


def test_subject_is_read_per_tool_and_server() -> None:
    ToolSubject.objects.create(server="", tool="Bash", argument="command")
    ToolSubject.objects.create(server="git", tool="git_push", argument="remote")
    assert subject_argument_for("", "Bash").argument == "command"
    assert subject_argument_for(None, "Bash").argument == "command"  # a local tool: no server
    assert subject_argument_for(server="git", tool="git_push").argument == "remote"
    # A local tool and an MCP tool of the same name are two tools.
    assert subject_argument_for("git", "Bash").argument == ""
    assert subject_argument_for("", "git_push").argument == ""


# --- The service (U1, U7) -----------------------------------------------------------------------


def test_setting_a_subject_writes_it_and_its_event() -> None:
    row = tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    assert (row.server, row.tool, row.argument) == ("", "Bash", "command")
    event = AuditEvent.objects.get(action=AuditAction.TOOL_SUBJECT_SET)
    assert event.subject == "Bash"
    assert event.details == {
        "server": "",
        "tool": "Bash",
        "before": None,
        "after": "command",
        "kind_before": None,
        "kind_after": "COMMAND",  # U1: a shell tool's usual argument reads as a command
    }
    assert subject_argument_for("", "Bash").argument == "command"


def test_changing_and_clearing_a_subject_are_audited_with_before_and_after() -> None:
    tool_subject_set(server="git", tool="git_push", argument="remote", actor=TEST_ACTOR)
    tool_subject_set(server="git", tool="git_push", argument="branch", actor=TEST_ACTOR)
    assert subject_argument_for("git", "git_push").argument == "branch"
    assert tool_subject_set(server="git", tool="git_push", argument="", actor=TEST_ACTOR) is None
    assert subject_argument_for("git", "git_push").argument == ""
    details = [
        e.details for e in AuditEvent.objects.filter(action=AuditAction.TOOL_SUBJECT_SET).order_by("id")
    ]
    assert [(d["before"], d["after"]) for d in details] == [
        (None, "remote"),
        ("remote", "branch"),
        ("branch", None),
    ]
    assert details[0]["server"] == "git"


def test_a_subject_set_as_it_is_writes_nothing() -> None:
    tool_subject_set(server="", tool="Bash", argument="command", actor=TEST_ACTOR)
    count = AuditEvent.objects.count()
    tool_subject_set(server="", tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server="", tool="Read", argument="", actor=TEST_ACTOR)  # none to clear
    assert AuditEvent.objects.count() == count
    assert not ToolSubject.objects.filter(tool="Read").exists()


@pytest.mark.parametrize(
    ("server", "tool", "argument", "field", "problem"),
    [
        ("", "", "command", "tool", subjects.SUBJECT_TOOL_EMPTY),
        ("", "Bash", "com\x1bmand", "argument", subjects.SUBJECT_CONTROL.format(position=4)),
        ("", "Ba\nsh", "command", "tool", subjects.SUBJECT_CONTROL.format(position=3)),
        ("bad server", "x", "command", "server", subjects.SUBJECT_SERVER_BAD.format(server="bad server")),
        ("", "Bash", "a" * 201, "argument", subjects.SUBJECT_ARGUMENT_TOO_LONG.format(limit=200, length=201)),
    ],
)
def test_bad_names_are_refused_with_the_field_named(
    server: str, tool: str, argument: str, field: str, problem: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        tool_subject_set(server=server, tool=tool, argument=argument, actor=TEST_ACTOR)
    assert caught.value.message_dict[field] == [problem]
    assert not ToolSubject.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditAction.TOOL_SUBJECT_SET).exists()


# --- The tool's page (U1, U6) -------------------------------------------------------------------


def _bash(runtime: AgentRuntime, **axes: str) -> Tool:
    local_tools_replace(
        runtime=runtime,
        tools=[
            {
                "name": "Bash",
                "description": "Run a shell command",
                "input_schema": {
                    "type": "object",
                    "properties": {"timeout": {"type": "integer"}, "command": {"type": "string"}},
                },
                **axes,
            }
        ],
        actor=TEST_ACTOR,
    )
    return Tool.objects.get(runtime=runtime, name="Bash")


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_tool_page_names_the_subject_and_offers_the_schemas_arguments(
    runtime: AgentRuntime, operator: User
) -> None:
    tool = _bash(runtime)
    page = _client(operator).get(f"/registry/tools/{tool.pk}/").content.decode()
    assert "No subject argument is named" in page
    # The input schema's arguments are suggested, text ones first.
    assert '<option value="command"></option><option value="timeout"></option>' in page
    assert "Save subject argument" in page
    tool_subject_set(server="", tool="Bash", argument="command", actor=TEST_ACTOR)
    page = _client(operator).get(f"/registry/tools/{tool.pk}/").content.decode()
    assert "match the argument <code>command</code>, read as: Shell command" in page
    assert "such a command asks" in page
    assert 'value="command"' in page


def test_an_operator_sets_and_clears_the_subject_on_the_tool_page(
    runtime: AgentRuntime, operator: User
) -> None:
    tool = _bash(runtime)
    client = _client(operator)
    response = client.post(f"/registry/tools/{tool.pk}/subject/", {"argument": "command"})
    assert response.status_code == 302
    assert response["Location"] == f"/registry/tools/{tool.pk}/#tool-subject"
    assert subject_argument_for("", "Bash").argument == "command"
    assert subject_argument_for("", "Bash").kind == "COMMAND"
    event = AuditEvent.objects.get(action=AuditAction.TOOL_SUBJECT_SET)
    assert event.actor == operator
    client.post(f"/registry/tools/{tool.pk}/subject/", {"argument": "command", "kind": "PATH"})
    assert subject_argument_for("", "Bash").kind == "PATH"  # U1: the operator says how it is read
    client.post(f"/registry/tools/{tool.pk}/subject/", {"argument": ""})
    assert subject_argument_for("", "Bash").argument == ""


def test_a_bad_subject_argument_is_shown_again_with_its_problem(
    runtime: AgentRuntime, operator: User
) -> None:
    tool = _bash(runtime)
    assert_invalid_post_redirects_and_reloads(
        _client(operator),
        f"/registry/tools/{tool.pk}/subject/",
        {"argument": "com\x1bmand"},
        page=f"/registry/tools/{tool.pk}/",
        shows=[subjects.SUBJECT_CONTROL.format(position=4)],
    )
    assert not ToolSubject.objects.exists()


def test_only_operators_set_a_subject(runtime: AgentRuntime, auditor: User, approver: User) -> None:
    tool = _bash(runtime)
    assert "Save subject argument" not in _client(auditor).get(f"/registry/tools/{tool.pk}/").content.decode()
    for person in (auditor, approver):
        assert (
            _client(person).post(f"/registry/tools/{tool.pk}/subject/", {"argument": "x"}).status_code == 403
        )
    assert not ToolSubject.objects.exists()


@pytest.mark.parametrize(
    ("idempotency", "words"), [("NON_IDEMPOTENT", REPLAY_REASKS), ("IDEMPOTENT", REPLAY_REUSES)]
)
def test_the_tool_pages_say_whether_a_replay_asks_again(
    runtime: AgentRuntime, operator: User, idempotency: str, words: str
) -> None:
    # U6: a replay of a tool that is not idempotent never reuses an Allow this call.
    tool = _bash(runtime, side_effect_level="MUTATING", idempotency_behavior=idempotency)
    client = _client(operator)
    assert words in html.unescape(client.get(f"/registry/tools/{tool.pk}/").content.decode())
    listed = client.get("/registry/tools/").content.decode()
    assert ("replay asks again</span>" in listed) is (idempotency == "NON_IDEMPOTENT")
