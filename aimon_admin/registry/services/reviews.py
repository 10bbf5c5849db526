"""Operators' reviews: a changed definition accepted (T15), a destructive tool's finding (T2),
and relay findings accepted or dismissed (T15)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy, selectors
from aimon_admin.registry.choices import (
    RelayFindingStatus,
    ReviewFinding,
    SideEffectLevel,
)
from aimon_admin.registry.models import McpServer, RelayFinding, Tool
from aimon_admin.registry.services.common import (
    DEFINITION_NOT_AWAITING_REVIEW,
    FINDING_NOT_OPEN,
    REVIEW_WRITES_ONLY,
    SERVED_BY_ACCEPTANCE,
    RegistryError,
    _audit_claims,
    _axes_dict,
    _close_served_findings,
    _resolve_mcp,
    _stored_description,
)

# --- Reviews -----------------------------------------------------------------------------------


@transaction.atomic
def tool_accept_definition(*, tool: Tool, actor: Actor) -> Tool:
    """T15: an operator accepts a changed definition that claims less risk."""
    # Lock the tool row only: PostgreSQL refuses FOR UPDATE on the nullable side of the
    # outer join that select_related("server") makes.
    tool = Tool.objects.select_for_update(of=("self",)).select_related("server").get(pk=tool.pk)
    if not tool.awaiting_review or tool.server is None:
        raise RegistryError(DEFINITION_NOT_AWAITING_REVIEW)
    before_axes = _axes_dict(tool)
    previous_claims = tool.accepted_claims
    tool.awaiting_review = False
    tool.accepted_claims = tool.claims
    tool.accepted_fingerprint = tool.fingerprint
    _resolve_mcp(tool, tool.server.annotation_trust, timezone.now())
    tool.save()
    audit_record(
        action=AuditAction.TOOL_DEFINITION_ACCEPTED,
        actor=actor,
        level=AuditLevel.WARNING,
        subject_type="tool",
        subject=f"{tool.server.name}/{tool.name}",
        details={
            "server": tool.server.name,
            "tool": tool.name,
            "claims_before": _audit_claims(previous_claims),
            "claims_accepted": _audit_claims(tool.claims),
            "axes_before": before_axes,
            "axes_after": _axes_dict(tool),
        },
    )
    return tool


@transaction.atomic
def tool_record_review(*, tool: Tool, finding: str, note: str, actor: Actor) -> Tool:
    """Record an operator's finding on a MUTATING tool at the default DESTRUCTIVE (T2)."""
    finding = ReviewFinding(finding)
    tool = Tool.objects.select_for_update().get(pk=tool.pk)
    if tool.side_effect_level != SideEffectLevel.MUTATING:
        raise RegistryError(REVIEW_WRITES_ONLY)
    before = {"finding": tool.review_finding, "note": tool.review_note}
    tool.review_finding = finding
    tool.review_note = note
    tool.reviewed_by = actor.user
    tool.reviewed_at = timezone.now()
    tool.save(update_fields=["review_finding", "review_note", "reviewed_by", "reviewed_at"])
    audit_record(
        action=AuditAction.TOOL_REVIEW_RECORDED,
        actor=actor,
        runtime=tool.runtime,
        subject_type="tool",
        subject=str(tool),
        details={"before": before, "after": {"finding": finding, "note": note}},
    )
    return tool


# --- Relay findings (T15) ----------------------------------------------------------------------


def _close_finding(finding: RelayFinding, status: RelayFindingStatus, actor: Actor) -> RelayFinding:
    """Close an open finding exactly once: a conditional UPDATE (SQLite has no row locks)."""
    now = timezone.now()
    closed = RelayFinding.objects.filter(pk=finding.pk, status=RelayFindingStatus.OPEN).update(
        status=status, closed_by=actor.user, closed_at=now
    )
    if closed != 1:
        raise RegistryError(FINDING_NOT_OPEN)
    return RelayFinding.objects.select_related("tool__server", "runtime").get(pk=finding.pk)


@transaction.atomic
def relay_finding_accept(*, finding: RelayFinding, actor: Actor) -> RelayFinding:
    """T15: an operator makes a relayed definition the one every runtime is served.

    Resolved through the same `resolve()` under the server's current trust, with the
    usual drift rule: if its resolved axes are less risky than the accepted definition's,
    it is held as IGNORE until an operator also accepts that (tool_accept_definition). A
    tool no runtime was served (only relayed, or no longer listed by the sync) is served
    from now on, until the server's own sync no longer lists it.
    """
    finding = _close_finding(finding, RelayFindingStatus.ACCEPTED, actor)
    tool = Tool.objects.select_for_update(of=("self",)).select_related("server").get(pk=finding.tool_id)
    finding.tool = tool
    server = McpServer.objects.get(pk=tool.server_id)
    was_served = tool.present
    before = {
        "description": tool.description,
        "input_schema": _audit_claims(tool.input_schema),
        "claims": _audit_claims(tool.claims),
        "fingerprint": tool.fingerprint,
    }
    before_axes = _axes_dict(tool)
    differs = policy.definition_differences(
        (tool.description, tool.input_schema, tool.claims),
        (finding.description, finding.input_schema, finding.annotations),
    )
    lowered = selectors.relay_finding_lowers(finding)
    tool.description = _stored_description(finding.description)
    tool.input_schema = finding.input_schema if finding.input_schema is not None else {}
    tool.claims = finding.annotations
    tool.fingerprint = finding.fingerprint
    tool.present, tool.absent_since = True, None
    if lowered:
        tool.awaiting_review = True  # the accepted claims stay the baseline
    else:
        tool.awaiting_review = False
        tool.accepted_claims, tool.accepted_fingerprint = finding.annotations, finding.fingerprint
    _resolve_mcp(tool, server.annotation_trust, timezone.now())
    tool.save()
    audit_record(
        action=AuditAction.RELAY_FINDING_ACCEPTED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=finding.runtime,
        subject_type="tool",
        subject=f"{server.name}/{tool.name}",
        details={
            "finding_id": finding.pk,
            "server": server.name,
            "tool": tool.name,
            "relayed_by": finding.runtime.name,
            "differs": differs,
            "before": before,
            "after": {
                "description": tool.description,
                "input_schema": _audit_claims(tool.input_schema),
                "claims": _audit_claims(tool.claims),
                "fingerprint": tool.fingerprint,
            },
            "claims_less_risk": lowered,
            "held_for_review": tool.awaiting_review,
            "was_served": was_served,
            "axes_before": before_axes,
            "axes_after": _axes_dict(tool),
            "trust": server.annotation_trust,
        },
    )
    _close_served_findings([tool], timezone.now(), actor, why=SERVED_BY_ACCEPTANCE)
    return finding


@transaction.atomic
def relay_finding_dismiss(*, finding: RelayFinding, actor: Actor) -> RelayFinding:
    """T15: an operator dismisses a relayed definition; the served one stays as it is."""
    finding = _close_finding(finding, RelayFindingStatus.DISMISSED, actor)
    tool = finding.tool
    audit_record(
        action=AuditAction.RELAY_FINDING_DISMISSED,
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
        },
    )
    return finding
