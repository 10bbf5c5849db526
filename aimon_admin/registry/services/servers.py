"""MCP servers: create, update, annotation trust (T13) and *Sync now*."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.core.encryption import redact_url
from aimon_admin.registry.choices import (
    AnnotationTrust,
    SyncStatus,
)
from aimon_admin.registry.models import McpServer, McpSyncRun, Tool
from aimon_admin.registry.services.common import (
    RegistryError,
    _axes_dict,
    _resolve_mcp,
)

# --- MCP servers -------------------------------------------------------------------------------

MCP_SERVER_RETIRED_MESSAGE = "This MCP server is retired: it cannot be changed, enabled or synced any more."

# Names the server pages' own URLs use (/registry/servers/new/).
RESERVED_SERVER_NAMES = frozenset({"new"})
SERVER_FIELDS = ("transport", "command", "args", "env", "url", "headers", "timeout_seconds", "enabled")
SECRET_FIELDS = ("env", "headers")


def _server_snapshot(server: McpServer) -> dict[str, Any]:
    """The server's settings for the audit log; env and header values are secrets, so
    only their names are recorded."""
    snap: dict[str, Any] = {
        "transport": server.transport,
        "command": server.command,
        "args": list(server.args or []),
        "url": redact_url(server.url),
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
    if server.is_retired:
        raise RegistryError(MCP_SERVER_RETIRED_MESSAGE)
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


@transaction.atomic
def mcp_server_retire(*, server: McpServer, actor: Actor) -> McpServer:
    """Retire a server for good: disabled (its tools offered to no runtime, never synced),
    its settings frozen, and the secrets stored for it erased (env and header values, a URL's
    credentials and query values), since nothing will connect to it again.

    The row, its tools and its sync runs stay (tool pages, grants and audit events name
    them), and so does its name: a configuration file naming it is refused, so the log never
    mixes it with a new server. A server already retired raises RegistryError.
    """
    server = McpServer.objects.select_for_update().get(pk=server.pk)
    if server.is_retired:
        raise RegistryError(MCP_SERVER_RETIRED_MESSAGE)
    before = _server_snapshot(server)
    raw_url, url = server.url, redact_url(server.url)
    server.enabled = False
    server.retired_at = timezone.now()
    server.retired_by = actor.user
    server.env, server.headers, server.url = {}, {}, url
    server.full_clean()
    server.save()
    audit_record(
        action=AuditAction.MCP_SERVER_RETIRED,
        actor=actor,
        level=AuditLevel.WARNING,
        subject_type="mcp_server",
        subject=server.name,
        details={
            "was_enabled": before["enabled"],
            "erased": {
                "env_names": before["env_names"],
                "headers_names": before["headers_names"],
                "url_credentials": raw_url != url,
            },
            "tools": server.tools.count(),
        },
    )
    return server


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
    if server.is_retired:
        raise RegistryError(MCP_SERVER_RETIRED_MESSAGE)
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
    if server.is_retired:
        raise RegistryError(MCP_SERVER_RETIRED_MESSAGE)
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
