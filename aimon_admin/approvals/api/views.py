"""The approvals runtime API: skill and tool decisions, approval requests (of skills and of
tool calls) and their long-poll, cancel, and the session commands (docs/api.md; S1-S13 and
part U of docs/rules.md).

Every view acts for the runtime its token names; another runtime's request is a 404.
No endpoint takes an answer: of approvals a runtime can only ask, cancel, clear and
revoke (S11), and the strict inputs refuse any field that could carry a decision in.

The long-poll (`GET /approval-requests/{id}?wait=N`) is an async Django view, not a DRF
one (DRF views are sync, and a waiting runtime must not hold a worker thread). It
authenticates the bearer token itself, with DRF's own authentication class, so its 401s
are the same as everywhere else; how it reads and waits is longpoll.py's.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aimon_admin.approvals import services
from aimon_admin.approvals.api import longpoll
from aimon_admin.approvals.api.longpoll import load as _load
from aimon_admin.approvals.api.serializers import (
    IDEMPOTENCY_HEADER,
    MAX_IDEMPOTENCY_KEY,
    MAX_SKILLS,
    MAX_WAIT,
    WAIT_MESSAGE,
    ApprovalRequestIn,
    ApprovalRequestOut,
    EmptyIn,
    SessionClearOut,
    SessionRevokeIn,
    SessionRevokeOut,
    SkillDecisionIn,
    SkillDecisionsOut,
    request_body,
)
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.models import ApprovalRequest, Session
from aimon_admin.core.api import Unavailable, error_response, validate_flat, validate_value
from aimon_admin.runtimes import enforcement
from aimon_admin.runtimes.authentication import (
    RuntimeCaller,
    RuntimeTokenAuthentication,
    token_refused,
)
from aimon_admin.runtimes.models import AgentRuntime

logger = logging.getLogger(__name__)

NOT_FOUND_MESSAGE = "No approval request with that id."
TOOL_NOT_FOUND_MESSAGE = "No tool approval request with that id."
KEY_OF_OTHER_KIND_MESSAGE = (
    "This Idempotency-Key already opened a {kind} request; use a new key for this one."
)

_WAIT = re.compile(r"[0-9]{1,2}")  # ASCII digits only; fullmatch, so no trailing newline

_ERRORS = {
    400: OpenApiResponse(description="Invalid input: `fields` names each offending field."),
    401: OpenApiResponse(description="Missing, malformed, unknown or revoked token."),
    404: OpenApiResponse(description="No such request for this runtime (another runtime's is 404 too)."),
    409: OpenApiResponse(description="Conflict: `detail` says with what."),
    503: OpenApiResponse(description="The database is unavailable: no decision was made. Retry later."),
}


class Conflict(exceptions.APIException):
    status_code = 409
    default_detail = "Conflict."
    default_code = "conflict"


def _not_found(kind: RequestKind) -> exceptions.NotFound:
    return exceptions.NotFound(TOOL_NOT_FOUND_MESSAGE if kind == RequestKind.TOOL else NOT_FOUND_MESSAGE)


def _own_request(
    runtime: AgentRuntime, request_id: str | uuid.UUID, kind: RequestKind = RequestKind.SKILL
) -> ApprovalRequest:
    approval = _load(runtime.pk, request_id, kind)
    if approval is None:
        raise _not_found(kind)
    return approval


def _unknown_invoking(exc: services.UnknownInvokingSessionError) -> exceptions.ValidationError:
    """A 400 naming `invoking_session_id` (S3: a fork inherits from a session that exists)."""
    return exceptions.ValidationError({exc.field: [str(exc)]})


def _touch(runtime: AgentRuntime, session_id: str | None, principal: str | None) -> Session | None:
    try:
        return services.session_touch(runtime=runtime, session_id=session_id, principal=principal)
    except services.PrincipalConflictError as exc:
        raise Conflict(str(exc)) from exc


# --- POST /api/v1/skill-decisions ----------------------------------------------------------------


def _decisions_body(verdicts: list[services.SkillVerdict]) -> dict[str, Any]:
    return {
        "decisions": [
            {"skill": v.skill, "decision": v.decision.value, "source": v.source.value} for v in verdicts
        ]
    }


_DECISION_FIELDS = ("skills", "session_id", "invoking_session_id", "principal", "turn_id")


def _decision_ask(data: dict[str, Any]) -> dict[str, Any]:
    """What a skill decision asks, as the decision services take it."""
    return {name: data[name] for name in _DECISION_FIELDS}


def _skill_decisions_fused(request: Request, raw_token: str, body: Any) -> dict[str, Any] | None:
    """The hot path: the token looked up in the decision's own read (one round trip in the
    common case). Invalid input goes the usual way (None), so it is answered only after
    authentication, as everywhere; an unknown, revoked or malformed token is the
    authentication class's own 401."""
    try:
        data = validate_flat(SkillDecisionIn, body)
    except Exception:  # answered by the usual path, after authentication
        return None
    try:
        decided = services.decide_skills_for_token(raw_token=raw_token, **_decision_ask(data))
    except services.PrincipalConflictError as exc:
        raise Conflict(str(exc)) from exc
    except services.UnknownInvokingSessionError as exc:
        raise _unknown_invoking(exc) from exc
    if decided is None:
        raise token_refused(raw_token)
    enforcement.note_request(request, decided[0].runtime_id)  # which point called (G1-G3)
    return _decisions_body(decided[1])


def _bearer_token(request: Request) -> str | None:
    """The token of a well-formed `Authorization: Bearer <token>` header, else None."""
    header = get_authorization_header(request).split()
    if len(header) != 2 or header[0].lower() != b"bearer":
        return None
    try:
        return header[1].decode("ascii")
    except UnicodeDecodeError:
        return None


class SkillDecisionsView(APIView):
    """`POST /api/v1/skill-decisions`, with lazy authentication (DRF's documented hook).

    With a Bearer token and a body that parses and validates, the token is looked up in the
    decision's own read (`_skill_decisions_fused`: one round trip in the common case).
    Anything else (no or a malformed header, a body that does not parse, invalid input) is
    authenticated first, by the same authentication class and permission as every view,
    and then answered: an unauthenticated caller never learns what was wrong with a body.
    """

    fused_read = True  # benchmarks/urls.py serves it with False: the two-step read

    def perform_authentication(self, request: Request) -> None:
        if request.method != "POST" or not self.fused_read:
            super().perform_authentication(request)

    def check_permissions(self, request: Request) -> None:
        # POST checks them itself, after the fused read (see `post`).
        if request.method != "POST" or not self.fused_read:
            super().check_permissions(request)

    @extend_schema(
        summary="Decide skills for a session",
        description=(
            "Evaluates the chain for each skill, narrowest first: turn → session → invoking session "
            "→ agent → rules → default ASK; `source` names the layer that answered. A fork "
            "(only `invoking_session_id`) reads its invoking session's approvals and denials; "
            "an `invoking_session_id` this runtime never used as a session is a 400 on that field. "
            f"1-{MAX_SKILLS} skills, each once. The session is created when first seen and its "
            "principal is then fixed: another principal for it is a 409."
        ),
        request=SkillDecisionIn,
        responses={200: SkillDecisionsOut, 400: _ERRORS[400], 401: _ERRORS[401], 409: _ERRORS[409]},
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
                answered = _skill_decisions_fused(request, raw_token, body)
                if answered is not None:
                    return Response(answered)
        super().check_permissions(request)  # authenticates (once): the usual 401s
        if unparsed is not None:
            raise unparsed
        data = validate_flat(SkillDecisionIn, request.data)
        # The invoking session is only read here: a decision never creates it.
        try:
            verdicts = services.decide_skills(runtime=request.user.runtime, **_decision_ask(data))
        except services.PrincipalConflictError as exc:
            raise Conflict(str(exc)) from exc
        except services.UnknownInvokingSessionError as exc:
            raise _unknown_invoking(exc) from exc
        return Response(_decisions_body(verdicts))


skill_decisions = SkillDecisionsView.as_view()


# --- POST /api/v1/approval-requests ----------------------------------------------------------------


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
    parameters=[
        OpenApiParameter(
            IDEMPOTENCY_HEADER,
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            description=f"1-{MAX_IDEMPOTENCY_KEY} characters; makes retries safe.",
        )
    ],
    responses={
        201: ApprovalRequestOut,
        200: OpenApiResponse(ApprovalRequestOut, description="The request this Idempotency-Key opened."),
        400: _ERRORS[400],
        401: _ERRORS[401],
        409: _ERRORS[409],
    },
)
@api_view(["POST"])
def approval_requests(request: Request) -> Response:
    data = validate_flat(ApprovalRequestIn, request.data)
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        key = validate_value(IDEMPOTENCY_HEADER, key)
    runtime = request.user.runtime
    try:
        approval, created = services.request_create(
            services.RequestInput(
                runtime=runtime,
                skills=data["skills"],
                session_id=data["session_id"],
                invoking_session_id=data["invoking_session_id"],
                turn_id=data["turn_id"],
                principal=data["principal"],
                reason=data["reason"],
                timeout_seconds=data["timeout_seconds"],
                idempotency_key=key,
            )
        )
    except services.PrincipalConflictError as exc:
        raise Conflict(str(exc)) from exc
    except services.UnknownInvokingSessionError as exc:
        raise _unknown_invoking(exc) from exc
    return _opened(runtime, approval, created, RequestKind.SKILL)


def _opened(runtime: AgentRuntime, approval: ApprovalRequest, created: bool, kind: RequestKind) -> Response:
    """A request just opened (201), or the one its Idempotency-Key opened before (200)."""
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


# --- GET /api/v1/approval-requests/{id}?wait=N (async long-poll) ----------------------------------

_AUTHENTICATION = RuntimeTokenAuthentication()


def _authenticate(request: HttpRequest) -> RuntimeCaller | None:
    result = _AUTHENTICATION.authenticate(request)  # type: ignore[arg-type]  # reads META only
    return result[0] if result else None


@csrf_exempt
async def approval_request_detail(request: HttpRequest, request_id: str) -> JsonResponse:
    """Long-poll one approval request (docs/api.md): answer as soon as it leaves PENDING, or
    after `wait` seconds (0-60, default 0) with its current state. Its errors are answered by
    the API's exception handler, as on every DRF view."""
    try:
        return JsonResponse(await _detail(request, request_id, RequestKind.SKILL))
    except Exception as exc:
        return error_response(request, exc, authenticator=_AUTHENTICATION)


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


class ApprovalRequestDetailSchema(APIView):
    """Schema only: documents `approval_request_detail`, which drf-spectacular cannot read
    because it is a plain async Django view. Never routed, never instantiated for a request."""

    @extend_schema(
        summary="Read an approval request, long-polling for its answer",
        description=(
            "Returns as soon as the request leaves PENDING, or after `wait` seconds with its "
            "current state. Every read applies expiry: a request past `expires_at` is EXPIRED, "
            "and each unanswered skill is then denied for the session. An answered item "
            "carries `decision` and `scope`; `answered_by` and `answered_at` are set once the "
            "request is answered. Scope `REQUEST` (always with DENY) means *Deny this request*: "
            "the answer holds for this request only and nothing was stored."
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
        responses={200: ApprovalRequestOut, **{k: _ERRORS[k] for k in (400, 401, 404, 503)}},
    )
    def get(self, request: Request, request_id: str) -> Response:
        # Only drf-spectacular reads this class; the route itself is the async view.
        raise RuntimeError("schema description only: GET is served by approval_request_detail")


# drf-spectacular documents a route whose callback names an APIView class as `cls`.
approval_request_detail.cls = ApprovalRequestDetailSchema  # type: ignore[attr-defined]
approval_request_detail.initkwargs = {}  # type: ignore[attr-defined]


# --- POST /api/v1/approval-requests/{id}/cancel -----------------------------------------------------


@extend_schema(
    summary="Cancel an approval request",
    description=(
        "Closes a PENDING request as CANCELLED; each unanswered skill gets a SESSION-scope DENY, "
        "never an agent-wide one. An answered, expired or cancelled request is a 409."
    ),
    request=None,
    parameters=[OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
    responses={200: ApprovalRequestOut, **{k: _ERRORS[k] for k in (400, 401, 404, 409)}},
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


# --- POST /api/v1/sessions/{session_id}/clear | /revoke ---------------------------------------------

_SESSION_PARAMETER = OpenApiParameter(
    "session_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="1-200 characters, percent-encoded (`/` as %2F).",
)


@extend_schema(
    summary="Clear a session's approvals",
    description="Drops the session's turn and session approvals and denials; agent-wide "
    "approvals stay. An unknown session removes nothing.",
    request=None,
    parameters=[_SESSION_PARAMETER],
    responses={200: SessionClearOut, 400: _ERRORS[400], 401: _ERRORS[401]},
)
@api_view(["POST"])
def session_clear(request: Request, session_id: str) -> Response:
    session_id = validate_value("session_id", session_id)
    validate_flat(EmptyIn, request.data)
    removed = services.session_clear(
        runtime=request.user.runtime, session_id=session_id, actor=request.user.actor
    )
    return Response({"removed": removed})


@extend_schema(
    summary="Revoke a session's approvals",
    description="Revokes the session's turn and session approvals and denials; with "
    '`{"agent": true}` the runtime\'s agent-wide approvals go too.',
    request=SessionRevokeIn,
    parameters=[_SESSION_PARAMETER],
    responses={200: SessionRevokeOut, 400: _ERRORS[400], 401: _ERRORS[401]},
)
@api_view(["POST"])
def session_revoke(request: Request, session_id: str) -> Response:
    session_id = validate_value("session_id", session_id)
    data = validate_flat(SessionRevokeIn, request.data)
    removed_session, removed_agent = services.session_revoke(
        runtime=request.user.runtime, session_id=session_id, agent=data["agent"], actor=request.user.actor
    )
    return Response({"removed_session": removed_session, "removed_agent": removed_agent})
