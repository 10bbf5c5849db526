"""U1: a call's subject read as its kind. A command is split into words as a shell splits it and
matches a prefix allow only when it runs nothing but the named program; a path is normalised
before any match; a deny pattern denies a call whose subject is missing, not a string or
cannot be read as its kind (fail closed).

The policy tables need no database; the last tests take the same calls through the API.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules, services
from aimon_admin.approvals.choices import Answer, GrantDecision, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, ToolRule
from aimon_admin.approvals.subject_patterns import pattern_choices, subject_matches
from aimon_admin.approvals.subjects import Subject, normalise_path, read_command, subject_of
from aimon_admin.approvals.tool_policy import HeldToolGrant, layer_decision
from aimon_admin.approvals.tool_rule_grammar import ToolRuleIndex, ToolRuleSpec
from aimon_admin.registry.choices import DestructiveBehavior, SideEffectLevel, SubjectKind
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.policy import ToolAxes, subject_kind_for
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR

COMMAND = SubjectKind.COMMAND
PATH = SubjectKind.PATH
DESTROYS = ToolAxes(SideEffectLevel.MUTATING, DestructiveBehavior.DESTRUCTIVE)
WRITES = ToolAxes(SideEffectLevel.MUTATING, DestructiveBehavior.NON_DESTRUCTIVE)

# --- A prefix allow never runs another program (U1) ---------------------------------------------

# Each of these runs something besides `git push` (or hides what it runs), or is not `git push`
# at all: an allow of `git push:*` (and of `git:*`) must not cover it. It asks instead.
BYPASSES = [
    "git push origin main && rm -rf /",
    "git push origin main; rm -rf /",
    "git push origin main || rm -rf /",
    "git push origin main | sh",
    "git push origin main & rm -rf /",
    "git push origin main\nrm -rf /",
    "git push origin main\r\nrm -rf /",
    "git push $(rm -rf /)",
    "git push `rm -rf /`",
    'git push "$(rm -rf /)"',
    'git push "`rm -rf /`"',
    "git push <(rm -rf /)",
    "git push origin main > /etc/passwd",
    "git push origin main 2>/dev/null </etc/shadow",
    "git${IFS}push origin main",
    "git push${IFS}--receive-pack=touch${IFS}/tmp/p",
    "git push $X",
    "git push ${X}",
    "git push $'--receive-pack=touch /tmp/p'",
    "git push *",
    "git push {--receive-pack=x,origin}",
    "git push --receive-pack='touch /tmp/p' origin",
    "git push --receive-pack=touch origin",
    "git push --exec=touch origin",
    "git push -u origin main",
    "git -c alias.x='!touch /tmp/p' x",
    "git -c core.sshCommand='touch /tmp/p' push origin",
    "git --config-env=core.sshCommand=X push origin",
    "git --exec-path=/tmp push origin",
    "git push --upload-pack=touch origin",
    "GIT_SSH_COMMAND='touch /tmp/p' git push origin",
    "env git push origin",
    "env GIT_SSH_COMMAND=x git push origin",
    "xargs git push < list",
    "sh -c 'git push origin'",
    "bash -c 'git push; rm -rf /'",
    "sudo git push origin",
    "eval git push origin",
    "exec git push origin",
    "command git push origin",
    "nohup git push origin",
    "timeout 5 git push origin",
    "(git push origin)",
    "{ git push origin; }",
    "g\u0456t push origin",  # a Cyrillic letter i: another program
    "\uff47\uff49\uff54 push origin",  # fullwidth letters
    "git\u00a0push origin",  # a no-break space is not a shell's word break
    "/usr/bin/git push origin",
    "./git push origin",
    "git push 'origin",  # unbalanced quote
    "git push origin\\",  # a trailing backslash
    "git submodule foreach 'rm -rf /'",
    "git push origin main #\nrm -rf /",
]


def test_the_bypass_table_is_large_enough() -> None:
    assert len(BYPASSES) >= 40
    assert len(set(BYPASSES)) == len(BYPASSES)


@pytest.mark.parametrize("command", BYPASSES)
@pytest.mark.parametrize("pattern", ["git push:*", "git:*", "git push *:*", "git *"])
def test_a_prefix_allow_never_covers_a_command_that_runs_something_else(
    pattern: str, command: str
) -> None:  # U1
    assert not subject_matches(pattern, command, for_allow=True, kind=COMMAND)


@pytest.mark.parametrize("command", BYPASSES)
def test_an_approver_is_offered_no_prefix_that_the_call_itself_would_not_match(
    command: str,
) -> None:  # U1, U3
    for pattern in pattern_choices(command, WRITES, kind=COMMAND):
        assert subject_matches(pattern, command, for_allow=True, kind=COMMAND), pattern


@pytest.mark.parametrize(
    "command",
    [
        "git push",
        "git push origin main",
        "git  push   origin main",
        "'git' push origin",
        '"git" "push" origin',
        "g\\it push origin",
        "git push --force-with-lease origin main",
        "git push origin 'feature branch'",
        "git push origin main # ship it",
    ],
)
def test_a_prefix_allow_covers_the_program_with_any_arguments_as_a_shell_reads_them(
    command: str,
) -> None:  # U1
    assert subject_matches("git push:*", command, for_allow=True, kind=COMMAND)
    assert subject_matches("git:*", command, for_allow=True, kind=COMMAND)


def test_a_prefix_ends_at_a_words_end() -> None:  # U1
    assert not subject_matches("git push:*", "git pushx origin", for_allow=True, kind=COMMAND)
    assert subject_matches("git:*", "git pushx origin", for_allow=True, kind=COMMAND)  # git, any arguments


def test_an_exact_allow_matches_that_text_only() -> None:  # U1, U3
    # The approver saw this exact text: it is allowed as it stands, chained or not.
    text = "git push origin main && git push origin v1"
    assert subject_matches(text, text, for_allow=True, kind=COMMAND)
    assert not subject_matches(text, text + " && rm -rf /", for_allow=True, kind=COMMAND)


def test_a_destructive_tool_is_offered_no_one_word_prefix_and_never_a_wrapper() -> None:  # U1, U3
    assert pattern_choices("git push origin main", DESTROYS, kind=COMMAND) == [
        "git push origin main",
        "git push origin:*",
        "git push:*",
    ]
    assert pattern_choices("git push origin main", WRITES, kind=COMMAND) == [
        "git push origin main",
        "git push origin:*",
        "git push:*",
        "git:*",
        "",
    ]
    assert pattern_choices("env git push origin", WRITES, kind=COMMAND) == ["env git push origin", ""]
    assert pattern_choices("git -c x=y push", WRITES, kind=COMMAND) == ["git -c x=y push", ""]
    assert pattern_choices("git push origin main; rm -rf /", DESTROYS, kind=COMMAND) == [
        "git push origin main; rm -rf /"
    ]


# --- A deny covers what it says, wherever it stands in a command (U1) ---------------------------


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf /",
        "ls; rm -rf /",
        "ls && rm -rf /",
        "ls | rm -rf /",
        "ls\nrm -rf /",
        "/bin/rm -rf /",
        "X=1 rm -rf /",
        "'rm' -rf /",
        "r\\m -rf /",
        "rmdir /tmp/x",  # a deny's prefix covers longer words
    ],
)
def test_a_deny_pattern_matches_every_simple_command_in_the_text(command: str) -> None:  # U1
    assert subject_matches("rm:*", command, for_allow=False, kind=COMMAND)


@pytest.mark.parametrize(
    "command",
    [
        "sudo rm -rf /",
        "env rm -rf /",
        "xargs rm < list",
        "sh -c 'rm -rf /'",
        "$(printf rm) -rf /",
        "`echo rm` -rf /",
        "$CMD -rf /",
        "echo 'unbalanced",
        "ls; eval rm -rf /",
    ],
)
def test_a_command_whose_programs_cannot_be_told_is_denied_where_the_tool_has_a_deny(
    command: str,
) -> None:  # U1
    subject = Subject(command, kind=COMMAND)
    assert not subject.readable
    index = ToolRuleIndex([ToolRuleSpec(1, None, "", "Bash", "rm:*", RuleAction.DENY)])
    found = index.match(runtime_id=7, server="", tool="Bash", subject=subject, axes=WRITES, unattended=False)
    assert found.deny is not None
    # No deny pattern on the tool: nothing to fail closed for; a plain allow still cannot cover it.
    assert not subject_matches("ls:*", command, for_allow=True, kind=COMMAND)


def test_a_plain_command_with_a_variable_argument_can_still_be_read() -> None:  # U1
    assert Subject("echo $HOME", kind=COMMAND).readable
    assert read_command("echo $HOME").expanded
    assert not read_command("echo $HOME").plain  # but no prefix allow covers it


# --- Paths are normalised first (U1) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/etc/passwd", "/etc/passwd"),
        ("/tmp/../etc/passwd", "/etc/passwd"),
        ("//etc/passwd", "/etc/passwd"),
        ("/etc//passwd", "/etc/passwd"),
        ("/etc/./passwd", "/etc/passwd"),
        ("/tmp/a/../../etc/passwd", "/etc/passwd"),
        ("/../etc/passwd", "/etc/passwd"),
        ("src/../../etc", "../etc"),
        ("", None),
        ("/etc/pass\x00wd", None),
    ],
)
def test_a_path_is_normalised_before_any_match(path: str, normal: str | None) -> None:  # U1
    assert normalise_path(path) == normal


@pytest.mark.parametrize("path", ["/etc/passwd", "/tmp/../etc/passwd", "//etc/passwd", "/etc/./passwd"])
def test_a_path_deny_covers_every_way_of_writing_the_path(path: str) -> None:  # U1
    assert subject_matches("/etc/*", path, for_allow=False, kind=PATH)
    assert not subject_matches("/tmp/*", path, for_allow=True, kind=PATH)


def test_a_path_allow_covers_its_own_tree_only() -> None:  # U1
    assert subject_matches("/tmp/*", "/tmp/a/./b", for_allow=True, kind=PATH)
    assert not subject_matches("/tmp/*", "/tmp/../etc/passwd", for_allow=True, kind=PATH)
    assert not subject_matches("src/*", "src/../../etc/passwd", for_allow=True, kind=PATH)


# --- A deny pattern fails closed (U1) ------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [{"path": ["/etc/passwd"]}, {"path": None}, {"path": 7}, {"file_path": "/etc/passwd"}, {}, {"path": ""}],
)
def test_a_subject_missing_not_a_string_or_naming_nothing_is_denied_by_a_deny_pattern(
    arguments: dict[str, Any],
) -> None:  # U1
    subject = subject_of(arguments, "path", PATH)
    assert not subject.readable
    assert "deny pattern" in subject.note
    index = ToolRuleIndex([ToolRuleSpec(1, None, "", "Write", "/etc/*", RuleAction.DENY)])
    found = index.match(runtime_id=7, server="", tool="Write", subject=subject, axes=WRITES, unattended=False)
    assert found.deny is not None
    # And a layer's deny with a pattern beats that layer's whole-tool allow.
    held = [HeldToolGrant(1, GrantDecision.ALLOW, ""), HeldToolGrant(2, GrantDecision.DENY, "/etc/*")]
    assert layer_decision(held, subject, WRITES).id == 2  # type: ignore[union-attr]


def test_a_tool_without_deny_patterns_still_answers_a_subject_it_cannot_read() -> None:  # U1
    index = ToolRuleIndex([ToolRuleSpec(1, None, "", "Write", "", RuleAction.ALLOW)])
    found = index.match(
        runtime_id=7,
        server="",
        tool="Write",
        subject=subject_of({}, "path", PATH),
        axes=WRITES,
        unattended=False,
    )
    assert (found.deny, found.allow.id if found.allow else None) == (None, 1)


# --- The kind a subject is read as --------------------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "kind"),
    [
        ("command", COMMAND),
        ("cmd", COMMAND),
        ("path", PATH),
        ("file_path", PATH),
        ("remote", SubjectKind.TEXT),
    ],
)
def test_a_subject_is_read_as_its_arguments_usual_kind_unless_the_operator_says(
    argument: str, kind: SubjectKind
) -> None:  # U1
    assert subject_kind_for(argument) == kind


@pytest.mark.django_db
def test_the_kind_is_set_with_the_argument_and_audited() -> None:  # U1, U7
    from aimon_admin.audit.choices import AuditAction
    from aimon_admin.audit.models import AuditEvent

    row = tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    assert row is not None
    assert row.kind == COMMAND
    row = tool_subject_set(server=None, tool="Bash", argument="command", kind="TEXT", actor=TEST_ACTOR)
    assert row is not None
    assert row.kind == SubjectKind.TEXT
    kept = tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    assert kept is not None
    assert kept.kind == SubjectKind.TEXT  # None keeps the kind set
    events = AuditEvent.objects.filter(action=AuditAction.TOOL_SUBJECT_SET).order_by("seq")
    assert [(e.details["kind_before"], e.details["kind_after"]) for e in events] == [
        (None, "COMMAND"),
        ("COMMAND", "TEXT"),
    ]
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        tool_subject_set(server=None, tool="Bash", argument="command", kind="SHELL", actor=TEST_ACTOR)
    assert "kind" in raised.value.message_dict


# --- The same through the API, on SQLite and PostgreSQL ------------------------------------------

DECISIONS = "/api/v1/tool-decisions"
REQUESTS = "/api/v1/tool-approval-requests"


@pytest.fixture
def tools(runtime: AgentRuntime) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "Bash", "side_effect_level": "MUTATING", "destructive_behavior": "DESTRUCTIVE"},
            {"name": "Write", "side_effect_level": "MUTATING", "destructive_behavior": "NON_DESTRUCTIVE"},
        ],
        actor=TEST_ACTOR,
    )
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server=None, tool="Write", argument="path", actor=TEST_ACTOR)
    rules.rule_index_reset()


def _allow_for_session(
    api: APIClient, user: User, tool: str, arguments: dict[str, Any], pattern: str
) -> None:
    opened = api.post(
        REQUESTS,
        {"tool": tool, "session_id": "sA1", "principal": "alice", "arguments": arguments},
        format="json",
    )
    assert opened.status_code == 201, opened.content
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened.json()["id"]),
        user=user,
        answer=Answer.ALLOW_SESSION,
        pattern=pattern,
    )


def _decide(api: APIClient, tool: str, arguments: Any) -> tuple[str, str]:
    response = api.post(DECISIONS, {"tool": tool, "session_id": "sA1", "arguments": arguments}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["decision"], response.json()["source"]


@pytest.mark.django_db
@pytest.mark.usefixtures("tools")
def test_a_session_allow_of_git_push_never_runs_another_program(api: APIClient, approver: User) -> None:  # U1
    _allow_for_session(api, approver, "Bash", {"command": "git push origin main"}, "git push:*")
    assert _decide(api, "Bash", {"command": "git push origin feature"}) == ("ALLOW", "SESSION")
    for command in [
        "git push --receive-pack='touch /tmp/p' origin",
        "git -c alias.x='!touch /tmp/p' x",
        "git pushx origin",
        "git push origin && rm -rf /",
        "env git push origin",
    ]:
        assert _decide(api, "Bash", {"command": command})[0] == "ASK", command
    assert ToolSubject.objects.get(tool="Bash").kind == COMMAND


@pytest.mark.django_db
@pytest.mark.usefixtures("tools")
def test_an_operator_deny_on_paths_is_not_walked_around(api: APIClient, approver: User) -> None:  # U1
    ToolRule.objects.create(tool="Write", pattern="/etc/*", action=RuleAction.DENY)
    rules.rule_index_reset()
    _allow_for_session(api, approver, "Write", {"path": "/tmp/notes"}, "")
    assert _decide(api, "Write", {"path": "/tmp/notes"}) == ("ALLOW", "SESSION")
    for arguments in [
        {"path": "/etc/passwd"},
        {"path": ["/etc/passwd"]},
        {"path": "/tmp/../etc/passwd"},
        {"path": "//etc/passwd"},
        {"file_path": "/etc/passwd"},
    ]:
        assert _decide(api, "Write", arguments) == ("DENY", "RULE"), arguments
