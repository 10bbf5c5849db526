"""Approval requests, of skills (S4-S9) and of tool calls (U3, U4), one path for both
kinds: open (`POST /api/v1/approval-requests`, `…/tool-approval-requests`), read with a
long-poll (`GET …/{id}?wait=N`) and cancel (`POST …/{id}/cancel`). Each kind keeps its own
route and schema; what they do is shared, the kind passed along.

Every view acts for the runtime its token names; another runtime's request is a 404. No
endpoint takes an answer: of approvals a runtime can only ask, cancel, clear and revoke
(S11), and the strict inputs refuse any field that could carry a decision in.

The long-poll is an async Django view, not a DRF one (DRF views are sync, and a waiting
runtime must not hold a worker thread). It authenticates the bearer token itself, with
DRF's own authentication class, so its 401s are the same as everywhere else; how it reads
and waits is longpoll.py's.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from aimon_admin.approvals import services
from aimon_admin.approvals.api import longpoll
from aimon_admin.approvals.api.common import ERRORS, Conflict, refusals_answered
from aimon_admin.approvals.api.serializers import (
    IDEMPOTENCY_HEADER,
    MAX_IDEMPOTENCY_KEY,
    MAX_WAIT,
    WAIT_MESSAGE,
    ApprovalRequestIn,
    ApprovalRequestOut,
    EmptyIn,
    ToolApprovalRequestIn,
    ToolApprovalRequestOut,
    request_body,
)
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.core.api import Unavailable, error_response, validate_flat, validate_value
from aimon_admin.runtimes.authentication import RuntimeCaller, RuntimeTokenAuthentication
from aimon_admin.runtimes.models import AgentRuntime

logger = logging.getLogger(__name__)

NOT_FOUND_MESSAGE = "No approval request with that id."
TOOL_NOT_FOUND_MESSAGE = "No tool approval request with that id."
KEY_OF_OTHER_KIND_MESSAGE = (
    "This Idempotency-Key already opened a {kind} request; use a new key for this one."
)

_WAIT = re.compile(r"[0-9]{1,2}")  # ASCII digits only; fullmatch, so no trailing newline


def _not_found(kind: RequestKind) -> exceptions.NotFound:
    return exceptions.NotFound(TOOL_NOT_FOUND_MESSAGE if kind == RequestKind.TOOL else NOT_FOUND_MESSAGE)


def _own_request(
    runtime: AgentRuntime, request_id: str | uuid.UUID, kind: RequestKind = RequestKind.SKILL
) -> ApprovalRequest:
    approval = longpoll.load(runtime.pk, request_id, kind)
    if approval is None:
        raise _not_found(kind)
    return approval


# --- POST /api/v1/approval-requests, /api/v1/tool-approval-requests ------------------------------


# What both kinds' open endpoints document alike: the Idempotency-Key and the answers.
_OPEN_PARAMETERS = [
    OpenApiParameter(
        IDEMPOTENCY_HEADER,
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        description=f"1-{MAX_IDEMPOTENCY_KEY} characters; makes retries safe.",
    )
]


def _open_responses(body: type[Serializer]) -> dict[int, Any]:
    return {
        201: body,
        200: OpenApiResponse(body, description="The request this Idempotency-Key opened."),
        400: ERRORS[400],
        401: ERRORS[401],
        409: ERRORS[409],
    }


@extend_schema(
    summary="Open an approval request",
    description=(
        "Asks a person about the skills. Skills the chain already decides are filled in "
        "at once (`scope` null, `source` given); when all are, the request is ANSWERED from the "
        "start. With an `Idempotency-Key` header, the same key from the same runtime returns the "
        "same request: 201 the first time, 200 after. The request expires after "
        "`timeout_seconds` (default 300); an expired request denies each unanswered skill for "
        "the session, as a cancel does. An `invoking_session_id` this runtime never used as "
        "a session is a 400 on that field: a fork inherits from a session that exists."
    ),
    request=ApprovalRequestIn,
    parameters=_OPEN_PARAMETERS,
    responses=_open_responses(ApprovalRequestOut),
)
@api_view(["POST"])
def approval_requests(request: Request) -> Response:
    data = validate_flat(ApprovalRequestIn, request.data)
    return _open(request, data, RequestKind.SKILL, skills=data["skills"])


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
    parameters=_OPEN_PARAMETERS,
    responses=_open_responses(ToolApprovalRequestOut),
)
@api_view(["POST"])
def tool_approval_requests(request: Request) -> Response:
    data = validate_flat(ToolApprovalRequestIn, request.data)
    return _open(
        request,
        data,
        RequestKind.TOOL,
        skills=[],
        tool=data["tool"],
        server=data["server"],
        arguments=data["arguments"] or {},
    )


def _open(request: Request, data: dict[str, Any], kind: RequestKind, **what: Any) -> Response:
    """Open a request of `kind` asking about `what` (its skills, or its tool call), for the
    session `data` names; an `Idempotency-Key` makes a retry return the same request."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        key = validate_value(IDEMPOTENCY_HEADER, key)
    runtime = request.user.runtime
    with refusals_answered():
        approval, created = services.request_create(
            services.RequestInput(
                runtime=runtime,
                kind=kind,
                session_id=data["session_id"],
                invoking_session_id=data["invoking_session_id"],
                turn_id=data["turn_id"],
                principal=data["principal"],
                reason=data["reason"],
                timeout_seconds=data["timeout_seconds"],
                idempotency_key=key,
                **what,
            )
        )
    # A request just opened (201), or the one its Idempotency-Key opened before (200).
    if approval.kind != kind:
        raise Conflict(KEY_OF_OTHER_KIND_MESSAGE.format(kind=RequestKind(approval.kind).label.lower()))
    approval = _own_request(runtime, approval.pk, kind)
    if not created and services.request_expire_if_due(approval):
        approval = _own_request(runtime, approval.pk, kind)
    path = "tool-approval-requests" if kind == RequestKind.TOOL else "approval-requests"
    return Response(
        request_body(approval),
        status=201 if created else 200,
        headers={"Location": f"/api/v1/{path}/{approval.pk}"},
    )


# --- GET …/{id}?wait=N (async long-poll) -------------------------------------------------------

_AUTHENTICATION = RuntimeTokenAuthentication()


def _authenticate(request: HttpRequest) -> RuntimeCaller | None:
    result = _AUTHENTICATION.authenticate(request)  # type: ignore[arg-type]  # reads META only
    return result[0] if result else None


async def _detail(request: HttpRequest, request_id: str, kind: RequestKind) -> dict[str, Any]:
    if request.method != "GET":
        not_allowed = exceptions.MethodNotAllowed(request.method or "")
        not_allowed.allowed = ("GET",)  # type: ignore[attr-defined]
        raise not_allowed
    # Under ASGI on the loop's desk (longpoll.py): the connection is given back at once.
    desk = longpoll.desk_for(request)
    try:
        caller = await (desk.call(_authenticate, request) if desk else sync_to_async(_authenticate)(request))
    except DatabaseError as exc:
        logger.error("database unavailable: %s", exc)
        raise Unavailable() from exc
    if caller is None:
        raise exceptions.NotAuthenticated()
    request.user = caller  # as DRF would: the request log names the runtime

    raw_wait = request.GET.get("wait", "0")
    if not _WAIT.fullmatch(raw_wait) or int(raw_wait) > MAX_WAIT:
        raise exceptions.ValidationError({"wait": [WAIT_MESSAGE]})
    try:
        pk = uuid.UUID(request_id)
    except ValueError as exc:
        raise _not_found(kind) from exc

    try:
        body = await longpoll.long_poll(desk, caller.runtime.pk, pk, int(raw_wait), kind)
    except DatabaseError as exc:
        logger.error("database unavailable during a long-poll: %s", exc)
        raise Unavailable() from exc
    if body is None:
        raise _not_found(kind)
    return body


# The long-poll's parameters, the same for both kinds.
_LONG_POLL_PARAMETERS = [
    OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH),
    OpenApiParameter(
        "wait",
        {"type": "integer", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
        OpenApiParameter.QUERY,
        description=f"Seconds to wait for an answer, 0-{MAX_WAIT}; default 0.",
    ),
]


def _long_poll_view(
    kind: RequestKind, body: type[Serializer], summary: str, description: str
) -> Callable[..., Any]:
    """The long-poll of one kind's requests (docs/api.md): answer as soon as the request leaves
    PENDING, or after `wait` seconds (0-60, default 0) with its current state; the same wait,
    wake-ups and expiry for both kinds. Its errors are answered by the API's exception
    handler, as on every DRF view."""

    class Schema(APIView):
        """Schema only: documents the long-poll, which drf-spectacular cannot read because it
        is a plain async Django view. Never routed, never instantiated for a request."""

        @extend_schema(
            summary=summary,
            description=description,
            parameters=_LONG_POLL_PARAMETERS,
            responses={200: body, **{k: ERRORS[k] for k in (400, 401, 404, 503)}},
        )
        def get(self, request: Request, request_id: str) -> Response:
            raise RuntimeError("schema description only: GET is served by the async long-poll view")

    @csrf_exempt
    async def detail(request: HttpRequest, request_id: str) -> JsonResponse:
        try:
            return JsonResponse(await _detail(request, request_id, kind))
        except Exception as exc:
            return error_response(request, exc, authenticator=_AUTHENTICATION)

    # drf-spectacular documents a route whose callback names an APIView class as `cls`.
    detail.cls = Schema  # type: ignore[attr-defined]
    detail.initkwargs = {}  # type: ignore[attr-defined]
    return detail


approval_request_detail = _long_poll_view(
    RequestKind.SKILL,
    ApprovalRequestOut,
    "Read an approval request, long-polling for its answer",
    "Returns as soon as the request leaves PENDING, or after `wait` seconds with its "
    "current state. Every read applies expiry: a request past `expires_at` is EXPIRED, "
    "and each unanswered skill is then denied for the session. An answered item "
    "carries `decision` and `scope`; `answered_by` and `answered_at` are set once the "
    "request is answered. Scope `REQUEST` (always with DENY) means *Deny this request*: "
    "the answer holds for this request only and nothing was stored.",
)
tool_approval_request_detail = _long_poll_view(
    RequestKind.TOOL,
    ToolApprovalRequestOut,
    "Read a tool approval request, long-polling for its answer",
    "Returns as soon as the request leaves PENDING, or after `wait` seconds with its "
    "current state. Every read applies expiry: a request past `expires_at` is EXPIRED, and "
    "the call is then denied for the session, for its exact subject (else the whole tool)"
    ". Answered: `decision` ALLOW or DENY, `scope` CALL (Allow this call: ask "
    "tool-decisions with this id as `approval_id` and the same arguments, ALLOW once), "
    "SESSION or AGENT with the subject `pattern` the approver picked (null: the whole tool).",
)


# --- POST …/{id}/cancel ------------------------------------------------------------------------------


@extend_schema(
    summary="Cancel an approval request",
    description=(
        "Closes a PENDING request as CANCELLED; each unanswered skill gets a SESSION-scope DENY, "
        "never an agent-wide one. An answered, expired or cancelled request is a 409."
    ),
    request=None,
    parameters=[OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
    responses={200: ApprovalRequestOut, **{k: ERRORS[k] for k in (400, 401, 404, 409)}},
)
@api_view(["POST"])
def approval_request_cancel(request: Request, request_id: str) -> Response:
    return _cancel(request, request_id, RequestKind.SKILL)


def _cancel(request: Request, request_id: str, kind: RequestKind) -> Response:
    runtime = request.user.runtime
    approval = _own_request(runtime, request_id, kind)
    validate_flat(EmptyIn, request.data)
    try:
        services.request_cancel(request=approval, actor=request.user.actor)
    except services.RequestClosedError as exc:
        raise Conflict(str(exc)) from exc
    return Response(request_body(_own_request(runtime, approval.pk, kind)))


@extend_schema(
    summary="Cancel a tool approval request",
    description=(
        "Closes a PENDING tool request as CANCELLED; the call is denied for the session, for its "
        "exact subject (else the whole tool), never agent-wide. An answered, expired or "
        "cancelled request is a 409."
    ),
    request=None,
    parameters=[OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
    responses={200: ToolApprovalRequestOut, **{k: ERRORS[k] for k in (400, 401, 404, 409)}},
)
@api_view(["POST"])
def tool_approval_request_cancel(request: Request, request_id: str) -> Response:
    return _cancel(request, request_id, RequestKind.TOOL)
