"""Input and output shapes of the registry's runtime API (docs/api.md "Tools", "MCP servers").

Input serializers are strict (unknown fields are 400, naming them), except inside an
MCP `tools/list` item, which is a server's verbatim output: its unknown fields are kept
out of the way, never refused (T10). Output serializers only document the responses;
the views build plain dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.settings import api_settings

from aimon_admin.core.api import (
    EnumField,
    NameField,
    StrictSerializer,
)
from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    IdempotencyBehavior,
    McpTransport,
    SideEffectLevel,
    ToolSource,
)
from aimon_admin.registry.models import TOOL_DESCRIPTION_MAX

MAX_TOOLS = 2000
MAX_JSON_DEPTH = 64

DUPLICATE_NAMES_MESSAGE = "Tool names must be unique; repeated: {names}."
NOT_AN_OBJECT_MESSAGE = "Must be a JSON object."
NOT_STORABLE_NUL = "Must not contain NUL characters (\\u0000), which cannot be stored."
NOT_STORABLE_SURROGATE = "Must not contain unpaired surrogates (\\ud800-\\udfff), which are not Unicode text."
NOT_STORABLE_NUMBER = "Numbers must be finite; {value!r} is out of range."
NOT_STORABLE_DEPTH = f"Nested deeper than {MAX_JSON_DEPTH} levels."
SURROGATE_MESSAGE = "Must not contain unpaired surrogates."


# --- JSON that the database can hold exactly as sent -------------------------------------------


def _text_problem(value: str) -> str | None:
    if "\x00" in value:
        return NOT_STORABLE_NUL
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return NOT_STORABLE_SURROGATE
    return None


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why `value` (parsed JSON) cannot be stored as sent on both databases, or None.

    PostgreSQL's jsonb refuses NUL and non-finite numbers (`1e999` parses as infinity);
    neither database can encode a lone surrogate. Storing such a value would fail inside
    the transaction, so it is refused up front as a 400, never a 5xx.
    """
    if depth > MAX_JSON_DEPTH:
        return NOT_STORABLE_DEPTH
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, float):
        return None if math.isfinite(value) else NOT_STORABLE_NUMBER.format(value=value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = (_text_problem(key) if isinstance(key, str) else None) or json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for item in value:
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
    return None


class ToolNameField(NameField):
    """A tool name (1-200 characters, no control characters) that the database can hold."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if _text_problem(value):
            raise serializers.ValidationError(SURROGATE_MESSAGE)
        return value


class TextField(serializers.CharField):
    """Free text as sent: a string (not a number turned into one) that the database can hold."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        problem = _text_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value


class StorableJSONField(serializers.JSONField):
    """Any JSON value, refused (400) only when the database could not hold it as sent."""

    def to_internal_value(self, data: Any) -> Any:
        problem = json_problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data


class JSONObjectField(serializers.DictField):
    """A JSON object, stored as sent."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError(NOT_AN_OBJECT_MESSAGE)
        problem = json_problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data


def _unique_names(items: list[Mapping[str, Any]]) -> None:
    seen: set[str] = set()
    repeated: set[str] = set()
    for item in items:
        (repeated if item["name"] in seen else seen).add(item["name"])
    if repeated:
        raise serializers.ValidationError(DUPLICATE_NAMES_MESSAGE.format(names=", ".join(sorted(repeated))))


# --- Errors -------------------------------------------------------------------------------------


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, Any]:
    """Name each error by its path (`tools[3].nmae`), so the message says where it is.

    DRF reports errors inside a list of objects as a list aligned with the items (empty
    for good ones) or a dict keyed by index; both become `field[index].subfield`. An
    error about a nested list or item itself is named by its path alone.
    """
    if isinstance(detail, Mapping):
        out: dict[str, Any] = {}
        for key, value in detail.items():
            if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
                path = f"{prefix}[{key}]"
            elif key == api_settings.NON_FIELD_ERRORS_KEY and prefix:
                path = prefix  # an error about the list or item itself
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten_errors(value, path))
        return out
    if isinstance(detail, list) and detail and all(isinstance(item, Mapping) for item in detail):
        out = {}
        for index, item in enumerate(detail):
            if item:
                out.update(flatten_errors(item, f"{prefix}[{index}]"))
        return out
    return {prefix or "non_field_errors": detail}


# --- PUT /api/v1/tools ----------------------------------------------------------------------------


class LocalToolIn(StrictSerializer):
    """One of the runtime's own tools. An omitted (or null) axis takes its worst default."""

    name = ToolNameField()
    description = TextField(required=False, allow_blank=True, default="", max_length=TOOL_DESCRIPTION_MAX)
    input_schema = JSONObjectField(required=False, default=dict)
    side_effect_level = EnumField(SideEffectLevel.choices, required=False, allow_null=True)
    destructive_behavior = EnumField(DestructiveBehavior.choices, required=False, allow_null=True)
    idempotency_behavior = EnumField(IdempotencyBehavior.choices, required=False, allow_null=True)


class LocalCatalogIn(StrictSerializer):
    tools = LocalToolIn(many=True, max_length=MAX_TOOLS)

    def validate_tools(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _unique_names(value)
        return value


class LocalCatalogOut(serializers.Serializer):
    registered = serializers.IntegerField(help_text="How many tools the catalog now has.")
    added = serializers.ListField(child=serializers.CharField())
    changed = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(
        child=serializers.CharField(), help_text="Left out of this catalog: marked absent, never deleted."
    )


# --- GET /api/v1/tools ----------------------------------------------------------------------------


class ToolOut(serializers.Serializer):
    name = serializers.CharField()
    source = serializers.ChoiceField(ToolSource.choices)
    server = serializers.CharField(allow_null=True, help_text="The MCP server's name; null for a local tool.")
    side_effect_level = serializers.ChoiceField(SideEffectLevel.choices)
    destructive_behavior = serializers.ChoiceField(DestructiveBehavior.choices)
    idempotency_behavior = serializers.ChoiceField(IdempotencyBehavior.choices)
    read_only = serializers.BooleanField()
    description = serializers.CharField()
    input_schema = serializers.JSONField()
    held_for_review = serializers.BooleanField(
        help_text="Its server's latest sync claims less risk than was accepted; held at the "
        "worst axes until an operator reviews it."
    )


# --- MCP servers ----------------------------------------------------------------------------------


class McpServerOut(serializers.Serializer):
    name = serializers.CharField()
    transport = serializers.ChoiceField(McpTransport.choices)
    command = serializers.CharField()
    args = serializers.ListField(child=serializers.CharField())
    url = serializers.CharField()
    timeout_seconds = serializers.IntegerField()
    annotation_trust = serializers.ChoiceField(AnnotationTrust.choices)


class McpListedToolIn(serializers.Serializer):
    """One item of a `tools/list` result, as the server sent it. Fields other than these
    four are ignored, never refused: this is the server's output, not the runtime's."""

    name = ToolNameField()
    description = StorableJSONField(required=False, allow_null=True)
    inputSchema = StorableJSONField(required=False, allow_null=True)  # MCP's own spelling
    annotations = StorableJSONField(
        required=False, allow_null=True, help_text="The server's claims, stored verbatim."
    )


class McpListingIn(StrictSerializer):
    tools = McpListedToolIn(many=True, max_length=MAX_TOOLS)

    def validate_tools(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _unique_names(value)
        return value


class ResolvedToolOut(serializers.Serializer):
    name = serializers.CharField()
    side_effect_level = serializers.ChoiceField(SideEffectLevel.choices)
    destructive_behavior = serializers.ChoiceField(DestructiveBehavior.choices)
    idempotency_behavior = serializers.ChoiceField(IdempotencyBehavior.choices)
    read_only = serializers.BooleanField()
    held_for_review = serializers.BooleanField(
        help_text="The definition changed to claim less risk: resolved as IGNORE until an operator "
        "accepts it."
    )
    warnings = serializers.ListField(child=serializers.CharField())
    kept_as_finding = serializers.BooleanField(
        help_text="The relayed definition differs from the one every runtime is served, or the tool "
        "is served to no runtime (the server's own sync has not listed it, or no longer lists it): "
        "it was kept as a relay finding for operators, attributed to this runtime, and is not "
        "served. The axes above are the registered tool's (a tool only relayed has the worst)."
    )
    finding_id = serializers.IntegerField(
        allow_null=True, help_text="The relay finding that holds this relayed definition, or null."
    )
