"""The runtime API of tool calls that ask (docs/api.md "Tools"; part U of docs/rules.md): tool
decisions, tool approval requests, their long-poll and cancel. The long-poll, the opening and
the cancel are the skill requests' own (views.py), for a request of kind TOOL: one inbox, one
expiry, one wake-up path.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aimon_admin.approvals import services
from aimon_admin.approvals.api.serializers import (
    IDEMPOTENCY_HEADER,
    MAX_IDEMPOTENCY_KEY,
    MAX_WAIT,
    ToolApprovalRequestIn,
    ToolApprovalRequestOut,
    ToolDecisionIn,
    ToolDecisionOut,
    tool_decision_input,
)
from aimon_admin.approvals.api.views import (
    _AUTHENTICATION,
    _ERRORS,
    Conflict,
    _bearer_token,
    _cancel,
    _detail,
    _opened,
    _unknown_invoking,
)
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.core.api import error_response, validate_flat, validate_value
from aimon_admin.runtimes import enforcement
from aimon_admin.runtimes.authentication import token_refused

# --- POST /api/v1/tool-decisions ---------------------------------------------------------------


def tool_decision_body(decided: services.ToolCallDecision) -> dict[str, Any]:
    """A tool decision as the endpoint answers it (docs/api.md "Tools")."""
    verdict, axes = decided.verdict, decided.axes
    body: dict[str, Any] = {
        "decision": verdict.decision.value,
        "reason": verdict.reason.value,
        "source": verdict.source.value,
        "side_effect_level": axes.level.value,
        "destructive_behavior": axes.effective_destructive.value,
        "idempotency_behavior": axes.idempotency.value,
        "registered": decided.registered,
    }
    if verdict.rule is not None:
        body["rule"] = {"id": verdict.rule.id, "pattern": verdict.rule.text}
    if decided.note:
        body["note"] = decided.note
    return body


def _decide(data: dict[str, Any], decide: Any, **who: Any) -> Any:
    try:
        return decide(**who, **data)
    except services.PrincipalConflictError as exc:
        raise Conflict(str(exc)) from exc
    except services.UnknownInvokingSessionError as exc:
        raise _unknown_invoking(exc) from exc


class ToolDecisionsView(APIView):
    """`POST /api/v1/tool-decisions`, with lazy authentication, as the skill decision's view:
    with a Bearer token and a body that parses and validates, the token is looked up in the
    decision's own read (one round trip in the common case); anything else is authenticated
    first, by the same authentication class and permission as every view, and then answered:
    an unauthenticated caller never learns what was wrong with a body."""

    fused_read = True  # False: the token looked up first, then the decision (tests compare them)

    def perform_authentication(self, request: Request) -> None:
        if request.method != "POST" or not self.fused_read:
            super().perform_authentication(request)

    def check_permissions(self, request: Request) -> None:
        # POST checks them itself, after the fused read (see `post`).
        if request.method != "POST" or not self.fused_read:
            super().check_permissions(request)

    @extend_schema(
        summary="May this runtime run this tool now?",
        description=(
            "The tool chain, first match wins: the ceiling (DENY) → operator DENY rules → this "
            "call's approval (`approval_id`) → turn → session → invoking session → agent grants "
            "→ operator ALLOW / ASK rules → the gate → ASK. `source` names the layer that "
            "answered; `rule` the rule, when one did. Attended means `session_id` or "
            "`invoking_session_id` is given; unattended, nobody can be asked, so ASK becomes DENY "
            "unless one of this runtime's pre-approvals answers it (PRE_APPROVED). Rules and "
            "grants narrowed to a subject pattern match the value of the tool's subject argument in "
            "`arguments`. A tool that is not registered (for this runtime, or on an enabled "
            "server) counts as MUTATING + DESTRUCTIVE. `idempotency_behavior` is retry advice"
            "; a `replay` of a NON_IDEMPOTENT tool asks again. A session is created when "
            "first seen and its principal then fixed (409 for another); an "
            "`invoking_session_id` this runtime never used is a 400 on that field."
        ),
        request=ToolDecisionIn,
        responses={200: ToolDecisionOut, **{k: _ERRORS[k] for k in (400, 401, 409)}},
    )
    def post(self, request: Request) -> Response:
        unparsed: Exception | None = None
        raw_token = _bearer_token(request) if self.fused_read else None
        if raw_token is not None:
            try:
                body = request.data
            except Exception as exc:  # answered after authentication, as on every view
                unparsed = exc
            else:
                try:
                    data = tool_decision_input(body)
                except Exception:  # answered by the usual path, after authentication
                    data = None
                if data is not None:
                    decided = _decide(data, services.tool_call_decide_for_token, raw_token=raw_token)
                    if decided is None:
                        raise token_refused(raw_token)
                    enforcement.note_request(request, decided[0].runtime_id)  # G1-G3
                    return Response(tool_decision_body(decided[1]))
        super().check_permissions(request)  # authenticates (once): the usual 401s
        if unparsed is not None:
            raise unparsed
        data = tool_decision_input(request.data)
        return Response(
            tool_decision_body(_decide(data, services.tool_call_decide, runtime=request.user.runtime))
        )


tool_decisions = ToolDecisionsView.as_view()


# --- POST /api/v1/tool-approval-requests, POST …/{id}/cancel -----------------------------------


@extend_schema(
    summary="Open a tool approval request",
    description=(
        "Asks a person about one tool call with its exact arguments: they see the tool, its "
        "server's trust and claims, the resolved axes and the arguments in full, and answer Allow "
        "this call (CALL: ALLOW once for these arguments), Allow for this session or Always "
        "allow for this agent (narrowed to a subject pattern they pick), or Deny. A call the "
        "chain already decides is ANSWERED from the start (`source` given). With no "
        "`session_id` and no `invoking_session_id` it is a 400: an unattended call opens no "
        "request. `Idempotency-Key`, expiry and cancel as for skill requests; an expired "
        "or cancelled request denies the call for the session, for its exact subject (else the "
        "whole tool)."
    ),
    request=ToolApprovalRequestIn,
    parameters=[
        OpenApiParameter(
            IDEMPOTENCY_HEADER,
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            description=f"1-{MAX_IDEMPOTENCY_KEY} characters; makes retries safe.",
        )
    ],
    responses={
        201: ToolApprovalRequestOut,
        200: OpenApiResponse(ToolApprovalRequestOut, description="The request this Idempotency-Key opened."),
        400: _ERRORS[400],
        401: _ERRORS[401],
        409: _ERRORS[409],
    },
)
@api_view(["POST"])
def tool_approval_requests(request: Request) -> Response:
    data = validate_flat(ToolApprovalRequestIn, request.data)
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        key = validate_value(IDEMPOTENCY_HEADER, key)
    runtime = request.user.runtime
    try:
        approval, created = services.request_create(
            services.RequestInput(
                runtime=runtime,
                skills=[],
                kind=RequestKind.TOOL,
                tool=data["tool"],
                server=data["server"],
                arguments=data["arguments"] or {},
                session_id=data["session_id"],
                invoking_session_id=data["invoking_session_id"],
                turn_id=data["turn_id"],
                principal=data["principal"],
                reason=data["reason"],
                timeout_seconds=data["timeout_seconds"],
                idempotency_key=key,
            )
        )
    except services.BadToolCallError as exc:
        raise exceptions.ValidationError({exc.field: [str(exc)]}) from exc
    except services.PrincipalConflictError as exc:
        raise Conflict(str(exc)) from exc
    except services.UnknownInvokingSessionError as exc:
        raise _unknown_invoking(exc) from exc
    return _opened(runtime, approval, created, RequestKind.TOOL)


@extend_schema(
    summary="Cancel a tool approval request",
    description=(
        "Closes a PENDING tool request as CANCELLED; the call is denied for the session, for its "
        "exact subject (else the whole tool), never agent-wide. An answered, expired or "
        "cancelled request is a 409."
    ),
    request=None,
    parameters=[OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
    responses={200: ToolApprovalRequestOut, **{k: _ERRORS[k] for k in (400, 401, 404, 409)}},
)
@api_view(["POST"])
def tool_approval_request_cancel(request: Request, request_id: str) -> Response:
    return _cancel(request, request_id, RequestKind.TOOL)


# --- GET /api/v1/tool-approval-requests/{id}?wait=N (async long-poll) ---------------------------


@csrf_exempt
async def tool_approval_request_detail(request: HttpRequest, request_id: str) -> JsonResponse:
    """Long-poll one tool approval request: the same wait, the same wake-ups and the same
    expiry as a skill request's, one path for both kinds."""
    try:
        return JsonResponse(await _detail(request, request_id, RequestKind.TOOL))
    except Exception as exc:
        return error_response(request, exc, authenticator=_AUTHENTICATION)


class ToolApprovalRequestDetailSchema(APIView):
    """Schema only: documents `tool_approval_request_detail` (see ApprovalRequestDetailSchema)."""

    @extend_schema(
        summary="Read a tool approval request, long-polling for its answer",
        description=(
            "Returns as soon as the request leaves PENDING, or after `wait` seconds with its "
            "current state. Every read applies expiry: a request past `expires_at` is EXPIRED, and "
            "the call is then denied for the session, for its exact subject (else the whole tool)"
            ". Answered: `decision` ALLOW or DENY, `scope` CALL (Allow this call: ask "
            "tool-decisions with this id as `approval_id` and the same arguments, ALLOW once), "
            "SESSION or AGENT with the subject `pattern` the approver picked (null: the whole tool)."
        ),
        parameters=[
            OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH),
            OpenApiParameter(
                "wait",
                {"type": "integer", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
                OpenApiParameter.QUERY,
                description=f"Seconds to wait for an answer, 0-{MAX_WAIT}; default 0.",
            ),
        ],
        responses={200: ToolApprovalRequestOut, **{k: _ERRORS[k] for k in (400, 401, 404, 503)}},
    )
    def get(self, request: Request, request_id: str) -> Response:
        raise RuntimeError("schema description only: GET is served by tool_approval_request_detail")


# drf-spectacular documents a route whose callback names an APIView class as `cls`.
tool_approval_request_detail.cls = ToolApprovalRequestDetailSchema  # type: ignore[attr-defined]
tool_approval_request_detail.initkwargs = {}  # type: ignore[attr-defined]
