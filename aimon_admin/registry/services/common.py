"""What the registry's writes share: the error they raise, its messages, and how a tool's
resolved axes are applied and recorded (T11, T12)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy
from aimon_admin.registry.choices import RelayFindingStatus
from aimon_admin.registry.models import TOOL_DESCRIPTION_MAX, RelayFinding, Tool

DEFINITION_NOT_AWAITING_REVIEW = "This tool's definition is not waiting for review."
FINDING_NOT_OPEN = "This relay finding is no longer open: it was already accepted or dismissed."
REVIEW_WRITES_ONLY = (
    "Only tools that write are reviewed for their destructive trait: a read-only tool destroys nothing."
)
RELAY_NEEDS_RUNTIME = "A relayed listing is recorded only with the runtime that relayed it."
# Why an open relay finding was closed without an operator deciding it (its audit event says).
SERVED_BY_SYNC = "the server's own sync lists the same definition"
SERVED_BY_ACCEPTANCE = "an operator accepted the same definition, relayed by another runtime"


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
    resolution = policy.resolve(
        tool.claims, trust, held_for_review=tool.awaiting_review, relayed_only=tool.relayed_only
    )
    _apply_resolution(tool, resolution, now)


def _stored_description(description: Any) -> str:
    """A description as the tool row keeps it: text only (T10: another type counts as
    none), cut to TOOL_DESCRIPTION_MAX with an ellipsis."""
    if not isinstance(description, str):
        return ""
    if len(description) <= TOOL_DESCRIPTION_MAX:
        return description
    return description[: TOOL_DESCRIPTION_MAX - 1] + "…"


def _close_served_findings(served: list[Tool], now: dt.datetime, actor: Actor, *, why: str) -> None:
    """T15: an open relay finding whose definition is now the one every runtime is served
    (by the server's own sync, or an operator's acceptance) has nothing left to decide: it
    is closed as accepted, with `why`, and audited."""
    fingerprints = {tool.pk: tool.fingerprint for tool in served}
    findings = [
        finding
        for finding in RelayFinding.objects.select_for_update(of=("self",))
        .filter(tool_id__in=fingerprints, status=RelayFindingStatus.OPEN)
        .select_related("tool__server", "runtime")
        if fingerprints[finding.tool_id] == finding.fingerprint
    ]
    if not findings:
        return
    RelayFinding.objects.filter(
        pk__in=[finding.pk for finding in findings], status=RelayFindingStatus.OPEN
    ).update(status=RelayFindingStatus.ACCEPTED, closed_by=actor.user, closed_at=now)
    for finding in findings:
        tool = finding.tool
        audit_record(
            action=AuditAction.RELAY_FINDING_ACCEPTED,
            actor=actor,
            runtime=finding.runtime,
            subject_type="tool",
            subject=f"{tool.server.name}/{tool.name}",
            details={
                "finding_id": finding.pk,
                "server": tool.server.name,
                "tool": tool.name,
                "relayed_by": finding.runtime.name,
                "fingerprint": finding.fingerprint,
                "why": why,
            },
        )
