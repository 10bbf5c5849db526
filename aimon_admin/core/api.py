"""The runtime API's shared pieces: error shapes, strict input, reusable fields.

Every API error is JSON of one shape::

    {"error": "<code>", "detail": "<sentence>", "fields": {"<field>": ["<message>", ...]}}

`fields` appears only on validation errors and names each offending field, unknown
ones included (API.md: a typo like ``sesion_id`` must never be read as "no session").
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from aimon_admin.core.middleware import BODY_TOO_LARGE_MESSAGE

logger = logging.getLogger(__name__)

UNKNOWN_FIELD_MESSAGE = "Unknown field. Allowed fields: {allowed}."
INVALID_CHOICE_MESSAGE = '"{input}" is not a valid value. Allowed values: {allowed}.'
CONTROL_CHARS_MESSAGE = "Must not contain control characters."
NESTED_TOO_DEEP_MESSAGE = "The JSON body is nested too deeply."
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


def error_body(status_code: int, detail: str, fields: dict[str, Any] | None = None) -> dict:
    body: dict[str, Any] = {"error": _CODES_BY_STATUS.get(status_code, "error"), "detail": detail}
    if fields:
        body["fields"] = fields
    return body


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Turn every exception an API view can meet into a 4xx (or a 503) JSON body."""
    if isinstance(exc, RecursionError):
        return Response(error_body(400, NESTED_TOO_DEEP_MESSAGE), status=400)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body(413, BODY_TOO_LARGE_MESSAGE), status=413)
    if isinstance(exc, (OperationalError, InterfaceError)):
        # Fail closed: the caller gets no decision at all, never a silent ALLOW.
        logger.error("database unavailable: %s", exc)
        return Response(error_body(503, UNAVAILABLE_MESSAGE), status=503, headers={"Retry-After": "5"})
    if isinstance(exc, DatabaseError):
        return None
    if isinstance(exc, Http404):
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
            unknown = sorted(str(key) for key in data if key not in allowed)
            if unknown:
                message = UNKNOWN_FIELD_MESSAGE.format(allowed=", ".join(allowed) or "none")
                raise serializers.ValidationError({key: [message] for key in unknown})
        return super().to_internal_value(data)


class EnumField(serializers.ChoiceField):
    """A choice field whose error names the allowed values (API.md)."""

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
