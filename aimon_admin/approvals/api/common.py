"""What every approvals API view shares: the 409, the documented errors, the bearer token,
and the refusals a decision's or a request's input can meet (S3, S12)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.request import Request

from aimon_admin.approvals import services

ERRORS = {
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


@contextlib.contextmanager
def refusals_answered() -> Iterator[None]:
    """The services' refusals as the API answers them: another principal for a session is a
    409 (S12); an `invoking_session_id` never used, or a bad tool call, a 400 naming the field
    (S3: a fork inherits from a session that exists)."""
    try:
        yield
    except services.PrincipalConflictError as exc:
        raise Conflict(str(exc)) from exc
    except (services.UnknownInvokingSessionError, services.BadToolCallError) as exc:
        raise exceptions.ValidationError({exc.field: [str(exc)]}) from exc


def bearer_token(request: Request) -> str | None:
    """The token of a well-formed `Authorization: Bearer <token>` header, else None."""
    header = get_authorization_header(request).split()
    if len(header) != 2 or header[0].lower() != b"bearer":
        return None
    try:
        return header[1].decode("ascii")
    except UnicodeDecodeError:
        return None
