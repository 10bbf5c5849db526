"""Input and output shapes of the approvals runtime API (docs/api.md "Deciding skills",
"Asking a person: approval requests", "Clearing and revoking" and "Tools").

Input serializers are strict: an unknown field is a 400 naming it, so a typo can never
be read as "no session", and a field such as ``decision`` or ``approved`` can never
carry an answer in (S11). The views validate with `core.api.validate_flat`, which runs
the declared fields without building a serializer. Output serializers only document
the responses; the views build plain dicts, and every endpoint that returns an approval
request renders it with `request_body`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework import serializers

from aimon_admin.approvals import tool_policy
from aimon_admin.approvals.choices import (
    DecisionSource,
    GrantDecision,
    ItemScope,
    RequestKind,
    RequestStatus,
    SkillDecision,
    ToolCallSource,
)
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.core.api import NameField, OptionalIdField, StrictSerializer, validate_flat
from aimon_admin.registry.api.serializers import ToolNameField, json_problem
from aimon_admin.registry.choices import (
    DestructiveBehavior,
    GateReason,
    IdempotencyBehavior,
    SideEffectLevel,
    ToolDecision,
)

MAX_SKILLS = 100
MAX_REASON = 2000
MIN_TIMEOUT, MAX_TIMEOUT = 1, 86400
MAX_WAIT = 60
MAX_IDEMPOTENCY_KEY = 200
IDEMPOTENCY_HEADER = "Idempotency-Key"

DUPLICATE_SKILLS_MESSAGE = "Skill names must be unique; repeated: {names}."
NOT_BOOLEAN_MESSAGE = "Must be true or false."
WAIT_MESSAGE = f"Must be a whole number of seconds from 0 to {MAX_WAIT}."


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: a flag that widens a revoke is never guessed from "yes"."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError(NOT_BOOLEAN_MESSAGE)
        return data


# --- Inputs -----------------------------------------------------------------------------------


class CallerIn(StrictSerializer):
    """Who asks, in every decision and request body of either kind."""

    session_id = OptionalIdField(help_text="The session asking; null or absent for forks and scheduled runs.")
    invoking_session_id = OptionalIdField(
        help_text="The session that launched this run (a fork): its approvals and denials hold here."
    )
    turn_id = OptionalIdField(help_text="The turn, for answers that hold for one turn only.")
    principal = OptionalIdField(
        help_text="The end user's AIMON Admin username; fixed for a session when first seen."
    )


class AskIn(StrictSerializer):
    """What a request to a person adds to a decision's body, for either kind."""

    reason = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=MAX_REASON,
        trim_whitespace=False,
        default="",
        help_text="Shown to the approver.",
    )
    timeout_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=MIN_TIMEOUT,
        max_value=MAX_TIMEOUT,
        default=None,
        help_text="Seconds until the request expires; 300 when omitted.",
    )

    @staticmethod
    def validate_reason(value: str | None) -> str:
        # NUL and lone surrogates (which no database stores) are refused by the field itself.
        return value or ""


# --- Skills -----------------------------------------------------------------------------------


class SkillDecisionIn(CallerIn):
    """Which skills, for which session. Unknown fields are refused, naming them."""

    skills = serializers.ListField(
        child=NameField(),
        min_length=1,
        max_length=MAX_SKILLS,
        help_text=f"1-{MAX_SKILLS} skill names, each once.",
    )

    @staticmethod
    def validate_skills(skills: list[str]) -> list[str]:
        seen: set[str] = set()
        repeated: list[str] = []
        for skill in skills:
            if skill in seen and skill not in repeated:
                repeated.append(skill)
            seen.add(skill)
        if repeated:
            raise serializers.ValidationError(DUPLICATE_SKILLS_MESSAGE.format(names=", ".join(repeated)))
        return skills


class ApprovalRequestIn(AskIn, SkillDecisionIn):
    """The skills to ask a person about, as for a decision, plus what the approver sees."""


# --- Tools ------------------------------------------------------------------------------------


class ArgumentsField(serializers.DictField):
    """A tool call's arguments as the runtime will run them: a JSON object whose
    canonical form (RFC 8785) exists and is at most 64 KiB, that the database can hold."""

    @staticmethod
    def problem(data: Any) -> str | None:
        return tool_policy.arguments_problem(data) or json_problem(data)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        problem = self.problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data


class ToolCallIn(CallerIn):
    """A tool call: the tool, its server and its arguments, with who asks."""

    tool = ToolNameField()
    server = OptionalIdField(help_text="The MCP server's name; null or absent for a local tool.")
    arguments = ArgumentsField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The call's input, a JSON object (at most 64 KiB as canonical JSON): its subject "
        "argument is matched by argument rules and grants, its digest by an Allow this call, and an "
        "approver sees it in full.",
    )


class ToolDecisionIn(ToolCallIn):
    """A tool call to decide. Only `tool` is required; with `tool`, `server` and `session_id`
    alone the answer is the gate's, as it always was. Without a session (and no
    invoking_session_id) the call is unattended, so ASK becomes DENY."""

    replay = StrictBooleanField(
        required=False,
        default=False,
        help_text="A retry or rewake replay: a NON_IDEMPOTENT tool's replay is never answered by an "
        "earlier Allow this call.",
    )
    approval_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The tool approval request answered Allow this call: ALLOW once, for the same "
        "arguments in the same session.",
    )


_PLAIN_DECISION_FIELDS = frozenset(
    ("tool", "server", "session_id", "invoking_session_id", "turn_id", "principal")
)
_DECISION_DEFAULTS = {
    "invoking_session_id": None,
    "turn_id": None,
    "principal": None,
    "arguments": None,
    "replay": False,
    "approval_id": None,
}
_NAME_MAX = 200


def _plain_name(value: Any) -> bool:
    # Stricter than the fields (isprintable() is false for every control character and
    # surrogate, and for some rarer characters too): anything it refuses goes the slow way.
    return type(value) is str and 0 < len(value) <= _NAME_MAX and value.isprintable()


def tool_decision_input(data: Any) -> dict[str, Any]:
    """A tool decision request, validated: the common cases (names and ids, and the call's
    arguments) checked directly, everything else by the fields themselves, so every error is
    exactly the serializer's (the arguments' checks are the field's own)."""
    if type(data) is dict and data.keys() <= _PLAIN_DECISION_FIELDS | {"arguments"}:
        arguments = data.get("arguments")
        if (
            _plain_name(data.get("tool"))
            and all(data.get(name) is None or _plain_name(data[name]) for name in _PLAIN_DECISION_FIELDS)
            and (arguments is None or (type(arguments) is dict and not ArgumentsField.problem(arguments)))
        ):
            return {**_DECISION_DEFAULTS, **{name: data.get(name) for name in _PLAIN_DECISION_FIELDS}, **data}
    return validate_flat(ToolDecisionIn, data)


class ToolApprovalRequestIn(AskIn, ToolCallIn):
    """One tool call to ask a person about, with its exact arguments."""


class EmptyIn(StrictSerializer):
    """A body with no fields: absent, `{}`, nothing else."""


class SessionRevokeIn(StrictSerializer):
    """What a revoke reaches; the body may be absent (`agent` false)."""

    agent = StrictBooleanField(
        required=False,
        default=False,
        help_text="Also revoke the runtime's agent-wide approvals.",
    )


# --- Outputs (documentation; the views build plain dicts) --------------------------------------


class NamedEnumField(serializers.ChoiceField):
    """An output enum documented as a named schema component (`enum_name`).

    The same property names (`decision`, `source`, `status`) carry different value sets
    across the API; naming each set explicitly keeps the generated schema free of enum
    naming collisions without a settings entry per enum.
    """

    def __init__(self, enum: type, enum_name: str, *, only: Any = None, **kwargs: Any) -> None:
        self.enum = enum
        self.enum_name = enum_name
        self.values = [member.value for member in (only if only is not None else enum)]
        super().__init__([(value, enum(value).label) for value in self.values], **kwargs)


class NamedEnumFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "aimon_admin.approvals.api.serializers.NamedEnumField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        field: NamedEnumField = self.target
        component = ResolvedComponent(
            name=field.enum_name,
            type=ResolvedComponent.SCHEMA,
            object=field.enum_name,
            schema={"type": "string", "enum": list(field.values)},
        )
        auto_schema.registry.register_on_missing(component)
        if field.allow_null:
            return {"allOf": [component.ref], "nullable": True}
        return component.ref


class SkillDecisionOut(serializers.Serializer):
    skill = serializers.CharField()
    decision = NamedEnumField(SkillDecision, "SkillDecisionEnum")
    source = NamedEnumField(DecisionSource, "DecisionSourceEnum", help_text="The layer that answered.")


class SkillDecisionsOut(serializers.Serializer):
    decisions = SkillDecisionOut(many=True)


class ApprovalItemOut(serializers.Serializer):
    skill = serializers.CharField()
    decision = NamedEnumField(GrantDecision, "ApprovalItemDecisionEnum", allow_null=True)
    scope = NamedEnumField(
        ItemScope,
        "ApprovalItemScopeEnum",
        only=[ItemScope.TURN, ItemScope.SESSION, ItemScope.AGENT, ItemScope.REQUEST],
        allow_null=True,
        help_text="Where a person's answer holds; null while unanswered and for items the chain "
        "decided at creation. REQUEST (with DENY): *Deny this request*, for this request only; "
        "nothing was stored in any grant store.",
    )
    source = NamedEnumField(
        DecisionSource,
        "DecisionSourceEnum",
        required=False,
        help_text="Present only on items the chain already decided when the request was opened.",
    )


class RequestOut(serializers.Serializer):
    """What a request of either kind says about itself."""

    id = serializers.UUIDField()
    status = NamedEnumField(RequestStatus, "ApprovalRequestStatusEnum")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    answered_by = serializers.CharField(allow_null=True, help_text="Username of whoever answered.")
    answered_at = serializers.DateTimeField(allow_null=True)


class ApprovalRequestOut(RequestOut):
    items = ApprovalItemOut(many=True)


class ToolRuleRefOut(serializers.Serializer):
    id = serializers.IntegerField()
    pattern = serializers.CharField(help_text="The rule as written: Tool(pattern), e.g. Bash(git push:*).")


class ToolDecisionOut(serializers.Serializer):
    decision = serializers.ChoiceField(ToolDecision.choices)
    reason = serializers.ChoiceField(GateReason.choices)
    source = NamedEnumField(
        ToolCallSource, "ToolCallSourceEnum", help_text="The layer of the chain that answered."
    )
    side_effect_level = serializers.ChoiceField(SideEffectLevel.choices)
    destructive_behavior = serializers.ChoiceField(DestructiveBehavior.choices)
    idempotency_behavior = serializers.ChoiceField(
        IdempotencyBehavior.choices, help_text="Retry advice only; no gate reads it."
    )
    registered = serializers.BooleanField(
        help_text="False: nobody registered this tool, so it counts as MUTATING + DESTRUCTIVE."
    )
    rule = ToolRuleRefOut(required=False, help_text="Present when an operator's rule decided.")
    note = serializers.CharField(
        required=False,
        help_text="Present when something about the call is worth saying: its subject argument absent "
        "or not a string (so only whole-tool rules and grants apply), an approval_id not used.",
    )


class ToolApprovalRequestOut(RequestOut):
    tool = serializers.CharField()
    server = serializers.CharField(allow_null=True, help_text="Null for the runtime's own tool.")
    subject = serializers.CharField(
        allow_null=True, help_text="The value of the tool's subject argument; null when there is none."
    )
    arguments_digest = serializers.CharField(
        help_text="`sha256:` and the hex SHA-256 of the arguments' RFC 8785 canonical JSON."
    )
    decision = NamedEnumField(GrantDecision, "ApprovalItemDecisionEnum", allow_null=True)
    scope = NamedEnumField(
        ItemScope,
        "ToolApprovalScopeEnum",
        only=[ItemScope.CALL, ItemScope.TURN, ItemScope.SESSION, ItemScope.AGENT, ItemScope.REQUEST],
        allow_null=True,
        help_text="Where a person's answer holds: CALL (Allow this call: this call, once), SESSION "
        "or AGENT; null while unanswered and when the chain decided at creation.",
    )
    pattern = serializers.CharField(
        allow_null=True,
        help_text="The subject pattern of a session or agent answer; null for the whole tool, and for a "
        "call answer or none.",
    )
    source = NamedEnumField(
        ToolCallSource,
        "ToolCallSourceEnum",
        required=False,
        help_text="Present only when the chain decided the call when the request was opened.",
    )


class SessionClearOut(serializers.Serializer):
    removed = serializers.IntegerField(help_text="Turn and session approvals (and denials) removed.")


class SessionRevokeOut(serializers.Serializer):
    removed_session = serializers.IntegerField()
    removed_agent = serializers.IntegerField()


# --- Rendering --------------------------------------------------------------------------------


def iso(value: dt.datetime | None) -> str | None:
    """The API's timestamps: ISO 8601 in UTC with a `Z`, as DRF writes them."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def request_body(request: ApprovalRequest) -> dict[str, Any]:
    """A request of either kind, as every endpoint returns it (docs/api.md "Asking a person:
    approval requests" and "Tools").

    Load it with ``select_related("answered_by")`` and ``prefetch_related("items")`` so
    rendering costs no further query.
    """
    body: dict[str, Any] = {
        "id": str(request.pk),
        "status": request.status,
        "created_at": iso(request.created_at),
        "expires_at": iso(request.expires_at),
    }
    items = request.items.all()
    if request.kind == RequestKind.TOOL:
        (item,) = items
        scope = item.scope or None
        body |= {
            "tool": request.tool,
            "server": request.server or None,
            "subject": request.subject,
            "arguments_digest": request.arguments_digest,
            "decision": item.decision or None,
            "scope": scope,
            "pattern": (item.pattern or None)
            if scope in (ItemScope.SESSION, ItemScope.AGENT, ItemScope.TURN)
            else None,
        }
    else:
        body["items"] = [
            {"skill": item.skill, "decision": item.decision or None, "scope": item.scope or None}
            | ({"source": item.source} if item.source else {})
            for item in items
        ]
    answered_by = request.answered_by
    body["answered_by"] = answered_by.get_username() if answered_by is not None else None
    body["answered_at"] = iso(request.answered_at)
    if request.kind == RequestKind.TOOL and item.source:
        body["source"] = item.source
    return body
