"""The session commands (S10): `POST /api/v1/sessions/{session_id}/clear` drops a session's
turn and session approvals and denials; `…/revoke` revokes them, and with `agent` the
runtime's agent-wide ones too. Both are audited by the services."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from aimon_admin.approvals import services
from aimon_admin.approvals.api.common import ERRORS
from aimon_admin.approvals.api.serializers import EmptyIn, SessionClearOut, SessionRevokeIn, SessionRevokeOut
from aimon_admin.core.api import validate_flat, validate_value

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
    responses={200: SessionClearOut, 400: ERRORS[400], 401: ERRORS[401]},
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
    responses={200: SessionRevokeOut, 400: ERRORS[400], 401: ERRORS[401]},
)
@api_view(["POST"])
def session_revoke(request: Request, session_id: str) -> Response:
    session_id = validate_value("session_id", session_id)
    data = validate_flat(SessionRevokeIn, request.data)
    removed_session, removed_agent = services.session_revoke(
        runtime=request.user.runtime, session_id=session_id, agent=data["agent"], actor=request.user.actor
    )
    return Response({"removed_session": removed_session, "removed_agent": removed_agent})
