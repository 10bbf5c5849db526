"""Writes for the registry: tool catalogs, MCP servers, trust, drift reviews (T10-T15).

Resolution runs here, once, when a definition is registered or synced (T12); nothing
reads claims at decision time.

The modules: `catalog` (a runtime's own tools), `listings` (MCP listings, synced or
relayed, and relay findings kept), `servers` (servers, trust, *Sync now*), `reviews`
(definitions accepted, destructive reviews, relay findings decided), `subjects` (a tool's
subject argument, U1) and `common` (the
error, its messages and the shared resolution helpers). The public names are re-exported
here, so `services.mcp_tools_record` and `from aimon_admin.registry.services import ...`
read as they always have.
"""

from __future__ import annotations

from aimon_admin.registry.services.catalog import LOCAL_AXES, CatalogResult, local_tools_replace
from aimon_admin.registry.services.common import (
    DEFINITION_NOT_AWAITING_REVIEW,
    FINDING_NOT_OPEN,
    RELAY_NEEDS_RUNTIME,
    REVIEW_WRITES_ONLY,
    RegistryError,
)
from aimon_admin.registry.services.listings import ListingResult, mcp_tools_record, mcp_tools_relay
from aimon_admin.registry.services.reviews import (
    relay_finding_accept,
    relay_finding_dismiss,
    tool_accept_definition,
    tool_record_review,
)
from aimon_admin.registry.services.servers import (
    MCP_SERVER_RETIRED_MESSAGE,
    QUEUED_RESEND_AFTER,
    RESERVED_SERVER_NAMES,
    SECRET_FIELDS,
    SERVER_FIELDS,
    SYNC_ALREADY_ACTIVE,
    TrustChange,
    mcp_server_create,
    mcp_server_retire,
    mcp_server_set_trust,
    mcp_server_update,
    mcp_sync_request,
    trust_change_preview,
)
from aimon_admin.registry.services.subjects import tool_subject_set

__all__ = [
    "DEFINITION_NOT_AWAITING_REVIEW",
    "FINDING_NOT_OPEN",
    "LOCAL_AXES",
    "MCP_SERVER_RETIRED_MESSAGE",
    "QUEUED_RESEND_AFTER",
    "RELAY_NEEDS_RUNTIME",
    "RESERVED_SERVER_NAMES",
    "REVIEW_WRITES_ONLY",
    "SECRET_FIELDS",
    "SERVER_FIELDS",
    "SYNC_ALREADY_ACTIVE",
    "CatalogResult",
    "ListingResult",
    "RegistryError",
    "TrustChange",
    "local_tools_replace",
    "mcp_server_create",
    "mcp_server_retire",
    "mcp_server_set_trust",
    "mcp_server_update",
    "mcp_sync_request",
    "mcp_tools_record",
    "mcp_tools_relay",
    "relay_finding_accept",
    "relay_finding_dismiss",
    "tool_accept_definition",
    "tool_record_review",
    "tool_subject_set",
    "trust_change_preview",
]
