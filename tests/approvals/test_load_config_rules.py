"""`load_config`'s toolSubjects, toolRules and skillRules (operator set-up from the command
line, README.md; U1, U5, U7): read with every error at FILE:LINE, applied all or nothing, an
identical rule never added twice."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from aimon_admin.approvals import rules, tool_rules
from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.config import ALLOW_EVERYTHING_REFUSED, RULE_CONFLICT
from aimon_admin.approvals.models import SkillRule, ToolRule
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.models import McpServer, ToolSubject
from aimon_admin.registry.selectors import subject_argument_for
from aimon_admin.registry.services import tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

GOOD = """\
mcpServers:
  git:
    command: uvx
toolSubjects:
  Bash: command
  git/git_push: remote
toolRules:
  - {pattern: "Bash(rm:*)", action: DENY}
  - {pattern: "Bash(git status:*)", action: ALLOW, runtime: nightly, unattended: true}
  - pattern: "git/git_push(origin:*)"
    action: ASK
skillRules:
  - {pattern: "deploy-*", action: ASK, runtime: nightly, widestScope: SESSION}
  - {pattern: "read-*", action: ALLOW}
"""


@pytest.fixture
def nightly(db: None) -> AgentRuntime:
    return runtime_create(name="nightly", actor=TEST_ACTOR)


def write(tmp_path: Path, text: str, name: str = "aimon.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(path: Path) -> str:
    out = io.StringIO()
    call_command("load_config", str(path), stdout=out)
    return out.getvalue()


def state() -> tuple[list[tuple[object, ...]], ...]:
    return (
        list(McpServer.objects.values_list("name", "command")),
        list(ToolSubject.objects.values_list("server", "tool", "argument")),
        list(
            ToolRule.objects.values_list("runtime__name", "server", "tool", "pattern", "action", "unattended")
        ),
        list(SkillRule.objects.values_list("runtime__name", "pattern", "action", "widest_scope")),
        [(AuditEvent.objects.count(),)],
    )


def test_a_good_file_sets_subjects_and_adds_rules(tmp_path: Path, nightly: AgentRuntime) -> None:
    path = write(tmp_path, GOOD)
    out = load(path)
    assert out.splitlines() == [
        "created: git",
        "tool subjects set: Bash, git/git_push",
        "tool rules added: Bash(rm:*), Bash(git status:*), git/git_push(origin:*)",
        "skill rules added: deploy-*, read-*",
        f"loaded {path}: 1 MCP server",
    ]
    # U1: the subjects, by tool.
    assert subject_argument_for("", "Bash").argument == "command"
    assert subject_argument_for("git", "git_push").argument == "remote"
    # U1, U5: the rules, a pre-approval among them.
    assert set(
        ToolRule.objects.values_list("runtime__name", "server", "tool", "pattern", "action", "unattended")
    ) == {
        (None, "", "Bash", "rm:*", "DENY", False),
        (None, "git", "git_push", "origin:*", "ASK", False),
        ("nightly", "", "Bash", "git status:*", "ALLOW", True),
    }
    assert set(SkillRule.objects.values_list("runtime__name", "pattern", "action", "widest_scope")) == {
        (None, "read-*", "ALLOW", "AGENT"),
        ("nightly", "deploy-*", "ASK", "SESSION"),
    }
    # U7: each write is audited on its own, and the load once with all of it.
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_RULE_CREATED).count() == 3
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_SUBJECT_SET).count() == 2
    assert AuditEvent.objects.filter(action=AuditAction.RULE_CREATED).count() == 2
    loaded = AuditEvent.objects.get(action=AuditAction.CONFIG_LOADED)
    assert loaded.details["tool_subjects_set"] == ["Bash", "git/git_push"]
    assert loaded.details["tool_rules_created"] == [
        "Bash(rm:*)",
        "Bash(git status:*)",
        "git/git_push(origin:*)",
    ]
    assert loaded.details["skill_rules_created"] == ["deploy-*", "read-*"]
    # The rules are in force at once.
    index = tool_rules.tool_rule_index()
    assert len(index) == 3


def test_loading_the_same_file_again_adds_nothing_twice(tmp_path: Path, nightly: AgentRuntime) -> None:
    path = write(tmp_path, GOOD)
    load(path)
    before = (ToolRule.objects.count(), SkillRule.objects.count(), ToolSubject.objects.count())
    events = AuditEvent.objects.exclude(action=AuditAction.CONFIG_LOADED).count()
    out = load(path)
    assert (ToolRule.objects.count(), SkillRule.objects.count(), ToolSubject.objects.count()) == before
    assert AuditEvent.objects.exclude(action=AuditAction.CONFIG_LOADED).count() == events  # nothing rewritten
    assert "tool rules already there: Bash(rm:*), Bash(git status:*), git/git_push(origin:*)" in out
    assert "skill rules already there: deploy-*, read-*" in out
    assert "tool subjects unchanged: Bash, git/git_push" in out


def test_a_rule_that_exists_with_another_action_is_refused_and_nothing_applied(
    tmp_path: Path, nightly: AgentRuntime
) -> None:
    # Never a silent change: a DENY is not turned into an ALLOW by a file.
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    before = state()
    path = write(
        tmp_path,
        """\
        toolSubjects: {Bash: command}
        toolRules:
          - {pattern: "Bash(ls:*)", action: ALLOW}
          - {pattern: "Bash(rm:*)", action: ALLOW}
        """,
    )
    with pytest.raises(CommandError) as raised:
        load(path)
    message = RULE_CONFLICT.format(
        pattern="Bash(rm:*)", where="every runtime", existing="DENY", given="ALLOW"
    )
    assert str(raised.value).splitlines() == [
        f"{path}:4: toolRules[1]: {message}",
        f"{path}: nothing was applied (1 error)",
    ]
    assert state() == before  # the subject and the first rule too: all or nothing


def test_a_skill_rule_with_another_scope_is_refused(tmp_path: Path) -> None:
    from aimon_admin.approvals import rules

    rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, actor=TEST_ACTOR)
    path = write(tmp_path, "skillRules:\n  - {pattern: deploy-*, action: ASK, widestScope: TURN}\n")
    with pytest.raises(CommandError) as raised:
        load(path)
    assert "already exists with ASK, widest answer AGENT; the file says ASK, widest answer TURN" in str(
        raised.value
    )
    assert SkillRule.objects.get().widest_scope == GrantScope.AGENT


def test_approvers_are_loaded_with_the_rule_and_audited(tmp_path: Path) -> None:  # P3
    path = write(
        tmp_path,
        "toolSubjects: {Bash: command}\n"
        "toolRules:\n  - {pattern: Bash(git push:*), action: ASK, approvers: 2}\n"
        "skillRules:\n  - {pattern: deploy-*, action: ASK, approvers: 3}\n  - {pattern: lint, action: ASK}\n",
    )
    load(path)
    assert ToolRule.objects.get().approvers == 2
    assert dict(SkillRule.objects.values_list("pattern", "approvers")) == {"deploy-*": 3, "lint": 1}
    audited = AuditEvent.objects.filter(action=AuditAction.RULE_CREATED, subject="deploy-*").get()
    assert audited.details["approvers"] == 3
    assert AuditEvent.objects.get(action=AuditAction.TOOL_RULE_CREATED).details["approvers"] == 2
    load(path)  # the same file again: nothing added twice
    assert SkillRule.objects.count() == 2


def test_a_rule_with_other_approvers_is_refused_naming_both(tmp_path: Path) -> None:  # P3
    from aimon_admin.approvals import rules

    rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, actor=TEST_ACTOR)
    path = write(tmp_path, "skillRules:\n  - {pattern: deploy-*, action: ASK, approvers: 2}\n")
    with pytest.raises(CommandError) as raised:
        load(path)
    assert (
        "already exists with ASK, widest answer AGENT; the file says ASK, widest answer AGENT, "
        "2 people must allow"
    ) in str(raised.value)
    assert SkillRule.objects.get().approvers == 1


def test_a_refusal_of_the_service_names_the_line(tmp_path: Path) -> None:
    # U3, U5: an allow of the whole of a tool nobody registered.
    path = write(
        tmp_path, "toolRules:\n  - {pattern: Bash, action: DENY}\n  - {pattern: Read, action: ALLOW}\n"
    )
    with pytest.raises(CommandError) as raised:
        load(path)
    assert str(raised.value).splitlines()[0] == (
        f"{path}:3: toolRules[1]: {tool_rules.WHOLE_TOOL_UNREGISTERED.format(tool='Read')}"
    )
    assert not ToolRule.objects.exists()


def test_an_unknown_runtime_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "toolRules:\n  - {pattern: Bash(rm:*), action: DENY, runtime: nobody}\n")
    with pytest.raises(CommandError) as raised:
        load(path)
    assert f"{path}:2: toolRules[0].runtime: no runtime is named 'nobody'" in str(raised.value)


BAD_FILES = [
    # P3: approvers is a whole number from 1 to 3 under a rule, and nowhere else.
    (
        "toolRules:\n  - {pattern: Bash(git push:*), action: ASK, approvers: 4}\n",
        "2: toolRules[0].approvers must be a whole number from 1 to 3, not 4",
    ),
    (
        "toolRules:\n  - {pattern: Bash(git push:*), action: ASK, approvers: 0}\n",
        "2: toolRules[0].approvers must be a whole number from 1 to 3, not 0",
    ),
    (
        "skillRules:\n  - {pattern: deploy-*, action: ASK,\n     approvers: two}\n",
        "3: skillRules[0].approvers must be a whole number from 1 to 3, not 'two'",
    ),
    (
        "skillRules:\n  - {pattern: deploy-*, action: ASK, approvers: true}\n",
        "2: skillRules[0].approvers must be a whole number from 1 to 3",
    ),
    (
        "skillRules:\n  - {pattern: deploy-*, action: ASK, approvers: 2.5}\n",
        "2: skillRules[0].approvers must be a whole number from 1 to 3",
    ),
    (
        "skillRules:\n  - {pattern: deploy-*, action: ASK, aprovers: 2}\n",
        "2: unknown key 'aprovers' in skillRules[0] (allowed: action, approvers, pattern, runtime, "
        "widestScope)",
    ),
    ("approvers: {}\n", "1: unknown key 'approvers' in the file"),
    # Bad input: an empty tool name, control characters.
    ("toolRules:\n  - {pattern: '(git:*)', action: DENY}\n", "2: toolRules[0].pattern: Name the tool"),
    (
        'toolRules:\n  - {pattern: "Bash(git\\e)", action: DENY}\n',
        "2: toolRules[0].pattern: No control characters in a subject pattern (one at position 4).",
    ),
    (
        "toolRules:\n  - {pattern: 'Bash(x', action: DENY}\n",
        "2: toolRules[0].pattern: A subject pattern is written",
    ),
    (
        "toolRules:\n  - {pattern: 'Bash(x)', action: MAYBE}\n",
        "2: toolRules[0].action must be ALLOW, DENY, ASK",
    ),
    ("toolRules:\n  - {pattern: 'Bash(x)'}\n", "2: toolRules[0] needs action"),
    ("toolRules:\n  - {action: DENY}\n", "2: toolRules[0] needs pattern"),
    ("toolRules: {pattern: x}\n", "1: toolRules must be a list of rules, not a mapping"),
    ("toolRules:\n  - Bash(x)\n", "2: toolRules[0] must be a mapping (pattern, action, …), not a string"),
    # U5: a pre-approval is one runtime's ALLOW.
    (
        "toolRules:\n  - {pattern: 'Bash(x)', action: ALLOW, unattended: true}\n",
        "2: toolRules[0]: unattended: true (a pre-approval) needs the runtime",
    ),
    (
        "toolRules:\n  - {pattern: 'Bash(x)', action: DENY, runtime: nightly, unattended: true}\n",
        "2: toolRules[0]: unattended: true (a pre-approval) needs action: ALLOW",
    ),
    (
        "toolRules:\n  - {pattern: 'Bash(x)', action: ALLOW, runtime: nightly, unattended: yes please}\n",
        "2: toolRules[0].unattended must be true or false, not a string",
    ),
    (
        "toolRules:\n  - {pattern: 'Bash(x)', action: DENY}\n  - {pattern: ' Bash(x)', action: ASK}\n",
        "3: toolRules[1] repeats the rule for Bash(x) (first at line 2)",
    ),
    (
        "toolRules:\n  - {pattern: 'Bash(x)', action: DENY, runtime: 'bad name'}\n",
        "no runtime is named 'bad name'",
    ),
    # skillRules
    ("skillRules:\n  - {pattern: 'de ploy', action: ASK}\n", "2: skillRules[0].pattern:"),
    ("skillRules:\n  - {pattern: '*', action: ALLOW}\n", f"2: skillRules[0]: {ALLOW_EVERYTHING_REFUSED}"),
    (
        "skillRules:\n  - {pattern: deploy-*, action: ASK, widestScope: FOREVER}\n",
        "2: skillRules[0].widestScope must be TURN, SESSION, AGENT, not 'FOREVER'",
    ),
    # toolSubjects
    ("toolSubjects: {Bash: 7}\n", "1: toolSubjects.Bash must be a string, not a number"),
    ("toolSubjects: {Bash: ''}\n", "1: toolSubjects.Bash must name an argument"),
    (
        "toolSubjects:\n  'bad server/x': command\n",
        "2: toolSubjects.bad server/x: 'bad server' is not an MCP server name",
    ),
    ("toolSubjects: [Bash]\n", "1: toolSubjects must be a mapping, not a list"),
]


@pytest.mark.parametrize(("text", "error"), BAD_FILES)
def test_each_error_names_the_file_and_line_and_applies_nothing(
    tmp_path: Path, nightly: AgentRuntime, text: str, error: str
) -> None:
    before = state()
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(CommandError) as raised:
        load(path)
    first = str(raised.value).splitlines()[0]
    assert first.startswith(f"{path}:"), first
    assert error in first, first
    assert state() == before
