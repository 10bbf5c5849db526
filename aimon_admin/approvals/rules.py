"""Skill rules: writes (audited, A1) and the per-process rule index the chain reads.

The index is rebuilt only when the rule set's version changes. The version is one row
in the database, restamped in the same transaction as every rule change and read (one
primary-key lookup) by every evaluation, so a change committed on one node is seen by
the next decision on every node. A shared cache would cost the same round trip and add
a way to be stale.
"""

from __future__ import annotations

import secrets
import threading

from django.core.exceptions import ValidationError
from django.db import connection, transaction

from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.models import RuleSetVersion, SkillRule
from aimon_admin.approvals.policy import (
    RuleIndex,
    RuleSpec,
    rule_action_for,
    rule_allows_everything,
    skill_pattern_problems,
    stored_rule_action,
)
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

_lock = threading.Lock()
_cached: tuple[int, RuleIndex] | None = None


def _current_version() -> int:
    # Plain SQL: read on every decision, where the ORM's query building would dominate.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT version FROM {RuleSetVersion._meta.db_table} WHERE id = 1")  # noqa: S608 - the model's table # nosec B608
        row = cursor.fetchone()
    return row[0] if row else 0


def rule_index(version: int | None = None) -> RuleIndex:
    """The index of every rule, rebuilt when the rule set changed anywhere.

    `version` is the rule set's version when the caller has just read it (the chain
    reads it with the grants, in one round trip); otherwise it is read here.
    """
    global _cached
    if version is None:
        version = _current_version()
    cached = _cached
    if cached is not None and cached[0] == version:
        return cached[1]
    with _lock:
        specs = [
            RuleSpec(
                id=rule.pk,
                runtime_id=rule.runtime_id,
                pattern=rule.pattern,
                action=rule_action_for(stored_rule_action(rule.action, rule.pattern), rule.approvers),
                widest_scope=GrantScope(rule.widest_scope),
                approvers=rule.approvers,
            )
            for rule in SkillRule.objects.all()
        ]
        index = RuleIndex(specs)
        _cached = (version, index)
        return index


def rule_index_reset() -> None:
    """Forget this process's cached rule index: the next `rule_index` builds it afresh.

    For tests (a rolled-back test's rules must not judge the next one) and for anything
    else that changed rules without bumping the version. The tool rule index is forgotten
    with it (tool_rules.py)."""
    global _cached
    with _lock:
        _cached = None
    from aimon_admin.approvals import tool_rules  # imports this module: read at call time

    tool_rules.tool_rule_index_reset()


def _bump_version() -> None:
    # A fresh random stamp, not a counter: a rolled-back change's number would come round
    # again, and an index cached under it (read inside that transaction) would be stale.
    RuleSetVersion.objects.update_or_create(pk=1, defaults={"version": secrets.randbits(62) + 1})


def _snapshot(rule: SkillRule) -> dict[str, object]:
    return {
        "runtime": rule.runtime.name if rule.runtime else None,
        "pattern": rule.pattern,
        "action": rule.action,
        "widest_scope": rule.widest_scope,
        "approvers": rule.approvers,
        "note": rule.note,
    }


@transaction.atomic
def rule_create(
    *,
    pattern: str,
    action: str,
    actor: Actor,
    runtime: AgentRuntime | None = None,
    widest_scope: str = GrantScope.AGENT,
    note: str = "",
    allow_everything_confirmed: bool = False,
    approvers: int = 1,
) -> SkillRule:
    """Writes a rule. The pattern must follow the grammar (policy.skill_pattern_problems),
    and an ALLOW for every skill (`*`) only with `allow_everything_confirmed`."""
    problems = skill_pattern_problems(pattern)
    if problems:
        raise ValidationError({"pattern": problems})
    if rule_allows_everything(action=action, pattern=pattern) and not allow_everything_confirmed:
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
    rule.full_clean()
    rule.save()
    _bump_version()
    audit_record(
        action=AuditAction.RULE_CREATED,
        actor=actor,
        runtime=runtime,
        subject_type="rule",
        subject=pattern,
        details=_snapshot(rule),
    )
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
    """Changes a rule's action, widest answer, people who must allow (None: as it is) and
    note. A request already open keeps the number it was opened with (P3)."""
    rule = SkillRule.objects.select_for_update(of=("self",)).select_related("runtime").get(pk=rule.pk)
    problems = skill_pattern_problems(rule.pattern)
    if problems:
        # Written before the grammar existed: nothing keeps it alive but a deletion.
        raise ValidationError(
            {"pattern": [STORED_PATTERN_INVALID_MESSAGE.format(problems=" ".join(problems))]}
        )
    before = _snapshot(rule)
    rule.action = RuleAction(action)
    rule.widest_scope = GrantScope(widest_scope)
    if approvers is not None:
        rule.approvers = approvers
    rule.note = note
    after = _snapshot(rule)
    if before == after:
        return rule
    rule.full_clean()
    rule.save()
    _bump_version()
    audit_record(
        action=AuditAction.RULE_CHANGED,
        actor=actor,
        runtime=rule.runtime,
        subject_type="rule",
        subject=rule.pattern,
        details={"before": before, "after": after},
    )
    return rule


@transaction.atomic
def rule_delete(*, rule: SkillRule, actor: Actor) -> None:
    rule = SkillRule.objects.select_related("runtime").get(pk=rule.pk)
    before = _snapshot(rule)
    runtime = rule.runtime
    rule.delete()
    _bump_version()
    audit_record(
        action=AuditAction.RULE_DELETED,
        actor=actor,
        runtime=runtime,
        subject_type="rule",
        subject=before["pattern"],  # type: ignore[arg-type]
        details={"before": before},
    )
