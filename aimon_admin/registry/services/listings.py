"""MCP tool listings: the project's own sync, or a runtime's relay, each definition resolved
once (T10-T12), drift held for review and relays kept as findings (T15). Only the sync
marks a tool present or absent; a relay serves nothing new."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy
from aimon_admin.registry.choices import (
    RelayFindingStatus,
    ToolSource,
)
from aimon_admin.registry.models import McpServer, RelayFinding, Tool
from aimon_admin.registry.services.common import (
    RELAY_NEEDS_RUNTIME,
    SERVED_BY_SYNC,
    RegistryError,
    _audit_claims,
    _axes_dict,
    _close_served_findings,
    _resolve_mcp,
    _stored_description,
)
from aimon_admin.runtimes.models import AgentRuntime

# --- MCP tool listings (the project's own sync, or relayed by a runtime) -------------------------


@dataclass
class ListingResult:
    tools: list[Tool]
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    held_for_review: list[str] = field(default_factory=list)
    # T15: relayed tools whose definition differs from the served one, or that no runtime
    # is served, kept as findings.
    findings: list[RelayFinding] = field(default_factory=list)


def _listing_item(item: Mapping[str, Any]) -> tuple[str, Any, Any, Any]:
    return item["name"], item.get("description"), item.get("inputSchema"), item.get("annotations")


@transaction.atomic
def mcp_tools_record(
    *,
    server: McpServer,
    listing: Sequence[Mapping[str, Any]],
    actor: Actor,
    complete: bool,
) -> ListingResult:
    """Store a server's `tools/list` result and resolve each tool once (T10-T12, T15).

    `complete` is true for the project's own sync, which saw every page: the server's own
    word. Its tools are served; tools it did not see are marked absent (never deleted). A
    changed definition is audited with its old and new claims; one whose resolved axes are
    less risky than the accepted definition's is held as IGNORE until an operator accepts
    it; one that claims more takes effect at once (T15).

    `complete` is false for a runtime's relayed listing (`actor` names the runtime): that
    runtime's word only (T15). It changes no tool but to raise an axis, and serves nothing
    new: what it relays differently from the served definition, and whatever it relays of
    a tool no runtime is served (never listed by the sync, or no longer), is kept as a
    relay finding attributed to the runtime.
    """
    relayed_by = actor.runtime
    if not complete and relayed_by is None:
        raise ValueError(RELAY_NEEDS_RUNTIME)
    names = [item["name"] for item in listing]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise RegistryError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    now = timezone.now()
    # Read trust under the server's lock, as mcp_server_set_trust changes it: the caller's
    # server may be stale (a sync fetches for seconds first), and resolving under a trust
    # that was changed meanwhile would undo that change for these tools (T13). Relays of
    # the same server wait for each other here, so a tool is created once.
    server = McpServer.objects.select_for_update().get(pk=server.pk)
    trust = server.annotation_trust
    existing = {
        tool.name: tool
        for tool in Tool.objects.select_for_update().filter(server=server).select_related("server")
    }
    if complete or relayed_by is None:
        result = _record_listed(server, listing, existing, trust, now, actor)
    else:
        result = _record_relayed(server, listing, existing, trust, now, relayed_by, actor)
    _audit_registrations(server, trust, complete, result, actor)
    return result


def _record_listed(
    server: McpServer,
    listing: Sequence[Mapping[str, Any]],
    existing: dict[str, Tool],
    trust: str,
    now: dt.datetime,
    actor: Actor,
) -> ListingResult:
    """The project's own sync: the only listing that marks tools present or absent."""
    result = ListingResult(tools=[])
    new_tools: list[Tool] = []
    seen_unchanged: list[int] = []
    for item in listing:
        name, description, schema, annotations = _listing_item(item)
        fingerprint = policy.definition_fingerprint(name, description, schema, annotations)
        tool = existing.get(name)
        if tool is None:
            tool = Tool(source=ToolSource.MCP, server=server, name=name)
            _first_listed(tool, description, schema, annotations, fingerprint, now, trust)
            new_tools.append(tool)
            result.added.append(name)
            continue
        result.tools.append(tool)
        if tool.relayed_only:
            # Only relayed until now: the server's own word makes it served, as a new tool.
            _first_listed(tool, description, schema, annotations, fingerprint, now, trust)
            tool.save()
            result.added.append(name)
        elif tool.fingerprint == fingerprint:
            if not tool.present:
                tool.present, tool.absent_since, tool.last_seen_at = True, None, now
                tool.save(update_fields=["present", "absent_since", "last_seen_at"])
                result.added.append(name)
            else:
                seen_unchanged.append(tool.pk)
        else:
            _definition_changed(tool, description, schema, annotations, fingerprint, now, trust, actor)
            result.changed.append(name)
            if tool.awaiting_review:
                result.held_for_review.append(name)

    if new_tools:
        result.tools.extend(Tool.objects.bulk_create(new_tools))
    if seen_unchanged:
        Tool.objects.filter(pk__in=seen_unchanged).update(last_seen_at=now)
    seen = {item["name"] for item in listing}
    gone = [tool for name, tool in existing.items() if name not in seen and tool.present]
    if gone:
        Tool.objects.filter(pk__in=[tool.pk for tool in gone]).update(present=False, absent_since=now)
        result.absent = sorted(tool.name for tool in gone)
    _close_served_findings(result.tools, now, actor, why=SERVED_BY_SYNC)
    return result


def _first_listed(
    tool: Tool,
    description: Any,
    schema: Any,
    annotations: Any,
    fingerprint: str,
    now: dt.datetime,
    trust: str,
) -> None:
    """A tool the server's own sync lists for the first time: its definition, accepted as
    first seen, served."""
    tool.description = _stored_description(description)
    tool.input_schema = schema if schema is not None else {}
    tool.claims, tool.fingerprint = annotations, fingerprint
    tool.accepted_claims, tool.accepted_fingerprint = annotations, fingerprint
    tool.awaiting_review = False
    tool.present, tool.absent_since, tool.last_seen_at = True, None, now
    _resolve_mcp(tool, trust, now)


def _record_relayed(
    server: McpServer,
    listing: Sequence[Mapping[str, Any]],
    existing: dict[str, Tool],
    trust: str,
    now: dt.datetime,
    runtime: AgentRuntime,
    actor: Actor,
) -> ListingResult:
    """A runtime's relay (T15). A tool nobody has listed gets a row with no definition,
    served to no runtime, so the relay can be kept as a finding on it; a served tool whose
    relayed definition is the served one is left as it is."""
    unknown = [
        Tool(source=ToolSource.MCP, server=server, name=item["name"], present=False, last_seen_at=now)
        for item in listing
        if item["name"] not in existing
    ]
    for tool in unknown:
        _resolve_mcp(tool, trust, now)
    existing.update((tool.name, tool) for tool in Tool.objects.bulk_create(unknown))
    result = ListingResult(tools=[])
    for item in listing:
        name, description, schema, annotations = _listing_item(item)
        fingerprint = policy.definition_fingerprint(name, description, schema, annotations)
        tool = existing[name]
        result.tools.append(tool)
        if not tool.present or tool.fingerprint != fingerprint:
            result.findings.append(_keep_relay_finding(tool, item, fingerprint, now, runtime, trust, actor))
    return result


def _audit_registrations(
    server: McpServer, trust: str, complete: bool, result: ListingResult, actor: Actor
) -> None:
    """A1: tools that appeared (new, or back from absent) or went absent, each with the
    claims it came with and the axes they resolved to. Changed definitions have their own
    per-tool events (TOOL_DEFINITION_CHANGED / _ACCEPTED)."""
    added = set(result.added)
    if not added and not result.absent:
        return
    registered = [
        {
            "tool": tool.name,
            "claims": _audit_claims(tool.claims),
            "axes": _axes_dict(tool),
            "held_for_review": tool.awaiting_review,
        }
        for tool in sorted(result.tools, key=lambda tool: tool.name)
        if tool.name in added
    ]
    audit_record(
        action=AuditAction.MCP_TOOLS_REGISTERED,
        actor=actor,
        subject_type="mcp_server",
        subject=server.name,
        details={
            "server": server.name,
            "trust": trust,
            "complete_listing": complete,
            "registered": registered,
            "absent": result.absent,
        },
    )


def _raise_for_relay(
    tool: Tool, annotations: Any, trust: str, now: dt.datetime, runtime: AgentRuntime, actor: Actor
) -> None:
    """T15: the axes the relayed claims resolve to under the server's trust, where riskier
    than the tool's, take effect at once (audited); the served text and claims do not
    change, and the raise lasts until the project's own sync or an operator resolves the
    tool again from the claims it is served with."""
    relayed = policy.resolve(annotations, trust, held_for_review=tool.awaiting_review).axes
    before = tool.axes
    raised = policy.axes_riskier(before, relayed)
    if raised == before.normalized():
        return
    before_axes = _axes_dict(tool)
    tool.side_effect_level, tool.destructive_behavior, tool.idempotency_behavior = (
        raised.level,
        raised.destructive,
        raised.idempotency,
    )
    changed = [axis for axis, value in _axes_dict(tool).items() if before_axes[axis] != value]
    explanations = dict(tool.explanations or {})
    for axis in changed:
        explanations[axis] = f"raised to {getattr(tool, axis)} by claims {runtime.name} relayed"
    tool.explanations = explanations
    tool.resolved_at = now
    tool.save(update_fields=[*changed, "explanations", "resolved_at"])
    audit_record(
        action=AuditAction.TOOL_DEFINITION_CHANGED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=runtime,
        subject_type="tool",
        subject=f"{tool.server.name}/{tool.name}",
        details={
            "server": tool.server.name,
            "tool": tool.name,
            "why": "a runtime relayed claims of more risk; they take effect at once",
            "relayed_by": runtime.name,
            "claims_relayed": _audit_claims(annotations),
            "claims_served": _audit_claims(tool.claims),
            "raised": changed,
            "axes_before": before_axes,
            "axes_after": _axes_dict(tool),
            "trust": trust,
        },
    )


def _keep_relay_finding(
    tool: Tool,
    item: Mapping[str, Any],
    fingerprint: str,
    now: dt.datetime,
    runtime: AgentRuntime,
    trust: str,
    actor: Actor,
) -> RelayFinding:
    """T15: a runtime relayed `tool` differently from the definition everyone is served, or
    relayed a tool no runtime is served. Kept verbatim as that runtime's open finding (one
    per definition), audited when first seen. The tool's description, input schema, claims
    and presence stay as they are; only an axis the relayed claims make riskier is raised
    at once (a claim of more risk takes effect at once, whoever made it; nothing a relay
    says lowers one)."""
    _, description, schema, annotations = _listing_item(item)
    _raise_for_relay(tool, annotations, trust, now, runtime, actor)
    finding = (
        RelayFinding.objects.select_for_update()
        .filter(tool=tool, runtime=runtime, fingerprint=fingerprint, status=RelayFindingStatus.OPEN)
        .first()
    )
    if finding is not None:
        RelayFinding.objects.filter(pk=finding.pk).update(
            last_seen_at=now, times_seen=models.F("times_seen") + 1
        )
        finding.refresh_from_db()
        return finding
    finding = RelayFinding.objects.create(
        tool=tool,
        runtime=runtime,
        description=description,
        input_schema=schema,
        annotations=annotations,
        fingerprint=fingerprint,
        first_seen_at=now,
        last_seen_at=now,
    )
    lowered = policy.claims_lowered_risk(tool.claims, annotations)
    audit_record(
        action=AuditAction.RELAY_FINDING_RECORDED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=runtime,
        subject_type="tool",
        subject=f"{tool.server.name}/{tool.name}",
        details={
            "finding_id": finding.pk,
            "server": tool.server.name,
            "tool": tool.name,
            "relayed_by": runtime.name,
            "fingerprint": fingerprint,
            "served": tool.present,
            "served_fingerprint": tool.fingerprint,
            "differs": policy.definition_differences(
                (tool.description, tool.input_schema, tool.claims), (description, schema, annotations)
            ),
            "description": _audit_claims(description),
            "input_schema": _audit_claims(schema),
            "annotations": _audit_claims(annotations),
            "served_claims": _audit_claims(tool.claims),
            "claims_less_risk": lowered,
            "trust": trust,
        },
    )
    return finding


def _definition_changed(
    tool: Tool,
    description: Any,
    schema: Any,
    annotations: Any,
    fingerprint: str,
    now: dt.datetime,
    trust: str,
    actor: Actor,
) -> None:
    before_claims, before_axes = tool.claims, _axes_dict(tool)
    lowered = policy.claims_lowered_risk(tool.accepted_claims, annotations)
    tool.description = _stored_description(description)
    tool.input_schema = schema if schema is not None else {}
    tool.claims = annotations
    tool.fingerprint = fingerprint
    tool.present, tool.absent_since, tool.last_seen_at = True, None, now
    if lowered:
        tool.awaiting_review = True  # the accepted definition stays the baseline
    else:
        tool.awaiting_review = False
        tool.accepted_claims = annotations
        tool.accepted_fingerprint = fingerprint
    _resolve_mcp(tool, trust, now)
    tool.save()
    audit_record(
        action=AuditAction.TOOL_DEFINITION_CHANGED,
        actor=actor,
        level=AuditLevel.WARNING if lowered else AuditLevel.INFO,
        subject_type="tool",
        subject=f"{tool.server.name}/{tool.name}",
        details={
            "server": tool.server.name,
            "tool": tool.name,
            "claims_before": _audit_claims(before_claims),
            "claims_after": _audit_claims(annotations),
            "claims_less_risk": lowered,
            "held_for_review": tool.awaiting_review,
            "axes_before": before_axes,
            "axes_after": _axes_dict(tool),
            "trust": trust,
        },
    )


@transaction.atomic
def mcp_tools_relay(
    *, server: McpServer, runtime: AgentRuntime, listing: Sequence[Mapping[str, Any]]
) -> ListingResult:
    """A runtime hands over a `tools/list` result it fetched itself (docs/api.md "MCP servers").
    Its word only: it serves nothing new and changes no tool but to raise an axis; what differs
    from the served definition, and any tool no runtime is served, is kept as a finding
    attributed to the runtime (T15)."""
    actor = Actor.for_runtime(runtime)
    result = mcp_tools_record(server=server, listing=listing, actor=actor, complete=False)
    audit_record(
        action=AuditAction.MCP_TOOLS_RELAYED,
        actor=actor,
        runtime=runtime,
        subject_type="mcp_server",
        subject=server.name,
        details={
            "tools": len(listing),
            "kept_as_findings": [
                {"tool": finding.tool.name, "finding_id": finding.pk}
                for finding in sorted(result.findings, key=lambda finding: finding.tool.name)
            ],
        },
    )
    return result
