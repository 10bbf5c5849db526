"""Plain Django views for the hot runtime endpoints (the decisions), answering as DRF would.

A DRF view costs a request wrapper, content negotiation, permission checks and a
renderer; on a decision endpoint that machinery cost more than the decision itself (15%
of a bare endpoint's throughput, measured in benchmarks/skill_decisions.py). These views
do the same steps directly: the same token authentication class, JSON bodies parsed as
DRF's JSONParser would, and every error through the API's own exception handler, so
bodies, status codes and headers are the same as on every other endpoint.

drf-spectacular documents a plain view through a schema-only APIView class attached as
`cls`, as the long-poll does.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import authentication, exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aimon_admin.core.api import NESTED_TOO_DEEP_MESSAGE, exception_handler
from aimon_admin.runtimes.authentication import RuntimeCaller, RuntimeTokenAuthentication

logger = logging.getLogger(__name__)

_AUTHENTICATION = RuntimeTokenAuthentication()

PlainHandler = Callable[[HttpRequest, RuntimeCaller, Any], dict[str, Any]]
# The raw Bearer token and the parsed body, before any authentication: the response body,
# or None to be served the usual way (authentication first).
FusedHandler = Callable[[HttpRequest, str, Any], dict[str, Any] | None]


def _reject_constant(value: str) -> None:
    raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")


def json_body(request: HttpRequest) -> Any:
    """The body as DRF's JSONParser reads it: no body is {}; JSON only, else 415; NaN and
    Infinity refused; a parse error (or JSON nested too deep) is 400 "JSON parse error"."""
    raw = request.body
    if not raw:
        return {}
    if request.content_type != "application/json":
        raise exceptions.UnsupportedMediaType(request.META.get("CONTENT_TYPE", ""))
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError as exc:
        raise exceptions.ParseError(NESTED_TOO_DEEP_MESSAGE) from exc
    except ValueError as exc:
        raise exceptions.ParseError(f"JSON parse error - {exc}") from exc


def _error_response(request: HttpRequest, exc: Exception) -> JsonResponse:
    handled: Response | None = exception_handler(exc, {"request": request})
    if handled is None:
        raise exc
    response = JsonResponse(handled.data, status=handled.status_code)
    for header, value in handled.items():
        if header.lower() != "content-type":
            response[header] = value
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        response["WWW-Authenticate"] = _AUTHENTICATION.authenticate_header(request)  # type: ignore[arg-type]
    if isinstance(exc, exceptions.MethodNotAllowed):
        response["Allow"] = ", ".join(getattr(exc, "allowed", ()))
    return response


def _schema_only(self: APIView, request: Request, *args: Any, **kwargs: Any) -> Response:
    raise RuntimeError("schema description only: the route is served by a plain view")


def _bearer_and_body(request: HttpRequest) -> tuple[str, Any] | None:
    """The raw Bearer token and the parsed body, or None for anything the usual path must
    answer (no or a malformed Authorization header, a body that does not parse): it does,
    in its own order, authentication first."""
    header = authentication.get_authorization_header(request).split()
    if len(header) != 2 or header[0].lower() != _AUTHENTICATION.keyword.lower().encode():
        return None
    try:
        return header[1].decode("ascii"), json_body(request)
    except Exception:  # answered by the usual path, after authentication
        return None


def plain_api_view(
    method: str, *, fused: FusedHandler | None = None, **schema: Any
) -> Callable[[PlainHandler], Callable[..., JsonResponse]]:
    """A runtime-token API view for one method; `schema` is what `extend_schema` takes.

    The handler gets the request, the authenticated caller and the parsed JSON body, and
    returns the response body; it raises DRF exceptions (ValidationError, APIException
    subclasses) for its errors, which are answered as on every DRF view.

    `fused`, if given, is tried first with the raw Bearer token and the parsed body: a
    handler that authenticates the token in the same round trip as its own read. It
    returns the response body, raises `AuthenticationFailed` for a token that does not
    authenticate (as the authentication class would), or returns None for anything it
    does not serve (invalid input above all, which must be answered after authentication),
    which then goes the usual way.
    """

    def decorate(handler: PlainHandler) -> Callable[..., JsonResponse]:
        @csrf_exempt
        @functools.wraps(handler)
        def view(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            try:
                if request.method != method:
                    not_allowed = exceptions.MethodNotAllowed(request.method or "")
                    not_allowed.allowed = (method,)  # type: ignore[attr-defined]
                    raise not_allowed
                if fused is not None:
                    parsed = _bearer_and_body(request)
                    answered = fused(request, *parsed) if parsed is not None else None
                    if answered is not None:
                        return JsonResponse(answered)
                authenticated = _AUTHENTICATION.authenticate(request)  # type: ignore[arg-type]
                if authenticated is None:
                    raise exceptions.NotAuthenticated()
                caller = authenticated[0]
                return JsonResponse(handler(request, caller, json_body(request), *args, **kwargs))
            except Exception as exc:
                return _error_response(request, exc)

        schema_class = type(
            f"{handler.__name__.title().replace('_', '')}Schema",
            (APIView,),
            {
                "__doc__": f"Schema only: documents the plain view `{handler.__name__}`.",
                method.lower(): extend_schema(**schema)(_schema_only),
            },
        )
        # drf-spectacular documents a route whose callback names an APIView class as `cls`.
        view.cls = schema_class  # type: ignore[attr-defined]
        view.initkwargs = {}  # type: ignore[attr-defined]
        view.handler = handler  # type: ignore[attr-defined]  # served the usual way only, for benchmarks
        return view

    return decorate
