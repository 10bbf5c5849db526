"""What the registry's writes share: the error they raise, its messages, and how a tool's
resolved axes are applied and recorded (T11, T12)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from aimon_admin.registry import policy
from aimon_admin.registry.models import TOOL_DESCRIPTION_MAX, Tool

DEFINITION_NOT_AWAITING_REVIEW = "This tool's definition is not waiting for review."
FINDING_NOT_OPEN = "This relay finding is no longer open: it was already accepted or dismissed."
REVIEW_WRITES_ONLY = (
    "Only tools that write are reviewed for their destructive trait: a read-only tool destroys nothing."
)
RELAY_NEEDS_RUNTIME = "A relayed listing is recorded only with the runtime that relayed it."


class RegistryError(ValueError):
    """A registry write refused for a reason the caller can show as it is."""


def _axes_dict(tool: Tool) -> dict[str, str]:
    return {
        "side_effect_level": tool.side_effect_level,
        "destructive_behavior": tool.destructive_behavior,
        "idempotency_behavior": tool.idempotency_behavior,
    }


def _audit_claims(value: Any) -> Any:
    """Claims as the audit log can hold them. It refuses floats (PostgreSQL's jsonb may
    rewrite them and break the hash), and claims are any JSON a server sent (T10), so a
    float is recorded as its JSON text; the tool row keeps the claims verbatim."""
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return {str(key): _audit_claims(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_audit_claims(item) for item in value]
    return value


def _apply_resolution(tool: Tool, resolution: policy.Resolution, now: dt.datetime) -> None:
    tool.side_effect_level = resolution.axes.level
    tool.destructive_behavior = resolution.axes.destructive
    tool.idempotency_behavior = resolution.axes.idempotency
    tool.open_world_hint = resolution.open_world
    tool.explanations = resolution.explanations
    tool.claim_warnings = list(resolution.warnings)
    tool.resolved_at = now
    tool.resolved_under_trust = resolution.trust or ""


def _resolve_mcp(tool: Tool, trust: str, now: dt.datetime) -> None:
    _apply_resolution(tool, policy.resolve(tool.claims, trust, held_for_review=tool.awaiting_review), now)


def _stored_description(description: Any) -> str:
    """A description as the tool row keeps it: text only (T10: another type counts as
    none), cut to TOOL_DESCRIPTION_MAX with an ellipsis."""
    if not isinstance(description, str):
        return ""
    if len(description) <= TOOL_DESCRIPTION_MAX:
        return description
    return description[: TOOL_DESCRIPTION_MAX - 1] + "…"
