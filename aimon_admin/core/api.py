"""The runtime API's shared pieces: error shapes, strict input, reusable fields.

Every API error is JSON of one shape::

    {"error": "<code>", "detail": "<sentence>", "fields": {"<field>": ["<message>", ...]}}

`fields` appears only on validation errors and names each offending field, unknown ones
included (docs/api.md "Basics": a typo like ``sesion_id`` must never be read as "no session").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.fields import SkipField, empty
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from aimon_admin.core import metrics
from aimon_admin.core.middleware import BODY_TOO_LARGE_MESSAGE
from aimon_admin.core.parsers import member_name

logger = logging.getLogger(__name__)

UNKNOWN_FIELD_MESSAGE = "Unknown field. Allowed fields: {allowed}."
# DRF's own wordings, named here so tests import them: a field left out, a field of the wrong
# type (a name or id that is not a string), a JSON null body, a body that is not an object.
REQUIRED_MESSAGE = serializers.Field.default_error_messages["required"]
NOT_A_STRING_MESSAGE = serializers.CharField.default_error_messages["invalid"]
NULL_BODY_MESSAGE = "No data provided"  # DRF's Serializer.errors, for a null body
NOT_AN_OBJECT_BODY_MESSAGE = serializers.Serializer.default_error_messages["invalid"]
INVALID_CHOICE_MESSAGE = '"{input}" is not a valid value. Allowed values: {allowed}.'
CONTROL_CHARS_MESSAGE = "Must not contain control characters."
NESTED_TOO_DEEP_MESSAGE = "JSON parse error - nested too deeply."
UNAVAILABLE_MESSAGE = (
    "The service's database is unavailable, so nothing can be decided or recorded. "
    "Treat this as a refusal and retry later."
)

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


_CODES_BY_STATUS = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
    503: "unavailable",
}


class Unavailable(exceptions.APIException):
    """The database cannot be reached: a 503 saying so, with Retry-After (never a decision)."""

    status_code = 503
    default_detail = UNAVAILABLE_MESSAGE
    default_code = "unavailable"
    wait = 5  # DRF's handler sends it as Retry-After


def error_body(status_code: int, detail: str, fields: dict[str, Any] | None = None) -> dict:
    body: dict[str, Any] = {"error": _CODES_BY_STATUS.get(status_code, "error"), "detail": detail}
    if fields:
        body["fields"] = fields
    return body


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Turn every exception an API view can meet into a 4xx (or a 503) JSON body."""
    if isinstance(exc, RecursionError):
        # JSON nested past Python's recursion limit, met by the parser (`request.data`) or by
        # a check walking the parsed body: the same 400 as any body that does not parse.
        return Response(error_body(400, NESTED_TOO_DEEP_MESSAGE), status=400)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body(413, BODY_TOO_LARGE_MESSAGE), status=413)
    if isinstance(exc, (OperationalError, InterfaceError)):
        # Fail closed: the caller gets no decision at all, never a silent ALLOW.
        logger.error("database unavailable: %s", exc)
        metrics.DATABASE_ERRORS.labels("api").inc()
        exc = Unavailable()
    elif isinstance(exc, DatabaseError):
        return None
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        data = exc.detail
        if isinstance(data, dict):
            fields = {key: _flatten(value) for key, value in data.items()}
        else:
            fields = {"non_field_errors": _flatten(data)}
        detail = "Invalid input: " + ", ".join(sorted(fields)) + "."
        response.data = error_body(400, detail, fields)
        response.status_code = status.HTTP_400_BAD_REQUEST
    else:
        detail = response.data.get("detail") if isinstance(response.data, dict) else None
        response.data = error_body(response.status_code, str(detail or exc))
    return response


def error_response(
    request: HttpRequest, exc: Exception, *, authenticator: BaseAuthentication
) -> JsonResponse:
    """`exc` answered as every DRF view answers it (`exception_handler`), for the one API view
    DRF cannot serve: the async long-poll. Re-raises what the handler leaves (a 500)."""
    handled = exception_handler(exc, {"request": request})
    if handled is None:
        raise exc
    response = JsonResponse(handled.data, status=handled.status_code)
    for header, value in handled.items():
        if header.lower() != "content-type":
            response[header] = value
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        response["WWW-Authenticate"] = authenticator.authenticate_header(request)  # type: ignore[arg-type]
    if isinstance(exc, exceptions.MethodNotAllowed):
        response["Allow"] = ", ".join(getattr(exc, "allowed", ()))
    return response


def _flatten(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _flatten(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_flatten(item) for item in value]
    return str(value)


class StrictSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know, naming them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = sorted(name for name, field in self.fields.items() if not field.read_only)
            unknown = sorted(member_name(key) for key in data if key not in allowed)
            if unknown:
                message = UNKNOWN_FIELD_MESSAGE.format(allowed=", ".join(allowed) or "none")
                raise serializers.ValidationError({key: [message] for key in unknown})
        return super().to_internal_value(data)


def validate_flat(serializer_class: type[StrictSerializer], data: Any) -> dict[str, Any]:
    """Validate `data` with a flat strict serializer's declared fields, without building one.

    For the API's bodies: a serializer instance deep-copies its fields on every call. The
    answer is the serializer's own, value for value and error for error (tests compare the
    two): no body is an empty object; a JSON null or a non-object body is a
    `non_field_errors` error; unknown fields are refused first, naming them and the allowed
    fields; then each field runs, then the class's `validate_<name>` (a staticmethod here).
    """
    if data is empty:
        data = {}
    if data is None:
        raise serializers.ValidationError({"non_field_errors": [NULL_BODY_MESSAGE]}, code="null")
    if not isinstance(data, Mapping):
        message = NOT_AN_OBJECT_BODY_MESSAGE.format(datatype=type(data).__name__)
        raise serializers.ValidationError({"non_field_errors": [message]}, code="invalid")
    fields = serializer_class._declared_fields  # type: ignore[attr-defined]
    unknown = sorted(member_name(key) for key in data if key not in fields)
    if unknown:
        allowed = sorted(name for name, field in fields.items() if not field.read_only)
        message = UNKNOWN_FIELD_MESSAGE.format(allowed=", ".join(allowed) or "none")
        raise serializers.ValidationError({key: [message] for key in unknown})
    values: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    for name, field in fields.items():
        try:
            value = field.run_validation(data.get(name, empty))
            check = getattr(serializer_class, f"validate_{name}", None)
            values[name] = check(value) if check is not None else value
        except serializers.ValidationError as exc:
            errors[name] = exc.detail
        except SkipField:
            pass
    if errors:
        raise serializers.ValidationError(errors)
    return values


def validate_value(name: str, value: Any, field: serializers.Field | None = None) -> Any:
    """One value from outside the body (a path segment, a header), checked like a body field
    (a name by default: 1-200 characters, no control characters) and reported under `name`."""
    try:
        return (field or NameField()).run_validation(value)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({name: exc.detail}) from exc


class EnumField(serializers.ChoiceField):
    """A choice field whose error names the allowed values (docs/api.md "Basics")."""

    def __init__(self, choices: Any, **kwargs: Any) -> None:
        super().__init__(choices, **kwargs)
        allowed = ", ".join(str(key) for key in self.choices)
        self.error_messages["invalid_choice"] = INVALID_CHOICE_MESSAGE.replace("{allowed}", allowed)


class NameField(serializers.CharField):
    """A skill or tool name: 1-200 characters, no control characters."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_length", 1)
        kwargs.setdefault("max_length", 200)
        kwargs.setdefault("trim_whitespace", False)
        # Only the built-in checks (length, NUL, surrogates) can be taken on the fast path.
        self._plain = "validators" not in kwargs
        super().__init__(**kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # The common case, checked directly: decisions validate several names per call,
        # and DRF's validator chain costs more than the decision. ASCII rules out lone
        # surrogates; anything else takes the full path, which words every error.
        if (
            type(data) is str
            and data.isascii()
            and self.min_length <= len(data) <= self.max_length  # type: ignore[operator]
            and not _CONTROL_CHARS.search(data)
            and self._plain
        ):
            return data
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        if _CONTROL_CHARS.search(value):
            raise serializers.ValidationError(CONTROL_CHARS_MESSAGE)
        return value


class OptionalIdField(NameField):
    """`session_id`, `invoking_session_id`, `turn_id`, `principal`: 1-200 chars or null."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        kwargs.setdefault("default", None)
        super().__init__(**kwargs)
