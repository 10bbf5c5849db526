"""Tool argument rules (U1, U5, U7): the index the tool chain reads, and the services that
write rules (validated, audited)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from aimon_admin.approvals import rule_version, rules, tool_rules
from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.models import ToolRule
from aimon_admin.approvals.tool_rule_grammar import PATTERN_WHOLE_DESTRUCTIVE, TOOL_NAME_EMPTY, ToolRuleMatch
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    IdempotencyBehavior,
    SideEffectLevel,
)
from aimon_admin.registry.policy import ToolAxes
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR
from tests.registry.factories import mcp_server, tools_synced

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def named_subjects() -> None:
    """The tools these rules name have subject arguments (U1: a pattern rule on a tool with
    none is refused, as it could never match)."""
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server="git", tool="git_push", argument="remote", actor=TEST_ACTOR)


WRITES = ToolAxes(
    SideEffectLevel.MUTATING, DestructiveBehavior.NON_DESTRUCTIVE, IdempotencyBehavior.IDEMPOTENT
)


def _match(
    runtime: AgentRuntime, subject: str | None, *, tool: str = "Bash", unattended: bool = False
) -> ToolRuleMatch:
    return tool_rules.tool_rule_index().match(
        runtime_id=runtime.pk, server="", tool=tool, subject=subject, axes=WRITES, unattended=unattended
    )


# --- The index ----------------------------------------------------------------------------------


def test_index_holds_the_stored_rules(runtime: AgentRuntime) -> None:
    # U1: the rule rows, each with its action and pattern.
    deny = ToolRule.objects.create(tool="Bash", pattern="rm:*", action=RuleAction.DENY)
    allow = ToolRule.objects.create(tool="Bash", pattern="git status:*", action=RuleAction.ALLOW)
    pre = ToolRule.objects.create(
        runtime=runtime, tool="Bash", pattern="make test", action=RuleAction.ALLOW, unattended=True
    )
    rules.rule_index_reset()
    assert len(tool_rules.tool_rule_index()) == 3
    assert _match(runtime, "rm -rf /").deny.id == deny.pk
    assert _match(runtime, "git status -s").allow.id == allow.pk
    assert _match(runtime, "make test").pre_approval is None  # U5: attended calls are not its own
    assert _match(runtime, "make test", unattended=True).pre_approval.id == pre.pk


def test_index_is_kept_while_the_version_stands_and_rebuilt_when_it_moves(runtime: AgentRuntime) -> None:
    first = tool_rules.tool_rule_index()
    assert tool_rules.tool_rule_index() is first
    ToolRule.objects.create(tool="Bash", pattern="rm:*", action=RuleAction.DENY)
    # Written around the services: the version did not move, so the cached index stands ...
    assert tool_rules.tool_rule_index() is first
    rule_version.rule_set_version_bump()
    # ... and a change made through any node moves it: the next read rebuilds.
    rebuilt = tool_rules.tool_rule_index()
    assert rebuilt is not first
    assert _match(runtime, "rm x").deny is not None


def test_resetting_the_skill_index_forgets_the_tool_index_too() -> None:
    first = tool_rules.tool_rule_index()
    rules.rule_index_reset()
    assert tool_rules.tool_rule_index() is not first


def test_a_stored_allow_the_grammar_refuses_asks_instead(runtime: AgentRuntime) -> None:
    # Fail closed: a row written around the services with a control character in its pattern
    # allows nothing.
    bad = ToolRule.objects.create(tool="Bash", pattern="git\x1b*", action=RuleAction.ALLOW)
    rules.rule_index_reset()
    found = _match(runtime, "git\x1b status")
    assert found.allow is None
    assert found.ask is not None
    assert found.ask.id == bad.pk


# --- The services -------------------------------------------------------------------------------


def _register(runtime: AgentRuntime, **tools: dict[str, Any]) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[{"name": name, "description": name, **axes} for name, axes in tools.items()],
        actor=TEST_ACTOR,
    )


SAFE_WRITER = {
    "side_effect_level": "MUTATING",
    "destructive_behavior": "NON_DESTRUCTIVE",
    "idempotency_behavior": "IDEMPOTENT",
}
DESTRUCTIVE = {"side_effect_level": "MUTATING", "destructive_behavior": "DESTRUCTIVE"}


def _refusal(**kwargs: Any) -> dict[str, list[str]]:
    before = (ToolRule.objects.count(), AuditEvent.objects.count())
    with pytest.raises(ValidationError) as caught:
        rules.tool_rule_create(actor=TEST_ACTOR, **kwargs)
    assert (ToolRule.objects.count(), AuditEvent.objects.count()) == before  # nothing written
    return caught.value.message_dict


def test_create_writes_the_rule_and_its_event(runtime: AgentRuntime) -> None:
    # U1, U7: the rule text, action, runtime and pre-approval flag are in the event.
    rule = rules.tool_rule_create(
        text="Bash(git status:*)", action="ALLOW", runtime=runtime, note="read-only git", actor=TEST_ACTOR
    )
    assert (rule.server, rule.tool, rule.pattern, rule.action) == ("", "Bash", "git status:*", "ALLOW")
    event = AuditEvent.objects.get(action=AuditAction.TOOL_RULE_CREATED)
    assert event.subject == "Bash(git status:*)"
    assert event.subject_type == "tool_rule"
    assert event.runtime_id == runtime.pk
    assert event.details == {
        "runtime": "agent-one",
        "text": "Bash(git status:*)",
        "server": "",
        "tool": "Bash",
        "pattern": "git status:*",
        "action": "ALLOW",
        "unattended": False,
        "approvers": 1,  # P3
        "note": "read-only git",
    }
    # The next decision sees it without anyone resetting the index (the version moved).
    assert _match(runtime, "git status").allow.id == rule.pk


def test_create_reads_an_mcp_tool_as_server_slash_tool() -> None:
    rule = rules.tool_rule_create(text="git/git_push(origin:*)", action="DENY", actor=TEST_ACTOR)
    assert (rule.server, rule.tool, rule.pattern, rule.runtime) == ("git", "git_push", "origin:*", None)


def test_a_pre_approval_is_one_runtimes_allow_and_says_so_in_its_event(runtime: AgentRuntime) -> None:
    # U5, U7
    rule = rules.tool_rule_create(
        text="Bash(make test)", action="ALLOW", runtime=runtime, unattended=True, actor=TEST_ACTOR
    )
    assert rule.unattended
    event = AuditEvent.objects.get(action=AuditAction.TOOL_RULE_CREATED)
    assert event.details["unattended"] is True
    assert _match(runtime, "make test", unattended=True).pre_approval.id == rule.pk


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("(git:*)", TOOL_NAME_EMPTY),  # an empty tool name
        ("", TOOL_NAME_EMPTY),
        (b"Bash(git\x1b:*)".decode("unicode_escape"), "No control characters in a subject pattern"),
        (b"Ba\x07sh(git:*)".decode("unicode_escape"), "No control characters in a tool name"),
        ("Bash(git:*", "written in brackets"),
        ("Bash(git **)", "No runs of **"),
        ("bad server!/tool(x)", "is not an MCP server name"),
    ],
)
def test_text_off_the_grammar_is_refused_with_the_problem_named(text: str, problem: str) -> None:
    # Bad input: patterns with control characters or an empty tool name are refused at save.
    refused = _refusal(text=text, action="DENY")
    assert problem in " ".join(refused["text"])


def test_a_pre_approval_must_be_an_allow_of_one_runtime(runtime: AgentRuntime) -> None:
    # U5
    refused = _refusal(text="Bash(make test)", action="ASK", runtime=runtime, unattended=True)
    assert refused["unattended"] == [tool_rules.PRE_APPROVAL_NEEDS_ALLOW]
    refused = _refusal(text="Bash(make test)", action="ALLOW", unattended=True)
    assert refused["unattended"] == [tool_rules.PRE_APPROVAL_NEEDS_RUNTIME]


def test_an_allow_of_the_whole_of_a_destructive_tool_is_refused(runtime: AgentRuntime) -> None:
    # U3, U5: a DESTRUCTIVE tool's ALLOW rule always carries a pattern, pre-approvals included.
    _register(runtime, Bash=DESTRUCTIVE)
    assert _refusal(text="Bash", action="ALLOW")["text"] == [PATTERN_WHOLE_DESTRUCTIVE]
    assert _refusal(text="Bash", action="ALLOW", runtime=runtime)["text"] == [PATTERN_WHOLE_DESTRUCTIVE]
    refused = _refusal(text="Bash", action="ALLOW", runtime=runtime, unattended=True)
    assert refused["text"] == [PATTERN_WHOLE_DESTRUCTIVE]
    # With a pattern it is an ordinary rule; ASK and DENY of the whole tool are fine.
    rules.tool_rule_create(text="Bash(ls:*)", action="ALLOW", actor=TEST_ACTOR)
    rules.tool_rule_create(text="Bash", action="DENY", runtime=runtime, actor=TEST_ACTOR)
    rules.tool_rule_create(text="Bash", action="ASK", actor=TEST_ACTOR)


@pytest.mark.parametrize("text", ["Bash(*)", "Bash(:*)", "Bash(*:*)"])
def test_an_allow_of_only_wildcards_is_the_whole_tool(runtime: AgentRuntime, text: str) -> None:
    # U3, U5: a pattern of nothing but wildcards allows every text subject: never for a
    # destructive tool.
    _register(runtime, Bash=DESTRUCTIVE)
    assert _refusal(text=text, action="ALLOW", runtime=runtime)["text"] == [PATTERN_WHOLE_DESTRUCTIVE]
    rules.tool_rule_create(text=text, action="DENY", runtime=runtime, actor=TEST_ACTOR)


def test_an_allow_of_the_whole_of_an_unregistered_tool_is_refused(runtime: AgentRuntime) -> None:
    # T9: a tool nobody registered counts as destructive.
    refused = _refusal(text="Bash", action="ALLOW", runtime=runtime)
    assert refused["text"] == [tool_rules.WHOLE_TOOL_UNREGISTERED.format(tool="Bash")]
    refused = _refusal(text="git/git_push", action="ALLOW")
    assert refused["text"] == [tool_rules.WHOLE_TOOL_UNREGISTERED.format(tool="git/git_push")]


def test_a_refusal_says_when_only_ignored_claims_make_an_mcp_tool_destructive(db: None) -> None:
    # U3, T11: the server claims the tool is not destructive, but its claims are ignored, so it
    # counts as destructive; the refusal says so and where the trust is set.
    claims = {"readOnlyHint": False, "destructiveHint": False}
    tools_synced(mcp_server("files"), [{"name": "write_note", "annotations": claims}])
    refused = _refusal(text="files/write_note", action="ALLOW")["text"]
    assert refused == [
        tool_rules.WHOLE_TOOL_CLAIMS_IGNORED.format(
            tool="files/write_note", server="files", trust_page="/registry/servers/files/trust/"
        )
    ]
    # Trusted and claiming to destroy: the plain refusal, nothing to change about trust.
    tools_synced(mcp_server("git", trust=AnnotationTrust.TRUST), [{"name": "reset", "annotations": {}}])
    assert _refusal(text="git/reset", action="ALLOW")["text"] == [PATTERN_WHOLE_DESTRUCTIVE]


def test_a_rule_of_every_runtime_is_refused_if_any_registration_is_destructive(
    runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:
    _register(runtime, Bash=SAFE_WRITER)
    _register(other_runtime, Bash=DESTRUCTIVE)
    assert _refusal(text="Bash", action="ALLOW")["text"] == [PATTERN_WHOLE_DESTRUCTIVE]
    # For the runtime whose Bash writes but destroys nothing, the whole tool may be allowed.
    rule = rules.tool_rule_create(text="Bash", action="ALLOW", runtime=runtime, actor=TEST_ACTOR)
    assert rule.pattern == ""


def test_the_same_rule_twice_is_refused(runtime: AgentRuntime) -> None:
    rules.tool_rule_create(text="Bash(rm:*)", action="DENY", runtime=runtime, actor=TEST_ACTOR)
    refused = _refusal(text="Bash(rm:*)", action="ASK", runtime=runtime)
    assert "already has a rule" in " ".join(refused["__all__"])
    # Another runtime, every runtime, or a pre-approval of the same text are other rules.
    rules.tool_rule_create(text="Bash(rm:*)", action="DENY", actor=TEST_ACTOR)


def test_delete_is_audited_and_seen_by_the_next_decision(runtime: AgentRuntime) -> None:
    rule = rules.tool_rule_create(text="Bash(rm:*)", action="DENY", actor=TEST_ACTOR)
    assert _match(runtime, "rm x").deny is not None
    rules.rule_delete(rule=rule, actor=TEST_ACTOR)
    assert not ToolRule.objects.exists()
    event = AuditEvent.objects.get(action=AuditAction.TOOL_RULE_DELETED)
    assert event.subject == "Bash(rm:*)"
    assert event.details["before"]["action"] == "DENY"
    assert _match(runtime, "rm x").deny is None
