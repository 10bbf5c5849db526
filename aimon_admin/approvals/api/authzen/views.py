"""The tool decision as an OpenID AuthZEN Authorization API 1.0 policy decision point
(docs/api.md "AuthZEN: the tool decision for gateways"): `POST /access/v1/evaluation`,
`POST /access/v1/evaluations` and the discovery document `GET /.well-known/authzen-configuration`.

Each evaluation is one call of `services.tool_call_decide`, as `POST /api/v1/tool-decisions`
makes it: the same chain, the same sessions (created when first seen, a principal fixed, S12;
an unknown invoking session refused, S3), the same argument checks. Only the wire differs:
`{"decision": true}` for ALLOW alone; ASK and DENY are false with `context.ask` and
`context.reason` saying which and why. Same token, same errors as the rest of the API.

Choices where the specification leaves them open:

* An ALLOW carries no `context`: a PEP may reject a permit whose context it does not
  understand, and an ALLOW needs no explanation to be enforced.
* A batch is validated whole before anything is decided: a bad member anywhere is a 400 for
  the whole payload, naming it by its path (`evaluations[2].resource.type`). An evaluation
  the chain cannot decide (another principal for a session, 409; an invoking session never
  seen, 400) is answered in place, false with `context.error`, since earlier evaluations may
  already have used an approval; under `deny_on_first_deny` it stops the batch like a deny.
* A top-level member is the default for each evaluation that leaves it out (or sends null);
  an evaluation's own member replaces it whole (a `context` is never merged key by key).
* At most `MAX_EVALUATIONS` evaluations a batch, answered one after another, in order.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import exceptions
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from aimon_admin.approvals import services
from aimon_admin.approvals.api.authzen.serializers import (
    MAX_EVALUATIONS,
    AuthZenConfigurationOut,
    AuthZenDecisionOut,
    AuthZenEvaluationIn,
    AuthZenEvaluationsIn,
    AuthZenEvaluationsOut,
    EvaluationsSemantic,
)
from aimon_admin.approvals.api.common import ERRORS, Conflict
from aimon_admin.core.api import StrictSerializer, validate_flat
from aimon_admin.registry.choices import ToolDecision
from aimon_admin.runtimes.models import AgentRuntime

ENTITIES = ("subject", "resource", "action", "context")
REQUIRED_ENTITIES = ("subject", "resource", "action")
MISSING_IN_EVALUATION_MESSAGE = "Required: in this evaluation, or at the top level as its default."
MISSING_WITHOUT_EVALUATIONS_MESSAGE = (
    "Required when evaluations is absent or empty (the body is then one evaluation)."
)
# How long a PEP may keep the discovery document: it changes only with a new release.
CONFIGURATION_MAX_AGE = 3600

_TAGS = ["AuthZEN"]
_ERRORS_400 = OpenApiResponse(
    description="The body is not an evaluation: `fields` names each offending member by its path "
    "(`resource.type`, `evaluations[1].context.session_id`). Nothing was decided."
)


# --- Input ---------------------------------------------------------------------------------------


def _dotted(detail: Any, path: str, out: dict[str, list[str]]) -> dict[str, list[str]]:
    """DRF's nested errors as one flat map from each member's path to its messages."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, int):
                inner = f"{path}[{key}]"
            elif key == "non_field_errors":
                inner = path or key
            else:
                inner = f"{path}.{key}" if path else str(key)
            _dotted(value, inner, out)
    elif isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        for index, item in enumerate(detail):
            if item:
                _dotted(item, f"{path}[{index}]", out)
    elif isinstance(detail, list):
        out.setdefault(path, []).extend(str(item) for item in detail)
    else:
        out.setdefault(path, []).append(str(detail))
    return out


def _validated(serializer_class: type[StrictSerializer], data: Any) -> dict[str, Any]:
    try:
        return validate_flat(serializer_class, data)
    except exceptions.ValidationError as exc:
        raise exceptions.ValidationError(_dotted(exc.detail, "", {})) from exc


def _evaluations_of(data: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """Each evaluation of a validated batch with the top-level defaults in place, and whether
    the body was a batch at all (no evaluations: the body itself is one evaluation)."""
    defaults = {entity: data.get(entity) for entity in ENTITIES}
    items = data.get("evaluations") or []
    merged = [
        {entity: item[entity] if item.get(entity) is not None else defaults[entity] for entity in ENTITIES}
        for item in items
    ] or [defaults]
    errors: dict[str, list[str]] = {}
    for index, evaluation in enumerate(merged):
        for entity in REQUIRED_ENTITIES:
            if evaluation[entity] is None and items:
                errors[f"evaluations[{index}].{entity}"] = [MISSING_IN_EVALUATION_MESSAGE]
            elif evaluation[entity] is None:
                errors[entity] = [MISSING_WITHOUT_EVALUATIONS_MESSAGE]
    if errors:
        raise exceptions.ValidationError(errors)
    return merged, bool(items)


# --- The decision --------------------------------------------------------------------------------


def decision_body(decided: services.ToolCallDecision) -> dict[str, Any]:
    """A tool decision as an AuthZEN Decision: true for ALLOW alone, with no context; false
    otherwise, with `ask` (ASK: a person may allow it) and the reason and layer."""
    verdict = decided.verdict
    if verdict.decision == ToolDecision.ALLOW:
        return {"decision": True}
    context: dict[str, Any] = {
        "ask": verdict.decision == ToolDecision.ASK,
        "reason": verdict.reason.value,
        "source": verdict.source.value,
    }
    if verdict.rule is not None:
        context["rule"] = {"id": verdict.rule.id, "pattern": verdict.rule.text}
    if decided.note:
        context["note"] = decided.note
    return {"decision": False, "context": context}


def _answer(runtime: AgentRuntime, evaluation: dict[str, Any], *, in_batch: bool = False) -> dict[str, Any]:
    """One evaluation, decided by the tool chain exactly as a tool decision is. A refusal is
    the call's 409 or 400 alone; in a batch it is answered in place, false with `context.error`."""
    resource = evaluation["resource"]
    properties = resource.get("properties") or {}
    context = evaluation.get("context") or {}  # the sessions, the turn, an approval: ToolCall's names
    call = services.ToolCall(
        tool=resource["id"],
        server=properties.get("server"),
        principal=evaluation["subject"]["id"],
        arguments=properties.get("arguments"),
        **context,
    )
    try:
        return decision_body(services.tool_call_decide(runtime, call))
    except services.PrincipalConflictError as exc:
        if not in_batch:
            raise Conflict(str(exc)) from exc
        status, message = 409, str(exc)
    except services.UnknownInvokingSessionError as exc:
        if not in_batch:
            raise exceptions.ValidationError({f"context.{exc.field}": [str(exc)]}) from exc
        status, message = 400, str(exc)
    return {"decision": False, "context": {"error": {"status": status, "message": message}}}


# --- POST /access/v1/evaluation --------------------------------------------------------------------

_CHAIN = (
    "Decided by the tool chain, exactly as `POST /api/v1/tool-decisions` decides: `subject.id` "
    "is the principal, `resource.id` the tool, `resource.properties` its server and arguments, "
    "`context` the sessions and turn. `decision` is true only when the tool decision is ALLOW; "
    "ASK and DENY are false, with `context.ask` (true for ASK: a person may allow it through a tool "
    "approval request) and `context.reason`. A call with no `session_id` and no "
    "`invoking_session_id` is unattended: a question is false unless a pre-approval answers it"
    ". Unknown members are refused by name, never ignored."
)


@extend_schema(
    operation_id="authzen_evaluation",
    tags=_TAGS,
    summary="AuthZEN: may this runtime run this tool now?",
    description=_CHAIN,
    request=AuthZenEvaluationIn,
    responses={200: AuthZenDecisionOut, 400: _ERRORS_400, **{k: ERRORS[k] for k in (401, 409)}},
)
@api_view(["POST"])
def evaluation(request: Request) -> Response:
    data = _validated(AuthZenEvaluationIn, request.data)
    return Response(_answer(request.user.runtime, data))


# --- POST /access/v1/evaluations -------------------------------------------------------------------


@extend_schema(
    operation_id="authzen_evaluations",
    tags=_TAGS,
    summary="AuthZEN: several tool calls at once",
    description=(
        f"Up to {MAX_EVALUATIONS} evaluations, answered in order in `evaluations`. The top-level "
        "`subject`, `resource`, `action` and `context` are defaults: an evaluation that leaves one "
        "out takes it, one that gives it replaces it whole. `options.evaluations_semantic`: "
        "execute_all (default) answers every evaluation; deny_on_first_deny stops after the first "
        "false, permit_on_first_permit after the first true. The whole body is checked before "
        "anything is decided (a 400 names the member by its path); an evaluation that cannot be "
        "decided (another principal for its session, an invoking session never seen) is false "
        "with `context.error`. Without `evaluations` the body is one evaluation, answered as "
        "`/access/v1/evaluation` answers it. " + _CHAIN
    ),
    request=AuthZenEvaluationsIn,
    responses={
        200: PolymorphicProxySerializer(
            component_name="AuthZenEvaluationsAnswer",
            serializers=[AuthZenEvaluationsOut, AuthZenDecisionOut],
            resource_type_field_name=None,
        ),
        400: _ERRORS_400,
        **{k: ERRORS[k] for k in (401, 409)},
    },
)
@api_view(["POST"])
def evaluations(request: Request) -> Response:
    data = _validated(AuthZenEvaluationsIn, request.data)
    merged, batch = _evaluations_of(data)
    runtime = request.user.runtime
    if not batch:
        return Response(_answer(runtime, merged[0]))
    semantic = (data.get("options") or {}).get("evaluations_semantic")
    # The decision that ends the batch under its semantic (execute_all: none does).
    last = {EvaluationsSemantic.PERMIT_ON_FIRST_PERMIT: True, EvaluationsSemantic.DENY_ON_FIRST_DENY: False}
    answers: list[dict[str, Any]] = []
    for evaluation in merged:
        answers.append(_answer(runtime, evaluation, in_batch=True))
        if answers[-1]["decision"] is last.get(semantic):
            break
    return Response({"evaluations": answers})


# --- GET /.well-known/authzen-configuration --------------------------------------------------------


@extend_schema(
    operation_id="authzen_configuration",
    tags=_TAGS,
    summary="AuthZEN: the policy decision point's metadata",
    description=(
        "Public, no token: where the evaluation endpoints are. `policy_decision_point` is this "
        "server's address as the document was fetched (behind a TLS proxy, set "
        "DJANGO_BEHIND_TLS_PROXY so it reads https). The search endpoints and capabilities are "
        "not offered, so they are absent."
    ),
    auth=[],
    request=None,
    responses={200: AuthZenConfigurationOut},
)
@api_view(["GET"])
@authentication_classes([])
@permission_classes([AllowAny])
def configuration(request: Request) -> Response:
    # The policy decision point's identifier: the scheme and host the document was fetched
    # at, which the specification requires to equal the address the PEP built its URL from.
    base = f"{request.scheme}://{request.get_host()}"
    body = {
        "policy_decision_point": base,
        "access_evaluation_endpoint": base + reverse("authzen-evaluation"),
        "access_evaluations_endpoint": base + reverse("authzen-evaluations"),
    }
    return Response(body, headers={"Cache-Control": f"max-age={CONFIGURATION_MAX_AGE}"})
