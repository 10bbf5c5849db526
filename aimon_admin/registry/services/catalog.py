"""A runtime's own (local) tool catalog, replaced whole (PUT /api/v1/tools; T1-T3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy
from aimon_admin.registry.choices import (
    ToolSource,
)
from aimon_admin.registry.models import Tool
from aimon_admin.registry.services.common import (
    RegistryError,
    _apply_resolution,
    _axes_dict,
    _stored_description,
)
from aimon_admin.runtimes.models import AgentRuntime

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
