"""Tool argument rules `Tool(pattern)` (U1, U5): writes (audited, U7) and the per-process
index the tool chain reads.

The index is cached as the skill rule index is (approvals/rules.py): rebuilt only when the
rule set's version changes, the same version row, restamped in the same transaction as every
skill or tool rule change, so one read tells both caches whether they are fresh.
"""

from __future__ import annotations

import threading

from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.models import ToolRule
from aimon_admin.approvals.rules import _current_version
from aimon_admin.approvals.tool_policy import (
    ToolRuleIndex,
    ToolRuleSpec,
    subject_pattern_problems,
    tool_name_problems,
)

_lock = threading.Lock()
_cached: tuple[int, ToolRuleIndex] | None = None


def _spec(rule: ToolRule) -> ToolRuleSpec:
    action = RuleAction(rule.action)
    unattended = rule.unattended
    if action == RuleAction.ALLOW and (
        tool_name_problems(rule.tool) or subject_pattern_problems(rule.pattern)
    ):
        # Fail closed: a stored ALLOW the grammar refuses (written around the services)
        # allows nothing; it asks instead, as a bad skill rule's ALLOW does.
        action, unattended = RuleAction.ASK, False
    return ToolRuleSpec(
        id=rule.pk,
        runtime_id=rule.runtime_id,
        server=rule.server,
        tool=rule.tool,
        pattern=rule.pattern,
        action=action,
        unattended=unattended,
    )


def tool_rule_index(version: int | None = None) -> ToolRuleIndex:
    """The index of every tool rule, rebuilt when the rule set changed anywhere.

    `version` is the rule set's version when the caller has just read it; otherwise it
    is read here (one primary-key lookup)."""
    global _cached
    if version is None:
        version = _current_version()
    cached = _cached
    if cached is not None and cached[0] == version:
        return cached[1]
    with _lock:
        index = ToolRuleIndex([_spec(rule) for rule in ToolRule.objects.all()])
        _cached = (version, index)
        return index


def tool_rule_index_reset() -> None:
    """Forget this process's cached tool rule index (`rules.rule_index_reset` calls this
    too, so tests that reset the skill index reset both)."""
    global _cached
    with _lock:
        _cached = None
