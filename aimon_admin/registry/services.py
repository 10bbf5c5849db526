"""Writes for the registry: tool catalogs, MCP servers, trust, drift reviews (T10-T15).

Resolution runs here, once, when a definition is registered or synced (T12); nothing
reads claims at decision time.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from django.db import models, transaction
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy
from aimon_admin.registry.choices import (
    AnnotationTrust,
    RelayFindingStatus,
    ReviewFinding,
    SideEffectLevel,
    SyncStatus,
    ToolSource,
)
from aimon_admin.registry.models import TOOL_DESCRIPTION_MAX, McpServer, McpSyncRun, RelayFinding, Tool
from aimon_admin.runtimes.models import AgentRuntime

DEFINITION_NOT_AWAITING_REVIEW = "This tool's definition is not waiting for review."
FINDING_NOT_OPEN = "This relay finding is no longer open: it was already accepted or dismissed."
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


# --- A runtime's own tools ---------------------------------------------------------------------


@dataclass
class CatalogResult:
    registered: int
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


LOCAL_AXES = ("side_effect_level", "destructive_behavior", "idempotency_behavior")


@transaction.atomic
def local_tools_replace(
    *, runtime: AgentRuntime, tools: Sequence[Mapping[str, Any]], actor: Actor
) -> CatalogResult:
    """Replace a runtime's local catalog whole (PUT /api/v1/tools).

    Each item: name, description, input_schema and the declared axes (absent = the
    worst default, T1-T3). Tools left out are marked absent, never deleted.
    """
    names = [item["name"] for item in tools]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise RegistryError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    now = timezone.now()
    # One catalog replacement per runtime at a time: locking its existing tools does not stop
    # two replacements from both inserting the same new name (a unique violation, a 5xx).
    AgentRuntime.objects.select_for_update().only("pk").get(pk=runtime.pk)
    existing = {tool.name: tool for tool in Tool.objects.select_for_update().filter(runtime=runtime)}
    result = CatalogResult(registered=len(tools))
    unchanged: list[int] = []
    changes: list[dict[str, Any]] = []
    for item in tools:
        declared = {axis: item[axis] for axis in LOCAL_AXES if item.get(axis)}
        description = item.get("description") or ""
        schema = item.get("input_schema") or {}
        fingerprint = policy.definition_fingerprint(item["name"], description, schema, declared)
        tool = existing.get(item["name"])
        if tool is not None and tool.fingerprint == fingerprint and tool.present:
            unchanged.append(tool.pk)
            continue
        if tool is None:
            tool = Tool(source=ToolSource.LOCAL, runtime=runtime, name=item["name"])
            result.added.append(tool.name)
            before = None
        else:
            before = _axes_dict(tool) if tool.present else None
            if tool.fingerprint != fingerprint:
                result.changed.append(tool.name)
            else:
                result.added.append(tool.name)  # was absent, back unchanged
        tool.description = _stored_description(description)
        tool.input_schema = schema
        tool.claims = declared
        tool.fingerprint = fingerprint
        tool.accepted_claims = declared
        tool.accepted_fingerprint = fingerprint
        tool.present = True
        tool.absent_since = None
        tool.last_seen_at = now
        _apply_resolution(tool, policy.resolve_declared(declared), now)
        tool.save()
        changes.append({"name": tool.name, "before": before, "after": _axes_dict(tool)})
    if unchanged:
        Tool.objects.filter(pk__in=unchanged).update(last_seen_at=now)
    gone = [tool for name, tool in existing.items() if name not in set(names) and tool.present]
    if gone:
        Tool.objects.filter(pk__in=[tool.pk for tool in gone]).update(present=False, absent_since=now)
        result.removed = sorted(tool.name for tool in gone)
    if result.added or result.changed or result.removed:
        audit_record(
            action=AuditAction.LOCAL_TOOLS_REPLACED,
            actor=actor,
            runtime=runtime,
            subject_type="runtime",
            subject=runtime.name,
            details={
                "registered": result.registered,
                "added": sorted(result.added),
                "changed": sorted(result.changed),
                "removed": result.removed,
                "axes": changes,
            },
        )
    return result


# --- MCP tool listings (the project's own sync, or relayed by a runtime) -------------------------


@dataclass
class ListingResult:
    tools: list[Tool]
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    held_for_review: list[str] = field(default_factory=list)
    # T15: relayed tools whose definition differs from the served one, kept as findings.
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

    `complete` is true for the project's own sync, which saw every page: tools it did
    not see are marked absent (never deleted). A changed definition from the sync is
    audited with its old and new claims; one whose resolved axes are less risky than the
    accepted definition's is held as IGNORE until an operator accepts it; one that claims
    more takes effect at once (T15).

    `complete` is false for a runtime's relayed listing (`actor` names the runtime): it is
    that runtime's word only. A tool nobody listed before is added, held as IGNORE; a
    known tool is never changed by it (description, input schema, claims, axes, hold):
    a definition that differs from the served one is kept as a relay finding for
    operators, attributed to the runtime (T15).
    """
    if not complete and actor.runtime is None:
        raise ValueError(RELAY_NEEDS_RUNTIME)
    names = [item["name"] for item in listing]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise RegistryError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    now = timezone.now()
    # Read trust under the server's lock, as mcp_server_set_trust changes it: the caller's
    # server may be stale (a sync fetches for seconds first), and resolving under a trust
    # that was changed meanwhile would undo that change for these tools (T13).
    server = McpServer.objects.select_for_update().get(pk=server.pk)
    trust = server.annotation_trust
    existing = {
        tool.name: tool
        for tool in Tool.objects.select_for_update().filter(server=server).select_related("server")
    }
    result = ListingResult(tools=[])
    new_tools: list[Tool] = []
    seen_unchanged: list[int] = []

    for item in listing:
        name, description, schema, annotations = _listing_item(item)
        fingerprint = policy.definition_fingerprint(name, description, schema, annotations)
        tool = existing.get(name)
        if tool is None:
            tool = Tool(
                source=ToolSource.MCP,
                server=server,
                name=name,
                description=_stored_description(description),
                input_schema=schema if schema is not None else {},
                claims=annotations,
                fingerprint=fingerprint,
                last_seen_at=now,
            )
            if complete:
                tool.accepted_claims, tool.accepted_fingerprint = annotations, fingerprint
            else:
                # T15: a tool first heard of from a runtime is not the server's word; it
                # resolves as IGNORE until the project's own sync or an operator confirms it.
                tool.awaiting_review = True
                result.held_for_review.append(name)
            _resolve_mcp(tool, trust, now)
            new_tools.append(tool)
            result.added.append(name)
            continue
        if complete and not tool.accepted_fingerprint:
            # The project's own sync is the first to vouch for a tool a runtime relayed.
            _confirm_relayed(tool, description, schema, annotations, fingerprint, now, trust, actor)
            result.changed.append(name)
            result.tools.append(tool)
            continue
        if not complete and tool.fingerprint != fingerprint:
            result.findings.append(
                _keep_relay_finding(tool, item, fingerprint, now, actor.runtime, trust, actor)
            )
            result.tools.append(tool)
            continue
        if tool.fingerprint == fingerprint:
            if not tool.present:
                tool.present, tool.absent_since, tool.last_seen_at = True, None, now
                tool.save(update_fields=["present", "absent_since", "last_seen_at"])
                result.added.append(name)
            else:
                seen_unchanged.append(tool.pk)
            result.tools.append(tool)
            continue
        _definition_changed(tool, description, schema, annotations, fingerprint, now, trust, actor)
        result.changed.append(name)
        if tool.awaiting_review:
            result.held_for_review.append(name)
        result.tools.append(tool)

    if new_tools:
        result.tools.extend(Tool.objects.bulk_create(new_tools))
    if seen_unchanged:
        Tool.objects.filter(pk__in=seen_unchanged).update(last_seen_at=now)
    if complete:
        seen = set(names)
        gone = [tool for name, tool in existing.items() if name not in seen and tool.present]
        if gone:
            Tool.objects.filter(pk__in=[tool.pk for tool in gone]).update(present=False, absent_since=now)
            result.absent = sorted(tool.name for tool in gone)
    _audit_registrations(server, trust, complete, result, actor)
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


def _stored_description(description: Any) -> str:
    """A description as the tool row keeps it: text only (T10: another type counts as
    none), cut to TOOL_DESCRIPTION_MAX with an ellipsis."""
    if not isinstance(description, str):
        return ""
    if len(description) <= TOOL_DESCRIPTION_MAX:
        return description
    return description[: TOOL_DESCRIPTION_MAX - 1] + "…"


def _confirm_relayed(
    tool: Tool,
    description: Any,
    schema: Any,
    annotations: Any,
    fingerprint: str,
    now: dt.datetime,
    trust: str,
    actor: Actor,
) -> None:
    before_axes = _axes_dict(tool)
    tool.description = _stored_description(description)
    tool.input_schema = schema if schema is not None else {}
    tool.claims = annotations
    tool.fingerprint = fingerprint
    tool.accepted_claims, tool.accepted_fingerprint = annotations, fingerprint
    tool.awaiting_review = False
    tool.present, tool.absent_since, tool.last_seen_at = True, None, now
    _resolve_mcp(tool, trust, now)
    tool.save()
    audit_record(
        action=AuditAction.TOOL_DEFINITION_ACCEPTED,
        actor=actor,
        subject_type="tool",
        subject=f"{tool.server.name}/{tool.name}",
        details={
            "server": tool.server.name,
            "tool": tool.name,
            "why": "first listed by a runtime; now confirmed by the server's own tools/list",
            "claims_accepted": _audit_claims(annotations),
            "axes_before": before_axes,
            "axes_after": _axes_dict(tool),
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
    """T15: a runtime relayed `tool` differently from the definition everyone is served.
    Kept verbatim as that runtime's open finding (one per definition), audited when first
    seen. The served description, input schema and claims stay as they are; only an axis
    the relayed claims make riskier is raised at once (a claim of more risk takes effect
    at once, whoever made it; nothing a relay says lowers one)."""
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
    """A runtime hands over a `tools/list` result it fetched itself (API.md). Its word
    only: new tools are held as IGNORE, known ones never change; what differs from the
    served definition is kept as a finding attributed to the runtime (T15)."""
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
            "added": sorted(result.added),
            "changed": sorted(result.changed),
            "held_for_review": sorted(result.held_for_review),
            "kept_as_findings": [
                {"tool": finding.tool.name, "finding_id": finding.pk}
                for finding in sorted(result.findings, key=lambda finding: finding.tool.name)
            ],
        },
    )
    return result


# --- MCP servers -------------------------------------------------------------------------------

# Names the server pages' own URLs use (/registry/servers/new/).
RESERVED_SERVER_NAMES = frozenset({"new"})
SERVER_FIELDS = ("transport", "command", "args", "env", "url", "headers", "timeout_seconds", "enabled")
SECRET_FIELDS = ("env", "headers")


def _redact_url(url: str) -> str:
    """A URL for the audit log: credentials and query values are secrets, so they go."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"***@{host}" if parts.username or parts.password else host
    query = "&".join(f"{key}=***" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _server_snapshot(server: McpServer) -> dict[str, Any]:
    """The server's settings for the audit log; env and header values are secrets, so
    only their names are recorded."""
    snap: dict[str, Any] = {
        "transport": server.transport,
        "command": server.command,
        "args": list(server.args or []),
        "url": _redact_url(server.url),
        "timeout_seconds": server.timeout_seconds,
        "enabled": server.enabled,
        "annotation_trust": server.annotation_trust,
    }
    for secret in SECRET_FIELDS:
        snap[f"{secret}_names"] = sorted((getattr(server, secret) or {}).keys())
    return snap


@transaction.atomic
def mcp_server_create(
    *, name: str, actor: Actor, annotation_trust: str = AnnotationTrust.IGNORE, **fields: Any
) -> McpServer:
    if name.lower() in RESERVED_SERVER_NAMES:
        raise RegistryError(f"{name!r} is reserved for the pages' own addresses; choose another name")
    if McpServer.objects.filter(name=name).exists():
        raise RegistryError(f"an MCP server named {name!r} already exists")
    unknown = set(fields) - set(SERVER_FIELDS)
    if unknown:
        raise RegistryError(f"unknown server settings: {', '.join(sorted(unknown))}")
    server = McpServer(name=name, annotation_trust=AnnotationTrust(annotation_trust), **fields)
    server.full_clean()
    server.save()
    audit_record(
        action=AuditAction.MCP_SERVER_CREATED,
        actor=actor,
        subject_type="mcp_server",
        subject=server.name,
        details=_server_snapshot(server),
    )
    return server


@transaction.atomic
def mcp_server_update(*, server: McpServer, actor: Actor, **fields: Any) -> bool:
    """Change a server's connection settings (not its trust: see mcp_server_set_trust)."""
    unknown = set(fields) - set(SERVER_FIELDS)
    if unknown:
        raise RegistryError(f"unknown server settings: {', '.join(sorted(unknown))}")
    server = McpServer.objects.select_for_update().get(pk=server.pk)
    before = _server_snapshot(server)
    secrets_before = {secret: getattr(server, secret) for secret in SECRET_FIELDS}
    for key, value in fields.items():
        setattr(server, key, value)
    after = _server_snapshot(server)
    secrets_changed = [s for s in SECRET_FIELDS if getattr(server, s) != secrets_before[s]]
    if before == after and not secrets_changed:
        return False
    server.full_clean()
    server.save()
    changed = sorted({key for key in after if before[key] != after[key]} | set(secrets_changed))
    audit_record(
        action=AuditAction.MCP_SERVER_CHANGED,
        actor=actor,
        subject_type="mcp_server",
        subject=server.name,
        details={
            "changed": changed,
            "before": {k: before[k] for k in before if before[k] != after[k]},
            "after": {k: after[k] for k in after if before[k] != after[k]},
        },
    )
    return True


@dataclass(frozen=True)
class TrustChange:
    tool: str
    before: dict[str, str]
    after: dict[str, str]


def trust_change_preview(*, server: McpServer, trust: str) -> list[TrustChange]:
    """What switching `server` to `trust` would do to each tool's axes (T13)."""
    trust = AnnotationTrust(trust)
    now = timezone.now()
    changes = []
    # Every tool, absent ones too, exactly as mcp_server_set_trust re-resolves them.
    for tool in Tool.objects.filter(server=server).order_by("name"):
        before = _axes_dict(tool)
        _resolve_mcp(tool, trust, now)
        after = _axes_dict(tool)
        if before != after:
            changes.append(TrustChange(tool.name, before, after))
    return changes


@transaction.atomic
def mcp_server_set_trust(*, server: McpServer, trust: str, actor: Actor) -> list[TrustChange]:
    """T13: change trust and re-resolve every tool of the server from its stored claims.

    An unknown value raises ValueError: it is never read as IGNORE.
    """
    trust = AnnotationTrust(trust)
    server = McpServer.objects.select_for_update().get(pk=server.pk)
    if server.annotation_trust == trust:
        return []
    before_trust = server.annotation_trust
    server.annotation_trust = trust
    server.save(update_fields=["annotation_trust", "updated_at"])
    now = timezone.now()
    changes = []
    for tool in Tool.objects.select_for_update().filter(server=server).order_by("name"):
        before = _axes_dict(tool)
        _resolve_mcp(tool, trust, now)
        tool.save(
            update_fields=[
                "side_effect_level",
                "destructive_behavior",
                "idempotency_behavior",
                "open_world_hint",
                "explanations",
                "claim_warnings",
                "resolved_at",
                "resolved_under_trust",
            ]
        )
        after = _axes_dict(tool)
        if before != after:
            changes.append(TrustChange(tool.name, before, after))
    audit_record(
        action=AuditAction.MCP_TRUST_CHANGED,
        actor=actor,
        level=AuditLevel.WARNING if trust == AnnotationTrust.TRUST else AuditLevel.INFO,
        subject_type="mcp_server",
        subject=server.name,
        details={
            "before": before_trust,
            "after": trust,
            "tools": [{"tool": c.tool, "before": c.before, "after": c.after} for c in changes],
        },
    )
    return changes


# --- Sync ------------------------------------------------------------------------------------

SYNC_ALREADY_ACTIVE = "A sync of this server is already queued or running."
# A run still QUEUED this long after *Sync now*: the worker that took its message may be gone
# (a killed worker group holds it until the broker's visibility timeout, ten minutes), so the
# button sends it again. The run's claim lets only one delivery run it (sync/runs.py).
QUEUED_RESEND_AFTER = dt.timedelta(seconds=60)


def _sync_resend(run: McpSyncRun, server: McpServer, actor: Actor) -> McpSyncRun:
    from aimon_admin.registry.tasks import sync_mcp_server

    audit_record(
        action=AuditAction.MCP_SYNC_REQUESTED,
        actor=actor,
        subject_type="mcp_server",
        subject=server.name,
        details={"run_id": run.pk, "resent": True, "queued_at": run.created_at.isoformat()},
    )
    transaction.on_commit(lambda: sync_mcp_server.delay(run.pk))
    return run


@transaction.atomic
def mcp_sync_request(*, server: McpServer, actor: Actor) -> McpSyncRun:
    """Queue a sync of `server` (the Celery task starts once this transaction commits)."""
    from aimon_admin.registry.sync.runs import sync_runs_fail_stale
    from aimon_admin.registry.tasks import sync_mcp_server

    server = McpServer.objects.select_for_update().get(pk=server.pk)
    # A run whose worker is gone (its lease lapsed) is failed first, so it does not block
    # this one: *Sync now* works without waiting for beat's sweep.
    sync_runs_fail_stale(server_id=server.pk)
    active = McpSyncRun.objects.filter(
        server=server, status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]
    ).first()
    if active is not None:
        if active.status == SyncStatus.QUEUED and active.created_at < timezone.now() - QUEUED_RESEND_AFTER:
            return _sync_resend(active, server, actor)
        raise RegistryError(SYNC_ALREADY_ACTIVE)
    run = McpSyncRun.objects.create(server=server, requested_by=actor.user, progress="Queued")
    audit_record(
        action=AuditAction.MCP_SYNC_REQUESTED,
        actor=actor,
        subject_type="mcp_server",
        subject=server.name,
        details={"run_id": run.pk},
    )
    transaction.on_commit(lambda: sync_mcp_server.delay(run.pk))
    return run


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
    """Seed §8.1: record an operator's finding on a MUTATING tool at the default DESTRUCTIVE."""
    finding = ReviewFinding(finding)
    tool = Tool.objects.select_for_update().get(pk=tool.pk)
    if tool.side_effect_level != SideEffectLevel.MUTATING:
        raise RegistryError("Only MUTATING tools are reviewed for their destructive trait.")
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
    it is held as IGNORE until an operator also accepts that (tool_accept_definition).
    """
    finding = _close_finding(finding, RelayFindingStatus.ACCEPTED, actor)
    tool = Tool.objects.select_for_update(of=("self",)).select_related("server").get(pk=finding.tool_id)
    server = McpServer.objects.get(pk=tool.server_id)
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
    lowered = policy.claims_lowered_risk(tool.accepted_claims, finding.annotations)
    tool.description = _stored_description(finding.description)
    tool.input_schema = finding.input_schema if finding.input_schema is not None else {}
    tool.claims = finding.annotations
    tool.fingerprint = finding.fingerprint
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
            "axes_before": before_axes,
            "axes_after": _axes_dict(tool),
            "trust": server.annotation_trust,
        },
    )
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
