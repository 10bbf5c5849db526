"""Part U of docs/rules.md as pure functions: a tool call's arguments and the canonical
digest an *Allow this call* is bound to, what each layer's grants hold for the call, and
the order of the tool chain. Standard library, enums, the registry's pure policy,
`rfc8785` (the JSON Canonicalization Scheme) and the two pure modules the chain reads:
subject_patterns.py (what a pattern matches) and tool_rule_grammar.py (the rules and
their index).

The chain (U, first match wins): ceiling → operator DENY rules → this call's approval →
turn → session → invoking session → agent grants → operator ALLOW / ASK rules → the gate →
ASK; an unattended ASK becomes DENY unless a pre-approval answers it (T8, U5).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import rfc8785

from aimon_admin.approvals.choices import GrantDecision, ToolCallSource
from aimon_admin.approvals.subject_patterns import SubjectPattern, whole_tool_allowed
from aimon_admin.approvals.subjects import Subject, as_subject
from aimon_admin.approvals.tool_rule_grammar import ToolRuleMatch, ToolRuleSpec
from aimon_admin.registry.choices import GateReason, ToolDecision
from aimon_admin.registry.policy import GateResult, ToolAxes

# --- The arguments (U2, U4) --------------------------------------------------------------------

ARGUMENTS_MAX_BYTES = 64 * 1024  # of the canonical JSON
ARGUMENTS_MAX_DEPTH = 32

ARGUMENTS_NOT_OBJECT = 'Must be a JSON object of the call\'s arguments, e.g. {"command": "ls"}.'
ARGUMENTS_TOO_LARGE = "At most {limit} bytes as canonical JSON; these are {size}."
ARGUMENTS_TOO_DEEP = "Nested deeper than {limit} levels."
ARGUMENTS_NOT_FINITE = "Numbers must be finite: NaN and infinities (such as 1e999) are not JSON."
ARGUMENTS_BIG_INTEGER = "Whole numbers must lie within ±(2^53 - 1) to have one canonical form (at {where})."
ARGUMENTS_SURROGATE = "Text must be valid Unicode: a lone surrogate (\\ud800-\\udfff) at {where}."


def _walk_problem(value: Any, depth: int, where: str) -> str | None:
    if depth > ARGUMENTS_MAX_DEPTH:
        return ARGUMENTS_TOO_DEEP.format(limit=ARGUMENTS_MAX_DEPTH)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else ARGUMENTS_NOT_FINITE
    if isinstance(value, int):
        return None if abs(value) <= 2**53 - 1 else ARGUMENTS_BIG_INTEGER.format(where=where)
    if isinstance(value, str):
        return ARGUMENTS_SURROGATE.format(where=where) if _has_surrogate(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return ARGUMENTS_NOT_OBJECT
            if _has_surrogate(key):
                return ARGUMENTS_SURROGATE.format(where=f"{where}, a key")
            if problem := _walk_problem(item, depth + 1, f"{where}.{key}"):
                return problem
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            if problem := _walk_problem(item, depth + 1, f"{where}[{index}]"):
                return problem
        return None
    return ARGUMENTS_NOT_OBJECT


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def arguments_problem(arguments: Any) -> str | None:
    """What makes `arguments` unfit to be a call's arguments, or None.

    They must be a JSON object whose canonical form (RFC 8785) exists and is at most 64 KiB:
    finite numbers, integers a double holds exactly, valid Unicode, a sane depth."""
    if not isinstance(arguments, Mapping):
        return ARGUMENTS_NOT_OBJECT
    if problem := _walk_problem(arguments, 1, "arguments"):
        return problem
    size = len(rfc8785.dumps(arguments))
    if size > ARGUMENTS_MAX_BYTES:
        return ARGUMENTS_TOO_LARGE.format(limit=ARGUMENTS_MAX_BYTES, size=size)
    return None


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """U3/U4: `sha256:` and the hex SHA-256 of the arguments' RFC 8785 canonical JSON, so
    reordered keys or another spelling of the same number give the same digest, and any
    changed value (whitespace inside a string included) gives another. Call only on
    arguments `arguments_problem` passed."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(dict(arguments))).hexdigest()


# --- Grants held for a tool (U3) ----------------------------------------------------------------


@dataclass(frozen=True)
class HeldToolGrant:
    """A tool grant in force at some layer: its decision and subject pattern."""

    id: int
    decision: GrantDecision
    pattern: str
    approvers: int = 1  # P3: how many people's answer wrote it


def layer_decision(
    grants: Iterable[HeldToolGrant], subject: Subject | str | None, axes: ToolAxes, *, floor: int = 1
) -> HeldToolGrant | None:
    """What one layer (turn, session, invoking session, agent) holds for this call: a
    matching DENY beats a matching ALLOW in the same layer (a DENY with a pattern matches a
    subject that cannot be read: U1, fail closed), an ALLOW of the whole of a destructive
    tool applies to nothing (U3: never granted wholesale), nor does an ALLOW fewer people
    gave than the call's `floor` needs (P3)."""
    subject = as_subject(subject)
    allowed: HeldToolGrant | None = None
    whole_ok = whole_tool_allowed(axes)
    for grant in grants:
        compiled = SubjectPattern.compile(grant.pattern)
        if grant.decision == GrantDecision.DENY:
            if compiled.matches(subject, for_allow=False) or (grant.pattern and not subject.readable):
                return grant
        elif (
            allowed is None
            and grant.approvers >= floor
            and (whole_ok or not compiled.wholesale)
            and compiled.matches(subject, for_allow=True)
        ):
            allowed = grant
    return allowed


# --- The chain (U) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolLayers:
    """Everything the chain reads for one call, gathered by the service."""

    gate: GateResult  # registry.policy.gate_decision(..., attended=True): the chain itself applies T8
    rules: ToolRuleMatch = field(default_factory=ToolRuleMatch)
    call_approved: bool = False  # U4/U6: a valid, unused *Allow this call* was presented
    turn: HeldToolGrant | None = None
    session: HeldToolGrant | None = None
    invoking_session: HeldToolGrant | None = None
    agent: HeldToolGrant | None = None


@dataclass(frozen=True)
class ToolVerdict:
    decision: ToolDecision
    reason: GateReason
    source: ToolCallSource
    rule: ToolRuleSpec | None = None
    grant: HeldToolGrant | None = None


def tool_chain_decide(layers: ToolLayers, *, attended: bool) -> ToolVerdict:
    """U: ceiling → DENY rules → this call's approval → turn → session → invoking session →
    agent → ALLOW / ASK rules → the gate; an unattended question is DENY unless a
    pre-approval answers it, and nothing else turns it into ALLOW (U5)."""
    gate, rules = layers.gate, layers.rules
    if gate.reason == GateReason.ABOVE_CEILING:
        return ToolVerdict(ToolDecision.DENY, GateReason.ABOVE_CEILING, ToolCallSource.CEILING)
    if rules.deny is not None:
        return ToolVerdict(ToolDecision.DENY, GateReason.DENIED_BY_RULE, ToolCallSource.RULE, rule=rules.deny)
    if layers.call_approved:
        return ToolVerdict(ToolDecision.ALLOW, GateReason.GRANTED, ToolCallSource.CALL)
    for held, source in (
        (layers.turn, ToolCallSource.TURN),
        (layers.session, ToolCallSource.SESSION),
        (layers.invoking_session, ToolCallSource.INVOKING_SESSION),
        (layers.agent, ToolCallSource.AGENT),
    ):
        if held is not None:
            if held.decision == GrantDecision.ALLOW:
                return ToolVerdict(ToolDecision.ALLOW, GateReason.GRANTED, source, grant=held)
            return ToolVerdict(ToolDecision.DENY, GateReason.DENIED, source, grant=held)
    if rules.allow is not None:
        return ToolVerdict(
            ToolDecision.ALLOW, GateReason.ALLOWED_BY_RULE, ToolCallSource.RULE, rule=rules.allow
        )
    if rules.ask is None and gate.decision != ToolDecision.ASK:
        return ToolVerdict(gate.decision, gate.reason, ToolCallSource.GATE)
    source = ToolCallSource.GATE if rules.ask is None else ToolCallSource.RULE
    if attended:
        asked_by_rule = rules.ask is not None and gate.decision == ToolDecision.ALLOW
        reason = GateReason.ASKED_BY_RULE if asked_by_rule else gate.reason
        return ToolVerdict(ToolDecision.ASK, reason, source, rule=rules.ask)
    if rules.pre_approval is not None:
        return ToolVerdict(
            ToolDecision.ALLOW, GateReason.PRE_APPROVED, ToolCallSource.RULE, rule=rules.pre_approval
        )
    return ToolVerdict(ToolDecision.DENY, GateReason.UNATTENDED_NO_CHANNEL, source, rule=rules.ask)
