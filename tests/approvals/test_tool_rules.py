"""Tool argument rules (U1, U5, U7): the index the tool chain reads, and the services that
write rules (validated, audited)."""

from __future__ import annotations

import pytest

from aimon_admin.approvals import rules, tool_rules
from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.models import ToolRule
from aimon_admin.registry.choices import DestructiveBehavior, IdempotencyBehavior, SideEffectLevel
from aimon_admin.registry.policy import ToolAxes
from aimon_admin.runtimes.models import AgentRuntime

pytestmark = pytest.mark.django_db

WRITES = ToolAxes(
    SideEffectLevel.MUTATING, DestructiveBehavior.NON_DESTRUCTIVE, IdempotencyBehavior.IDEMPOTENT
)


def _match(runtime: AgentRuntime, subject: str | None, *, tool: str = "Bash", unattended: bool = False):
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
    rules._bump_version()
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
