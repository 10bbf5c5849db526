"""What can go wrong talking to AIMON Admin, each error carrying a sentence (`reason`) that says
what happened and what to do about it. Every one of them means: do not run the call (G1-G3
fail closed)."""

from __future__ import annotations

from typing import Any

UNREACHABLE = (
    "AIMON Admin at {url} could not be reached ({detail}) after {attempts} attempts; nothing was "
    "decided, so the call is refused. Check that the product is running and that the address is right."
)
UNAVAILABLE = (
    "AIMON Admin at {url} answered {status} after {attempts} attempts; nothing was decided, so "
    "the call is refused. Try again once the product is back."
)
SERVER_ERROR = (
    "AIMON Admin at {url} answered {status} (a server error); nothing was decided, so the call is "
    "refused. The product's operators can find it in its logs."
)
NOT_AUTHORIZED = (
    "AIMON Admin refused the runtime token ({detail}). The token is missing, wrong or revoked: an "
    "operator issues a new one on the runtime's page in AIMON Admin (or with `manage.py "
    "create_runtime`)."
)
REFUSED = "AIMON Admin refused the request with {status}: {detail}"
NOT_JSON = "AIMON Admin's answer to {what} was not JSON (status {status}); the call is refused."
BAD_SHAPE = (
    "AIMON Admin's answer to {what} is not what this client understands ({problem}); the call is "
    "refused. The client and the product may be of different versions: upgrade aimon-client."
)


class AimonError(Exception):
    """Base of every error of this package; `reason` says what happened and what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProductUnavailable(AimonError):
    """The product could not be reached, or kept answering 5xx, after the retries."""


class NotAuthorized(AimonError):
    """401: the runtime token is missing, wrong or revoked."""


class Refused(AimonError):
    """Any other 4xx: the product understood the request and refused it. `status` is the HTTP
    status, `fields` the field names its body named (an empty tuple when it named none),
    `detail` its own sentence."""

    def __init__(self, reason: str, *, status: int, fields: tuple[str, ...] = (), detail: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.fields = fields
        self.detail = detail


class ProtocolError(AimonError):
    """An answer that is not the documented shape (an unknown enum value included): never
    guessed at."""


def refused_from(status: int, body: Any) -> Refused:
    """The Refused for a 4xx answer whose JSON body is `body` (`{"detail", "fields"}`)."""
    detail = body.get("detail") if isinstance(body, dict) else None
    fields = body.get("fields") if isinstance(body, dict) else None
    names = tuple(sorted(fields)) if isinstance(fields, dict) else ()
    text = str(detail) if detail else f"HTTP {status}"
    if names and isinstance(fields, dict):
        problems = "; ".join(f"{name}: {' '.join(map(str, _as_list(fields[name])))}" for name in names)
        text = f"{text} ({problems})"
    return Refused(REFUSED.format(status=status, detail=text), status=status, fields=names, detail=text)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
