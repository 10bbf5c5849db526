"""The product's answers as typed, frozen values (G1). Each `*_from` reads one JSON body and
refuses anything that is not the documented shape with a ProtocolError naming the field: an
unknown enum value is never guessed at (a decision the client cannot read allows nothing)."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aimon_client.errors import BAD_SHAPE, ProtocolError


class Decision(enum.StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"
    ASK = "ASK"


class Status(enum.StrEnum):
    PENDING = "PENDING"
    ANSWERED = "ANSWERED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"


class Scope(enum.StrEnum):
    """Where a person's answer holds: CALL (this call, these arguments, once; U4), TURN,
    SESSION, AGENT, or REQUEST (a Deny for this request only; S13)."""

    CALL = "CALL"
    TURN = "TURN"
    SESSION = "SESSION"
    AGENT = "AGENT"
    REQUEST = "REQUEST"


class SkillSource(enum.StrEnum):
    TURN = "TURN"
    SESSION = "SESSION"
    INVOKING_SESSION = "INVOKING_SESSION"
    AGENT = "AGENT"
    RULE = "RULE"
    DEFAULT = "DEFAULT"


class ToolSource(enum.StrEnum):
    """The layer of the tool chain that answered."""

    CEILING = "CEILING"
    RULE = "RULE"
    CALL = "CALL"
    TURN = "TURN"
    SESSION = "SESSION"
    INVOKING_SESSION = "INVOKING_SESSION"
    AGENT = "AGENT"
    GATE = "GATE"


class ToolReason(enum.StrEnum):
    ABOVE_CEILING = "ABOVE_CEILING"
    READ_ONLY_EXEMPT = "READ_ONLY_EXEMPT"
    DESTRUCTIVE_ALWAYS_ASKS = "DESTRUCTIVE_ALWAYS_ASKS"
    EXEMPT_AT_OR_BELOW = "EXEMPT_AT_OR_BELOW"
    NOT_EXEMPT = "NOT_EXEMPT"
    UNATTENDED_NO_CHANNEL = "UNATTENDED_NO_CHANNEL"
    DENIED_BY_RULE = "DENIED_BY_RULE"
    ALLOWED_BY_RULE = "ALLOWED_BY_RULE"
    ASKED_BY_RULE = "ASKED_BY_RULE"
    PRE_APPROVED = "PRE_APPROVED"
    GRANTED = "GRANTED"
    DENIED = "DENIED"


# What each reason means, in words a person at the agent's screen can act on.
REASON_WORDS = {
    ToolReason.ABOVE_CEILING: "the tool is above this runtime's ceiling (T6)",
    ToolReason.READ_ONLY_EXEMPT: "the tool is read-only and never asks",
    ToolReason.DESTRUCTIVE_ALWAYS_ASKS: "the tool is destructive, so a person must allow each call (T8)",
    ToolReason.EXEMPT_AT_OR_BELOW: "the tool is at or below this runtime's gate threshold",
    ToolReason.NOT_EXEMPT: "the tool is above this runtime's gate threshold, so a person must allow it",
    ToolReason.UNATTENDED_NO_CHANNEL: "nobody can be asked for an unattended call",
    ToolReason.DENIED_BY_RULE: "an operator's rule denies it",
    ToolReason.ALLOWED_BY_RULE: "an operator's rule allows it",
    ToolReason.ASKED_BY_RULE: "an operator's rule says to ask a person",
    ToolReason.PRE_APPROVED: "a pre-approval for unattended calls allows it",
    ToolReason.GRANTED: "a person allowed it",
    ToolReason.DENIED: "a person denied it",
}


class Level(enum.StrEnum):
    READ_ONLY = "READ_ONLY"
    MUTATING = "MUTATING"


class Destructive(enum.StrEnum):
    NON_DESTRUCTIVE = "NON_DESTRUCTIVE"
    DESTRUCTIVE = "DESTRUCTIVE"


class Idempotency(enum.StrEnum):
    IDEMPOTENT = "IDEMPOTENT"
    NON_IDEMPOTENT = "NON_IDEMPOTENT"


class Transport(enum.StrEnum):
    STDIO = "STDIO"
    STREAMABLE_HTTP = "STREAMABLE_HTTP"


class Trust(enum.StrEnum):
    IGNORE = "IGNORE"
    TRUST = "TRUST"


class Origin(enum.StrEnum):
    LOCAL = "LOCAL"
    MCP = "MCP"


@dataclass(frozen=True)
class SkillDecision:
    skill: str
    decision: Decision
    source: SkillSource


@dataclass(frozen=True)
class RuleRef:
    id: int
    pattern: str


@dataclass(frozen=True)
class ToolDecision:
    decision: Decision
    reason: ToolReason
    source: ToolSource
    side_effect_level: Level
    destructive_behavior: Destructive
    idempotency_behavior: Idempotency
    registered: bool
    rule: RuleRef | None = None
    note: str | None = None

    def in_words(self) -> str:
        """Why, in a sentence: the reason's words, the rule that decided, the product's note."""
        words = REASON_WORDS[self.reason]
        if self.rule is not None:
            words += f" ({self.rule.pattern})"
        if self.note:
            words += f"; {self.note}"
        return words


@dataclass(frozen=True)
class ToolRequest:
    """A tool approval request (U2-U4). `decision` and `scope` are set once answered; `scope`
    CALL means *Allow this call*: ask tool_decision again with `approval_id` (U4)."""

    id: str
    status: Status
    created_at: dt.datetime
    expires_at: dt.datetime
    tool: str
    server: str | None
    subject: str | None
    arguments_digest: str
    decision: Decision | None
    scope: Scope | None
    pattern: str | None
    answered_by: str | None
    answered_at: dt.datetime | None
    source: ToolSource | None = None

    @property
    def pending(self) -> bool:
        return self.status == Status.PENDING


@dataclass(frozen=True)
class SkillItem:
    skill: str
    decision: Decision | None
    scope: Scope | None
    source: SkillSource | None = None


@dataclass(frozen=True)
class SkillRequest:
    id: str
    status: Status
    created_at: dt.datetime
    expires_at: dt.datetime
    items: tuple[SkillItem, ...]
    answered_by: str | None
    answered_at: dt.datetime | None

    @property
    def pending(self) -> bool:
        return self.status == Status.PENDING


@dataclass(frozen=True)
class Revoked:
    removed_session: int
    removed_agent: int


@dataclass(frozen=True)
class ToolInfo:
    name: str
    source: Origin
    server: str | None
    side_effect_level: Level
    destructive_behavior: Destructive
    idempotency_behavior: Idempotency
    read_only: bool
    description: str
    input_schema: dict[str, Any]
    # T15: the server's latest sync claims less risk than was accepted; held at the worst axes
    # until an operator reviews it. An enforcement point leaves it out of what it offers.
    held_for_review: bool


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    transport: Transport
    command: str
    args: tuple[str, ...]
    url: str
    timeout_seconds: int
    annotation_trust: Trust


# --- Reading the JSON ----------------------------------------------------------------------------

T = TypeVar("T")
E = TypeVar("E", bound=enum.StrEnum)
_MISSING = object()


class Reader:
    """Reads one JSON object of an answer to `what`; every problem is a ProtocolError naming the
    field."""

    def __init__(self, body: Any, what: str) -> None:
        self.what = what
        if not isinstance(body, dict):
            self.fail(f"expected a JSON object, got {type(body).__name__}")
        self.body: dict[str, Any] = body

    def fail(self, problem: str) -> None:
        raise ProtocolError(BAD_SHAPE.format(what=self.what, problem=problem))

    def _get(self, name: str, optional: bool) -> Any:
        value = self.body.get(name, _MISSING)
        if value is _MISSING:
            if optional:
                return None
            self.fail(f"`{name}` is missing")
        return value

    def typed(self, name: str, kind: type, *, null: bool = False, optional: bool = False) -> Any:
        value = self._get(name, optional)
        if value is None and (null or optional):
            return None
        # bool is an int in Python; an integer field never takes true/false.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.fail(f"`{name}` is {value!r}, not the documented type")
        return value

    def text(self, name: str, *, null: bool = False, optional: bool = False) -> str | None:
        return self.typed(name, str, null=null, optional=optional)

    def enum(self, name: str, kind: type[E], *, null: bool = False, optional: bool = False) -> E | None:
        value = self._get(name, optional)
        if value is None and (null or optional):
            return None
        try:
            return kind(value)
        except ValueError:
            allowed = ", ".join(member.value for member in kind)
            self.fail(f"`{name}` is {value!r}, none of {allowed}")
        raise AssertionError("unreachable")  # fail() raised

    def when(self, name: str, *, null: bool = False) -> dt.datetime | None:
        value = self.text(name, null=null)
        if value is None:
            return None
        try:
            return dt.datetime.fromisoformat(value)
        except ValueError:
            self.fail(f"`{name}` is {value!r}, not an ISO 8601 time")
        raise AssertionError("unreachable")


def listed(body: Any, what: str, read: Callable[[Any, str], T]) -> list[T]:
    if not isinstance(body, list):
        raise ProtocolError(BAD_SHAPE.format(what=what, problem="expected a JSON array"))
    return [read(item, what) for item in body]


def skill_decisions_from(body: Any, what: str) -> list[SkillDecision]:
    decisions = Reader(body, what).typed("decisions", list)
    out = []
    for item in decisions:
        r = Reader(item, what)
        decision, source = r.enum("decision", Decision), r.enum("source", SkillSource)
        out.append(SkillDecision(r.text("skill"), decision, source))
    return out


def tool_decision_from(body: Any, what: str) -> ToolDecision:
    r = Reader(body, what)
    rule = r.typed("rule", dict, optional=True)
    rule_ref = None
    if rule is not None:
        rr = Reader(rule, what)
        rule_ref = RuleRef(rr.typed("id", int), rr.text("pattern"))
    return ToolDecision(
        decision=r.enum("decision", Decision),
        reason=r.enum("reason", ToolReason),
        source=r.enum("source", ToolSource),
        side_effect_level=r.enum("side_effect_level", Level),
        destructive_behavior=r.enum("destructive_behavior", Destructive),
        idempotency_behavior=r.enum("idempotency_behavior", Idempotency),
        registered=r.typed("registered", bool),
        rule=rule_ref,
        note=r.text("note", optional=True),
    )


def tool_request_from(body: Any, what: str) -> ToolRequest:
    r = Reader(body, what)
    decision = r.enum("decision", Decision, null=True)
    if decision == Decision.ASK:
        r.fail("`decision` of an answered tool request is ASK")
    return ToolRequest(
        id=r.text("id"),
        status=r.enum("status", Status),
        created_at=r.when("created_at"),
        expires_at=r.when("expires_at"),
        tool=r.text("tool"),
        server=r.text("server", null=True),
        subject=r.text("subject", null=True),
        arguments_digest=r.text("arguments_digest"),
        decision=decision,
        scope=r.enum("scope", Scope, null=True),
        pattern=r.text("pattern", null=True),
        answered_by=r.text("answered_by", null=True),
        answered_at=r.when("answered_at", null=True),
        source=r.enum("source", ToolSource, optional=True),
    )


def skill_request_from(body: Any, what: str) -> SkillRequest:
    r = Reader(body, what)
    items = []
    for item in r.typed("items", list):
        ir = Reader(item, what)
        items.append(
            SkillItem(
                skill=ir.text("skill"),
                decision=ir.enum("decision", Decision, null=True),
                scope=ir.enum("scope", Scope, null=True),
                source=ir.enum("source", SkillSource, optional=True),
            )
        )
    return SkillRequest(
        id=r.text("id"),
        status=r.enum("status", Status),
        created_at=r.when("created_at"),
        expires_at=r.when("expires_at"),
        items=tuple(items),
        answered_by=r.text("answered_by", null=True),
        answered_at=r.when("answered_at", null=True),
    )


def tool_info_from(body: Any, what: str) -> ToolInfo:
    r = Reader(body, what)
    return ToolInfo(
        name=r.text("name"),
        source=r.enum("source", Origin),
        server=r.text("server", null=True),
        side_effect_level=r.enum("side_effect_level", Level),
        destructive_behavior=r.enum("destructive_behavior", Destructive),
        idempotency_behavior=r.enum("idempotency_behavior", Idempotency),
        read_only=r.typed("read_only", bool),
        description=r.text("description"),
        input_schema=r.typed("input_schema", dict),
        held_for_review=r.typed("held_for_review", bool),
    )


def mcp_server_from(body: Any, what: str) -> McpServerConfig:
    r = Reader(body, what)
    args = r.typed("args", list)
    if not all(isinstance(arg, str) for arg in args):
        r.fail("`args` holds something other than strings")
    return McpServerConfig(
        name=r.text("name"),
        transport=r.enum("transport", Transport),
        command=r.text("command"),
        args=tuple(args),
        url=r.text("url"),
        timeout_seconds=r.typed("timeout_seconds", int),
        annotation_trust=r.enum("annotation_trust", Trust),
    )


def revoked_from(body: Any, what: str) -> Revoked:
    r = Reader(body, what)
    return Revoked(r.typed("removed_session", int), r.typed("removed_agent", int))
