"""The OpenID AuthZEN Authorization API 1.0 shapes of a tool decision (docs/api.md
"AuthZEN: the tool decision for gateways").

A tool call is an access evaluation: `subject` the end user (`{"type": "user", "id":
principal}`), `resource` the tool (`{"type": "tool", "id": tool, "properties": {"server",
"arguments"}}`), `action` `{"name": "call"}`, `context` the sessions and turn. The fields are
the tool decision's own (`ToolDecisionIn`): the same names, lengths and argument checks.

Every object is strict, as everywhere in this API: a member it does not know is a 400 naming
it, never ignored. The specification asks receivers to ignore unknown members for forward
compatibility; here a misspelt `session_id` read as absent would make an attended call
unattended, where pre-approvals answer (U5), so the house rule wins.

Input serializers validate and document; the views build the answers as plain dicts, which
the output serializers only document.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import serializers

from aimon_admin.approvals.api.serializers import (
    ArgumentsField,
    NamedEnumField,
    StrictBooleanField,
    ToolRuleRefOut,
)
from aimon_admin.approvals.choices import ToolCallSource
from aimon_admin.core.api import (
    INVALID_CHOICE_MESSAGE,
    NameField,
    OptionalIdField,
    StrictSerializer,
)
from aimon_admin.registry.api.serializers import ToolNameField
from aimon_admin.registry.choices import GateReason

MAX_EVALUATIONS = 100


class SubjectType(models.TextChoices):
    USER = "user", "An end user"


class ResourceType(models.TextChoices):
    TOOL = "tool", "A tool"


class ActionName(models.TextChoices):
    CALL = "call", "Call the tool"


class EvaluationsSemantic(models.TextChoices):
    """How a batch runs (the specification's `options.evaluations_semantic`)."""

    EXECUTE_ALL = "execute_all", "Every evaluation, every answer"
    DENY_ON_FIRST_DENY = "deny_on_first_deny", "Stop after the first false"
    PERMIT_ON_FIRST_PERMIT = "permit_on_first_permit", "Stop after the first true"


def _constant(enum: type[models.TextChoices], name: str, **kwargs: Any) -> NamedEnumField:
    """A string member with fixed values, documented as the named enum `name`; a value
    outside them is refused naming the allowed ones."""
    allowed = ", ".join(member.value for member in enum)
    message = INVALID_CHOICE_MESSAGE.replace("{allowed}", allowed)
    return NamedEnumField(enum, name, error_messages={"invalid_choice": message}, **kwargs)


# --- Requests ------------------------------------------------------------------------------------


class AuthZenSubjectIn(StrictSerializer):
    """Who the call is for: the end user, by AIMON Admin username."""

    type = _constant(SubjectType, "AuthZenSubjectTypeEnum")
    id = NameField(help_text="The end user's AIMON Admin username (the principal).")


class AuthZenResourcePropertiesIn(StrictSerializer):
    """Where the tool comes from and what it is called with."""

    server = OptionalIdField(help_text="The MCP server's name; null or absent for the runtime's own tool.")
    arguments = ArgumentsField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The call's input, a JSON object (at most 64 KiB as canonical JSON): its subject "
        "argument is matched by argument rules and grants; its digest by an Allow this call.",
    )


class AuthZenResourceIn(StrictSerializer):
    """The tool to be called."""

    type = _constant(ResourceType, "AuthZenResourceTypeEnum")
    id = ToolNameField(help_text="The tool's name.")
    properties = AuthZenResourcePropertiesIn(required=False, allow_null=True)


class AuthZenActionIn(StrictSerializer):
    """Always a call."""

    name = _constant(ActionName, "AuthZenActionNameEnum")


class AuthZenContextIn(StrictSerializer):
    """The sessions and turn the call belongs to, and a call approval to use."""

    session_id = OptionalIdField(
        help_text="Null or absent (with no invoking_session_id): unattended, so a question is false."
    )
    invoking_session_id = OptionalIdField(
        help_text="The session that launched this run (a fork): its approvals and denials hold here."
    )
    turn_id = OptionalIdField(help_text="The turn, for approvals that hold for one turn only.")
    approval_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The tool approval request answered Allow this call: true once, for the same "
        "arguments in the same session.",
    )
    replay = StrictBooleanField(
        required=False,
        default=False,
        help_text="A retry or rewake replay: a NON_IDEMPOTENT tool's replay is never answered by an "
        "earlier Allow this call.",
    )


class AuthZenEvaluationIn(StrictSerializer):
    """One tool call to decide: POST /access/v1/evaluation."""

    subject = AuthZenSubjectIn()
    resource = AuthZenResourceIn()
    action = AuthZenActionIn()
    context = AuthZenContextIn(required=False, allow_null=True)


class AuthZenEvaluationItemIn(StrictSerializer):
    """One evaluation of a batch: a member it leaves out is the batch's top-level one."""

    subject = AuthZenSubjectIn(required=False, allow_null=True)
    resource = AuthZenResourceIn(required=False, allow_null=True)
    action = AuthZenActionIn(required=False, allow_null=True)
    context = AuthZenContextIn(required=False, allow_null=True)


class AuthZenOptionsIn(StrictSerializer):
    """How a batch runs."""

    evaluations_semantic = _constant(
        EvaluationsSemantic,
        "AuthZenEvaluationsSemanticEnum",
        required=False,
        allow_null=True,
        default=None,
        help_text="execute_all (the default): every evaluation is answered; deny_on_first_deny: "
        "the answers stop after the first false; permit_on_first_permit: after the first true.",
    )


class AuthZenEvaluationsIn(AuthZenEvaluationItemIn):
    """Several tool calls: POST /access/v1/evaluations. The top-level members are defaults
    for each evaluation; without evaluations it is one evaluation of them."""

    options = AuthZenOptionsIn(required=False, allow_null=True)
    evaluations = serializers.ListField(
        child=AuthZenEvaluationItemIn(),
        required=False,
        allow_null=True,
        max_length=MAX_EVALUATIONS,
        help_text=f"At most {MAX_EVALUATIONS}; answered in this order.",
    )


# --- Answers -------------------------------------------------------------------------------------


class AuthZenErrorOut(serializers.Serializer):
    """Why one evaluation of a batch could not be made."""

    status = serializers.IntegerField(help_text="The status the call alone would have been answered with.")
    message = serializers.CharField()


class AuthZenDecisionContextOut(serializers.Serializer):
    """Why a decision is false."""

    ask = serializers.BooleanField(
        required=False,
        help_text="True: the tool decision is ASK, a person may allow the call (open a tool approval "
        "request). False: DENY. Absent only beside `error`.",
    )
    reason = serializers.ChoiceField(GateReason.choices, required=False)
    source = NamedEnumField(
        ToolCallSource,
        "ToolCallSourceEnum",
        required=False,
        help_text="The layer of the chain that answered.",
    )
    rule = ToolRuleRefOut(required=False, help_text="Present when an operator's rule decided.")
    note = serializers.CharField(
        required=False,
        help_text="Present when something about the call is worth saying (a subject argument absent "
        "or not a string, an approval_id not used).",
    )
    error = AuthZenErrorOut(
        required=False,
        help_text="In a batch only: this evaluation could not be made (a session's principal "
        "conflict, 409; an unknown invoking session, 400). It counts as false.",
    )


class AuthZenDecisionOut(serializers.Serializer):
    """One decision: true only for ALLOW."""

    decision = serializers.BooleanField(help_text="True only when the tool decision is ALLOW.")
    context = AuthZenDecisionContextOut(
        required=False, help_text="Absent when the decision is true; says why when it is false."
    )


class AuthZenEvaluationsOut(serializers.Serializer):
    """A batch's decisions, in the order of its evaluations."""

    evaluations = AuthZenDecisionOut(many=True)


class AuthZenConfigurationOut(serializers.Serializer):
    """The policy decision point's metadata (the specification's discovery document)."""

    policy_decision_point = serializers.URLField(
        help_text="This server's address as the document was fetched: scheme and host."
    )
    access_evaluation_endpoint = serializers.URLField()
    access_evaluations_endpoint = serializers.URLField()
