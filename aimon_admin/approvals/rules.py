"""Operators' rules of both kinds, skill rules (S2) and tool rules (U1, U5): the one path every
rule is written through (checked, saved, the rule set's version restamped and the audit event
written in one transaction: A1, U7), and the index of skill rules the skill chain reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction

from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.models import SkillRule, ToolRule
from aimon_admin.approvals.policy import (
    RuleIndex,
    RuleSpec,
    rule_action_for,
    rule_allows_everything,
    skill_pattern_problems,
    stored_rule_action,
)
from aimon_admin.approvals.rule_version import cached_index, rule_set_version_bump
from aimon_admin.approvals.rule_version import rule_index_reset as rule_index_reset  # beside rule_index
from aimon_admin.approvals.tool_rule_grammar import RuleTextError, parse_rule_text, rule_text
from aimon_admin.approvals.tool_rules import tool_rule_check
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

ALLOW_EVERYTHING_MESSAGE = (
    "This rule allows every skill{where} without asking anyone. Tick the confirmation to save it, "
    "or narrow the pattern (deploy-*), or choose Ask."
)

Rule = SkillRule | ToolRule
RuleT = TypeVar("RuleT", SkillRule, ToolRule)


# --- The kinds ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RuleKind:
    """What tells one kind of rule from the other on the path they share."""

    model: type[SkillRule] | type[ToolRule]
    subject_type: str  # of its audit events
    created: AuditAction
    deleted: AuditAction
    field: str  # where a problem with what it matches is named: its pattern, or its text
    text: Callable[[Any], str]  # what it matches, as its events and messages name it
    problems: Callable[[Any], list[str]]  # what the grammar finds wrong with a stored rule (rules page)
    snapshot: Callable[[Any], dict[str, object]]  # what its events record of it
    check: Callable[[Any], None]  # refuses (ValidationError) the rule as it would be saved


def _snapshot(rule: Rule, *fields: str, **text: str) -> dict[str, object]:
    """What a rule's events record of it: its runtime, a tool rule's text, then `fields`."""
    runtime = rule.runtime.name if rule.runtime else None
    return {"runtime": runtime, **text, **{name: getattr(rule, name) for name in fields}}


def _tool_text(rule: ToolRule) -> str:
    return rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern)


def _tool_problems(rule: ToolRule) -> list[str]:
    try:
        parse_rule_text(_tool_text(rule))
    except RuleTextError as exc:
        return exc.problems
    return []


SKILL = RuleKind(
    model=SkillRule,
    subject_type="rule",
    created=AuditAction.RULE_CREATED,
    deleted=AuditAction.RULE_DELETED,
    field="pattern",
    text=lambda rule: rule.pattern,
    problems=lambda rule: skill_pattern_problems(rule.pattern),
    snapshot=lambda rule: _snapshot(rule, "pattern", "action", "widest_scope", "approvers", "note"),
    check=lambda rule: None,  # rule_create checks the pattern and an ALLOW for everything first
)
TOOL = RuleKind(
    model=ToolRule,
    subject_type="tool_rule",
    created=AuditAction.TOOL_RULE_CREATED,
    deleted=AuditAction.TOOL_RULE_DELETED,
    field="text",
    text=_tool_text,
    problems=_tool_problems,
    snapshot=lambda rule: _snapshot(
        rule, "server", "tool", "pattern", "action", "unattended", "approvers", "note", text=_tool_text(rule)
    ),
    check=tool_rule_check,
)


# --- The skill rule index (S2) -----------------------------------------------------------------


def _skill_rule_index() -> RuleIndex:
    return RuleIndex(
        RuleSpec(
            id=rule.pk,
            runtime_id=rule.runtime_id,
            pattern=rule.pattern,
            action=rule_action_for(stored_rule_action(rule.action, rule.pattern), rule.approvers),
            widest_scope=GrantScope(rule.widest_scope),
            approvers=rule.approvers,
        )
        for rule in SkillRule.objects.all()
    )


def rule_index(version: int | None = None) -> RuleIndex:
    """The index of every skill rule, rebuilt when the rule set changed anywhere."""
    return cached_index(SkillRule, _skill_rule_index, version)


# --- The one write path (A1, U7) ----------------------------------------------------------------


def _written(
    kind: RuleKind, action: AuditAction, rule: Rule, actor: Actor, details: dict[str, object]
) -> None:
    """What follows every write of a rule, in its transaction: the rule set's version
    restamped and the event."""
    rule_set_version_bump()
    audit_record(
        action=action,
        actor=actor,
        runtime=rule.runtime,
        subject_type=kind.subject_type,
        subject=kind.text(rule),
        details=details,
    )


def _save(kind: RuleKind, rule: RuleT, *, actor: Actor) -> RuleT:
    """The one write of a new rule: checked by its kind, saved, and written (`_written`)."""
    kind.check(rule)
    rule.action = RuleAction(rule.action)
    rule.full_clean()
    rule.save()
    _written(kind, kind.created, rule, actor, kind.snapshot(rule))
    return rule


@transaction.atomic
def rule_delete(*, rule: Rule, actor: Actor) -> None:
    """Deletes a rule of either kind."""
    kind = SKILL if isinstance(rule, SkillRule) else TOOL
    rule = kind.model.objects.select_related("runtime").get(pk=rule.pk)
    before = kind.snapshot(rule)
    rule.delete()  # its fields stay on the instance, for its event
    _written(kind, kind.deleted, rule, actor, {"before": before})


# --- Skill rules (S2) ---------------------------------------------------------------------------


@transaction.atomic
def rule_create(
    *,
    pattern: str,
    action: str,
    actor: Actor,
    runtime: AgentRuntime | None = None,
    widest_scope: str = GrantScope.AGENT,
    note: str = "",
    confirm_everything: bool = False,
    approvers: int = 1,
) -> SkillRule:
    """Writes a skill rule. The pattern must follow the grammar (policy.skill_pattern_problems),
    and an ALLOW for every skill (`*`) only with `confirm_everything`."""
    problems = skill_pattern_problems(pattern)
    if problems:
        raise ValidationError({"pattern": problems})
    if rule_allows_everything(action=action, pattern=pattern) and not confirm_everything:
        where = f" of {runtime.name}" if runtime else " of every runtime"
        raise ValidationError({"confirm_everything": [ALLOW_EVERYTHING_MESSAGE.format(where=where)]})
    rule = SkillRule(
        runtime=runtime,
        pattern=pattern,
        action=RuleAction(action),
        widest_scope=GrantScope(widest_scope),
        approvers=approvers,
        note=note,
    )
    return _save(SKILL, rule, actor=actor)


# --- Tool rules (U1, U5) ------------------------------------------------------------------------


@transaction.atomic
def tool_rule_create(
    *,
    text: str,
    action: str,
    actor: Actor,
    runtime: AgentRuntime | None = None,
    unattended: bool = False,
    note: str = "",
    approvers: int = 1,
) -> ToolRule:
    """Writes an argument rule written as `Tool(pattern)` (U1): `Bash(git status:*)`,
    `Bash` for the whole tool, `git/git_push(origin:*)` for an MCP server's tool.
    `unattended` makes an ALLOW of one runtime a pre-approval for its unattended runs (U5).
    Refused, each problem named by its field: text off the grammar, a pre-approval that is
    not one runtime's ALLOW, an ALLOW of the whole of a destructive or unregistered tool,
    a rule that already exists."""
    try:
        parsed = parse_rule_text(text)
    except RuleTextError as exc:
        raise ValidationError({"text": exc.problems}) from exc
    rule = ToolRule(
        runtime=runtime,
        server=parsed.server,
        tool=parsed.tool,
        pattern=parsed.pattern,
        action=action,
        unattended=unattended,
        approvers=approvers,
        note=note,
    )
    return _save(TOOL, rule, actor=actor)
