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
from aimon_admin.approvals.rule_version import cached_index, cached_indexes_forget, rule_set_version_bump
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
STORED_PATTERN_INVALID_MESSAGE = (
    "This rule's stored pattern is not valid: {problems} Delete the rule and write it again."
)
STORED_TOOL_RULE_INVALID = (
    "This rule's stored text is not valid: {problems} Delete the rule and write it again."
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
    changed: AuditAction
    deleted: AuditAction
    field: str  # where a problem with what it matches is named: its pattern, or its text
    stored_invalid: str  # a stored rule the grammar refuses: only a deletion mends it
    text: Callable[[Any], str]  # what it matches, as its events and messages name it
    problems: Callable[[Any], list[str]]  # what the grammar finds wrong with a stored rule
    snapshot: Callable[[Any], dict[str, object]]  # what its events record of it
    check: Callable[[Any], None]  # refuses (ValidationError) the rule as it would be saved


def _runtime_name(rule: Rule) -> str | None:
    return rule.runtime.name if rule.runtime else None


def _skill_snapshot(rule: SkillRule) -> dict[str, object]:
    return {
        "runtime": _runtime_name(rule),
        "pattern": rule.pattern,
        "action": rule.action,
        "widest_scope": rule.widest_scope,
        "approvers": rule.approvers,
        "note": rule.note,
    }


def _tool_text(rule: ToolRule) -> str:
    return rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern)


def _tool_problems(rule: ToolRule) -> list[str]:
    try:
        parse_rule_text(_tool_text(rule))
    except RuleTextError as exc:
        return exc.problems
    return []


def _tool_snapshot(rule: ToolRule) -> dict[str, object]:
    return {
        "runtime": _runtime_name(rule),
        "text": _tool_text(rule),
        "server": rule.server,
        "tool": rule.tool,
        "pattern": rule.pattern,
        "action": rule.action,
        "unattended": rule.unattended,
        "approvers": rule.approvers,
        "note": rule.note,
    }


SKILL = RuleKind(
    model=SkillRule,
    subject_type="rule",
    created=AuditAction.RULE_CREATED,
    changed=AuditAction.RULE_CHANGED,
    deleted=AuditAction.RULE_DELETED,
    field="pattern",
    stored_invalid=STORED_PATTERN_INVALID_MESSAGE,
    text=lambda rule: rule.pattern,
    problems=lambda rule: skill_pattern_problems(rule.pattern),
    snapshot=_skill_snapshot,
    check=lambda rule: None,  # rule_create checks the pattern and an ALLOW for everything first
)
TOOL = RuleKind(
    model=ToolRule,
    subject_type="tool_rule",
    created=AuditAction.TOOL_RULE_CREATED,
    changed=AuditAction.TOOL_RULE_CHANGED,
    deleted=AuditAction.TOOL_RULE_DELETED,
    field="text",
    stored_invalid=STORED_TOOL_RULE_INVALID,
    text=_tool_text,
    problems=_tool_problems,
    snapshot=_tool_snapshot,
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


def rule_index_reset() -> None:
    """Forget this process's cached rule indexes, of skills and of tools: the next read of
    each builds it afresh. For tests (a rolled-back test's rules must not judge the next
    one) and for anything else that changed rules without bumping the version."""
    cached_indexes_forget()


# --- The one write path (A1, U7) ----------------------------------------------------------------


def _stored(kind: RuleKind, rule: RuleT) -> tuple[RuleT, dict[str, object]]:
    """The rule as stored, locked to the end of the transaction, and what its events record
    of it. Refused if the grammar refuses it (written around the services, or before the
    grammar existed): nothing keeps it alive but a deletion."""
    rule = kind.model.objects.select_for_update(of=("self",)).select_related("runtime").get(pk=rule.pk)
    problems = kind.problems(rule)
    if problems:
        raise ValidationError({kind.field: [kind.stored_invalid.format(problems=" ".join(problems))]})
    return rule, kind.snapshot(rule)


def _save(kind: RuleKind, rule: Rule, *, actor: Actor, before: dict[str, object] | None = None) -> None:
    """The one write of a rule (`before`: as it was, for a change): checked by its kind,
    saved, the rule set's version restamped and the event written, in the caller's
    transaction. A change that changes nothing writes nothing."""
    kind.check(rule)
    rule.action = RuleAction(rule.action)
    after = kind.snapshot(rule)
    if before == after:
        return
    rule.full_clean()
    rule.save()
    rule_set_version_bump()
    audit_record(
        action=kind.created if before is None else kind.changed,
        actor=actor,
        runtime=rule.runtime,
        subject_type=kind.subject_type,
        subject=kind.text(rule),
        details=kind.snapshot(rule) if before is None else {"before": before, "after": after},
    )


@transaction.atomic
def rule_delete(*, rule: Rule, actor: Actor) -> None:
    """Deletes a rule of either kind."""
    kind = SKILL if isinstance(rule, SkillRule) else TOOL
    rule = kind.model.objects.select_related("runtime").get(pk=rule.pk)
    before, runtime, text = kind.snapshot(rule), rule.runtime, kind.text(rule)
    rule.delete()
    rule_set_version_bump()
    audit_record(
        action=kind.deleted,
        actor=actor,
        runtime=runtime,
        subject_type=kind.subject_type,
        subject=text,
        details={"before": before},
    )


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
    _save(SKILL, rule, actor=actor)
    return rule


@transaction.atomic
def rule_update(
    *,
    rule: SkillRule,
    actor: Actor,
    action: str,
    widest_scope: str,
    note: str = "",
    approvers: int | None = None,
) -> SkillRule:
    """Changes a skill rule's action, widest answer, people who must allow (None: as it is)
    and note. A request already open keeps the number it was opened with (P3)."""
    rule, before = _stored(SKILL, rule)
    rule.action = RuleAction(action)
    rule.widest_scope = GrantScope(widest_scope)
    if approvers is not None:
        rule.approvers = approvers
    rule.note = note
    _save(SKILL, rule, actor=actor, before=before)
    return rule


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
    _save(TOOL, rule, actor=actor)
    return rule


@transaction.atomic
def tool_rule_update(
    *,
    rule: ToolRule,
    actor: Actor,
    action: str,
    unattended: bool,
    note: str = "",
    approvers: int | None = None,
) -> ToolRule:
    """Changes a tool rule's action, pre-approval, people who must allow (None: as it is; an
    open request keeps its number, P3) and note; its runtime and text stay (to change
    those, delete the rule and write another). Checked as `tool_rule_create` checks."""
    rule, before = _stored(TOOL, rule)
    rule.action, rule.unattended = action, unattended
    if approvers is not None:
        rule.approvers = approvers
    rule.note = note
    _save(TOOL, rule, actor=actor, before=before)
    return rule
