"""DRF authentication for runtimes: ``Authorization: Bearer <runtime token>``."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from aimon_admin.core.actors import Actor
from aimon_admin.runtimes import enforcement
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import (
    RUNTIME_DISABLED,
    RUNTIME_RETIRED,
    token_authenticate,
    token_refusal_reason,
)

INVALID_TOKEN_MESSAGE = "Invalid, revoked or unknown runtime token."  # noqa: S105 - not a secret # nosec B105
MALFORMED_HEADER_MESSAGE = "Malformed Authorization header: expected 'Bearer <token>'."
RUNTIME_DISABLED_MESSAGE = (
    "This token's runtime is disabled: its tokens are refused until an operator enables it again."
)
RUNTIME_RETIRED_MESSAGE = "This token's runtime is retired: its tokens are refused for good."
_REFUSALS = {RUNTIME_DISABLED: RUNTIME_DISABLED_MESSAGE, RUNTIME_RETIRED: RUNTIME_RETIRED_MESSAGE}


def token_refused(raw: str) -> exceptions.AuthenticationFailed:
    """The 401 for a token that did not authenticate: saying so when its runtime is disabled
    or retired (the runtime's operator then knows to look there), else the usual words."""
    return exceptions.AuthenticationFailed(
        _REFUSALS.get(token_refusal_reason(raw) or "", INVALID_TOKEN_MESSAGE)
    )


@dataclass(frozen=True)
class RuntimeCaller:
    """`request.user` on the API: the runtime a token names. Never a person."""

    runtime: AgentRuntime
    token: RuntimeToken

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    @property
    def actor(self) -> Actor:
        return Actor.for_runtime(self.runtime)

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return False

    def __str__(self) -> str:
        return f"runtime:{self.runtime.name}"


class RuntimeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[RuntimeCaller, RuntimeToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != self.keyword.lower().encode() or len(header) != 2:
            raise exceptions.AuthenticationFailed(MALFORMED_HEADER_MESSAGE)
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed(INVALID_TOKEN_MESSAGE) from exc
        token = token_authenticate(raw)
        if token is None:
            raise token_refused(raw)
        enforcement.note_request(request, token.runtime_id)  # which point called (G1-G3)
        return RuntimeCaller(runtime=token.runtime, token=token), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="aimon"'
