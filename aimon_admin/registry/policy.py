"""Part T of docs/rules.md as pure functions: the ladder, the traits, the ceiling, the gate,
and the one place MCP claims become traits. Standard library and enums only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    GateReason,
    IdempotencyBehavior,
    SideEffectLevel,
    SubjectKind,
    ToolDecision,
)

# T1: the ladder. Its order is used by permits() and nowhere else.
_RUNG = {SideEffectLevel.READ_ONLY: 0, SideEffectLevel.MUTATING: 1}


def permits(ceiling: SideEffectLevel | str, level: SideEffectLevel | str) -> bool:
    """T1: true when `level` is at or below `ceiling`; the only comparison on the ladder."""
    return _RUNG[SideEffectLevel(level)] <= _RUNG[SideEffectLevel(ceiling)]


def is_read_only(level: SideEffectLevel | str) -> bool:
    """T4: read-only is derived from the level, never stored on its own."""
    return SideEffectLevel(level) == SideEffectLevel.READ_ONLY


@dataclass(frozen=True)
class ToolAxes:
    """A tool's side-effect axes. Defaults are the worst case (T1, T2, T3)."""

    level: SideEffectLevel = SideEffectLevel.MUTATING
    destructive: DestructiveBehavior = DestructiveBehavior.DESTRUCTIVE
    idempotency: IdempotencyBehavior = IdempotencyBehavior.NON_IDEMPOTENT

    @property
    def effective_destructive(self) -> DestructiveBehavior:
        """T5: traits are read only under MUTATING; a read-only tool is non-destructive."""
        if self.level == SideEffectLevel.READ_ONLY:
            return DestructiveBehavior.NON_DESTRUCTIVE
        return self.destructive

    def normalized(self) -> ToolAxes:
        return ToolAxes(self.level, self.effective_destructive, self.idempotency)


# T9: a tool nobody registered is as dangerous as a tool can be.
UNREGISTERED = ToolAxes()


def axes_words(axes: ToolAxes) -> tuple[str, str, str]:
    """A tool's axes in the plain words a page shows: ("writes", "destructive", "not
    idempotent"), ("read-only", "not destructive", "idempotent"), … (T5: a read-only tool
    destroys nothing, whatever it declared)."""
    return (
        "read-only" if axes.level == SideEffectLevel.READ_ONLY else "writes",
        "destructive" if axes.effective_destructive == DestructiveBehavior.DESTRUCTIVE else "not destructive",
        "idempotent" if axes.idempotency == IdempotencyBehavior.IDEMPOTENT else "not idempotent",
    )


@dataclass(frozen=True)
class GateResult:
    decision: ToolDecision
    reason: GateReason

    @property
    def hidden(self) -> bool:
        """T6: a tool above the ceiling is also left out of the model's tool definitions."""
        return self.reason == GateReason.ABOVE_CEILING


def gate_decision(
    axes: ToolAxes,
    *,
    ceiling: SideEffectLevel | str,
    exempt_at_or_below: SideEffectLevel | str,
    attended: bool,
) -> GateResult:
    """T6-T9: the ceiling first, then the gate; ask becomes deny when nobody can answer.

    Looks at the tool only, never at a call's arguments (T7).
    """
    if not permits(ceiling, axes.level):
        return GateResult(ToolDecision.DENY, GateReason.ABOVE_CEILING)
    if axes.level == SideEffectLevel.READ_ONLY:
        return GateResult(ToolDecision.ALLOW, GateReason.READ_ONLY_EXEMPT)
    if axes.effective_destructive == DestructiveBehavior.DESTRUCTIVE:
        # No threshold switches this off (T7).
        asked = GateResult(ToolDecision.ASK, GateReason.DESTRUCTIVE_ALWAYS_ASKS)
    elif permits(exempt_at_or_below, axes.level):
        return GateResult(ToolDecision.ALLOW, GateReason.EXEMPT_AT_OR_BELOW)
    else:
        asked = GateResult(ToolDecision.ASK, GateReason.NOT_EXEMPT)
    if not attended:
        return GateResult(ToolDecision.DENY, GateReason.UNATTENDED_NO_CHANNEL)  # T8
    return asked


# --- MCP claims (T10, T11, T14, T15) --------------------------------------------------------

# T10: the MCP specification's defaults for absent hints.
HINT_DEFAULTS: dict[str, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}

ANNOTATIONS_NOT_AN_OBJECT = "annotations is not an object; every hint treated as absent"
HINT_WRONG_TYPE = "{hint}: expected true or false, got {value}; treated as absent"


@dataclass(frozen=True)
class Hints:
    """The four hints as read from a claim: True/False where sent well-typed, else None."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None
    warnings: tuple[str, ...] = ()

    def value(self, hint: str) -> bool:
        """The hint's value, the spec default where it was absent (T10)."""
        sent = getattr(self, _HINT_ATTR[hint])
        return HINT_DEFAULTS[hint] if sent is None else sent


_HINT_ATTR = {
    "readOnlyHint": "read_only",
    "destructiveHint": "destructive",
    "idempotentHint": "idempotent",
    "openWorldHint": "open_world",
}


def parse_hints(annotations: Any) -> Hints:
    """T10: read the hints out of an annotations value exactly as a server sent it.

    Absent or wrong-typed hints are None (so the spec default applies), each wrong
    type with a warning; `"readOnlyHint": "yes"` is not true.
    """
    if annotations is None:
        return Hints()
    if not isinstance(annotations, Mapping):
        return Hints(warnings=(ANNOTATIONS_NOT_AN_OBJECT,))
    values: dict[str, bool | None] = {}
    warnings: list[str] = []
    for hint, attr in _HINT_ATTR.items():
        if hint not in annotations or annotations[hint] is None:
            values[attr] = None
            continue
        raw = annotations[hint]
        if isinstance(raw, bool):
            values[attr] = raw
        else:
            values[attr] = None
            warnings.append(HINT_WRONG_TYPE.format(hint=hint, value=_describe(raw)))
    return Hints(**values, warnings=tuple(warnings))


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Resolution:
    """What resolve() decided, and why, axis by axis (shown to operators)."""

    axes: ToolAxes
    open_world: bool
    trust: AnnotationTrust | None  # None for a runtime's own declared tool
    explanations: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _explain(hints: Hints, hint: str) -> str:
    sent = getattr(hints, _HINT_ATTR[hint])
    if sent is None:
        return f"{hint} absent: spec default {str(HINT_DEFAULTS[hint]).lower()}"
    return f"{hint} {str(sent).lower()}"


# T15: why a tool heard of only from runtimes' relays has the worst axes (shown on its page).
RELAYED_ONLY_WHY = "not listed by the server's own sync, only relayed by a runtime: served to no runtime"


def resolve(
    annotations: Any,
    trust: AnnotationTrust | str,
    *,
    held_for_review: bool = False,
    relayed_only: bool = False,
) -> Resolution:
    """T11: the one place claims become traits.

    IGNORE (and a TRUST tool whose definition change lowered its claimed risk and waits
    for review, or one heard of only from runtimes' relays, T15) gives the worst case
    whatever was claimed. TRUST reads the hints, then normalises: READ_ONLY implies
    NON_DESTRUCTIVE.
    """
    trust = AnnotationTrust(trust)
    hints = parse_hints(annotations)
    open_world = hints.value("openWorldHint")  # T14: stored and shown, read by no axis
    if trust == AnnotationTrust.IGNORE or held_for_review or relayed_only:
        if relayed_only:
            why = RELAYED_ONLY_WHY
        elif trust == AnnotationTrust.IGNORE:
            why = "trust IGNORE: claims not used"
        else:
            why = "definition changed to claim less risk: claims not used until an operator accepts it"
        return Resolution(
            axes=UNREGISTERED,
            open_world=open_world,
            trust=trust,
            explanations={
                "side_effect_level": f"{why} → MUTATING",
                "destructive_behavior": f"{why} → DESTRUCTIVE",
                "idempotency_behavior": f"{why} → NON_IDEMPOTENT",
            },
            warnings=hints.warnings,
        )
    level = SideEffectLevel.READ_ONLY if hints.value("readOnlyHint") else SideEffectLevel.MUTATING
    destructive = (
        DestructiveBehavior.DESTRUCTIVE
        if hints.value("destructiveHint")
        else DestructiveBehavior.NON_DESTRUCTIVE
    )
    idempotency = (
        IdempotencyBehavior.IDEMPOTENT
        if hints.value("idempotentHint")
        else IdempotencyBehavior.NON_IDEMPOTENT
    )
    destructive_why = f"{_explain(hints, 'destructiveHint')} → {destructive}"
    if level == SideEffectLevel.READ_ONLY and destructive == DestructiveBehavior.DESTRUCTIVE:
        destructive = DestructiveBehavior.NON_DESTRUCTIVE
        destructive_why = (
            f"{_explain(hints, 'destructiveHint')}, but read-only implies non-destructive → NON_DESTRUCTIVE"
        )
    return Resolution(
        axes=ToolAxes(level, destructive, idempotency),
        open_world=open_world,
        trust=trust,
        explanations={
            "side_effect_level": f"trust TRUST: {_explain(hints, 'readOnlyHint')} → {level}",
            "destructive_behavior": f"trust TRUST: {destructive_why}",
            "idempotency_behavior": f"trust TRUST: {_explain(hints, 'idempotentHint')} → {idempotency}",
        },
        warnings=hints.warnings,
    )


def axes_lowered(before: ToolAxes, after: ToolAxes) -> list[str]:
    """T15: the resolved axes on which `after` is less risky than `before` (empty: none).

    Less risk: a level `before`'s level does not permit (T1: `permits` is the only
    comparison on the ladder), non-destructive where it was destructive (T5: as read under
    each level), idempotent where it was not.
    """
    lowered = []
    if before.level != after.level and permits(before.level, after.level):
        lowered.append("side_effect_level")
    if (
        before.effective_destructive == DestructiveBehavior.DESTRUCTIVE
        and after.effective_destructive == DestructiveBehavior.NON_DESTRUCTIVE
    ):
        lowered.append("destructive_behavior")
    if (
        before.idempotency == IdempotencyBehavior.NON_IDEMPOTENT
        and after.idempotency == IdempotencyBehavior.IDEMPOTENT
    ):
        lowered.append("idempotency_behavior")
    return lowered


def axes_riskier(current: ToolAxes, other: ToolAxes) -> ToolAxes:
    """T15: per axis, the riskier of the two: a claim of more risk takes effect at once,
    whoever made it, and nothing here can lower an axis. Levels compare by `permits` (T1);
    destructiveness is read as T5 reads it under each level."""
    level = current.level if permits(current.level, other.level) else other.level
    destructive = (
        DestructiveBehavior.DESTRUCTIVE
        if DestructiveBehavior.DESTRUCTIVE in (current.effective_destructive, other.effective_destructive)
        else DestructiveBehavior.NON_DESTRUCTIVE
    )
    idempotency = (
        IdempotencyBehavior.NON_IDEMPOTENT
        if IdempotencyBehavior.NON_IDEMPOTENT in (current.idempotency, other.idempotency)
        else IdempotencyBehavior.IDEMPOTENT
    )
    return ToolAxes(level, destructive, idempotency).normalized()


# The hint each resolved axis is read from under TRUST (T11).
_AXIS_HINT = {
    "side_effect_level": "readOnlyHint",
    "destructive_behavior": "destructiveHint",
    "idempotency_behavior": "idempotentHint",
}


def claims_lowered_risk(before: Any, after: Any) -> list[str]:
    """T15: the hints whose new claim resolves to less risk than the old one (empty: none).

    Compares *resolved* axes, not raw hints: both claims are resolved as TRUST would read
    them (the only trust under which claims count, T11; under IGNORE a hold changes
    nothing until trust changes, so keeping it is fail-closed), and an axis is lowered
    only when its resolved value is less risky. A read-only tool is non-destructive (T5),
    so `readOnlyHint` true → false with `destructiveHint` true → false raises the level
    and lowers nothing. Reported by the hint each lowered axis is read from.
    """
    old = resolve(before, AnnotationTrust.TRUST).axes
    new = resolve(after, AnnotationTrust.TRUST).axes
    return [_AXIS_HINT[axis] for axis in axes_lowered(old, new)]


def resolve_declared(declared: Mapping[str, Any]) -> Resolution:
    """A runtime's own (local) tool: its declaration stands; undeclared axes are the worst.

    T5 applies: a READ_ONLY declaration counts as NON_DESTRUCTIVE whatever else it says.
    """
    level = SideEffectLevel(declared.get("side_effect_level") or SideEffectLevel.MUTATING)
    destructive = DestructiveBehavior(declared.get("destructive_behavior") or DestructiveBehavior.DESTRUCTIVE)
    idempotency = IdempotencyBehavior(
        declared.get("idempotency_behavior") or IdempotencyBehavior.NON_IDEMPOTENT
    )

    def why(key: str, value: str) -> str:
        return f"declared {value}" if declared.get(key) else f"undeclared: default {value}"

    destructive_why = why("destructive_behavior", destructive)
    axes = ToolAxes(level, destructive, idempotency)
    if axes.effective_destructive != destructive:
        destructive_why += ", but read-only implies non-destructive → NON_DESTRUCTIVE"
    return Resolution(
        axes=axes.normalized(),
        open_world=True,
        trust=None,
        explanations={
            "side_effect_level": why("side_effect_level", level),
            "destructive_behavior": destructive_why,
            "idempotency_behavior": why("idempotency_behavior", idempotency),
        },
    )


def definition_differences(served: tuple[str, Any, Any], relayed: tuple[Any, Any, Any]) -> list[str]:
    """T15: which parts of a relayed (description, inputSchema, annotations) differ from the
    served tool's (its stored description, input schema and claims), for operators."""
    served_description, served_schema, served_claims = served
    description, schema, annotations = relayed
    differs = []
    if description != served_description and not (description is None and served_description == ""):
        differs.append("description")
    if (schema if schema is not None else {}) != served_schema:
        differs.append("inputSchema")
    if annotations != served_claims:
        differs.append("annotations")
    return differs


def definition_fingerprint(name: str, description: Any, input_schema: Any, annotations: Any) -> str:
    """T15: a SHA-256 of the whole definition (name, description, input schema, annotations)."""
    payload = json.dumps(
        {
            "name": name,
            "description": description,
            "inputSchema": input_schema,
            "annotations": annotations,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


# U1: the kind a subject argument is read as when the operator names none. The usual names
# of a shell tool's and a file tool's argument; anything else is text, matched as written.
_COMMAND_ARGUMENTS = frozenset(["command", "cmd", "commandline", "command_line", "shell_command", "script"])
_PATH_ARGUMENTS = frozenset(
    ["path", "file_path", "filepath", "file", "filename", "notebook_path", "directory", "dir", "target_path"]
)


def subject_kind_for(argument: str) -> SubjectKind:
    """The kind a subject argument named `argument` is read as unless the operator says."""
    name = argument.strip().lower()
    if name in _COMMAND_ARGUMENTS:
        return SubjectKind.COMMAND
    if name in _PATH_ARGUMENTS:
        return SubjectKind.PATH
    return SubjectKind.TEXT
