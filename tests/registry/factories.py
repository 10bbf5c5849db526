"""MCP servers and their tool listings for tests, made through the registry's services (each
audited like any other)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.registry.models import McpServer
from aimon_admin.registry.services import ListingResult, mcp_server_create, mcp_tools_record
from tests.conftest import TEST_ACTOR


def mcp_server(name: str, *, trust: str = AnnotationTrust.IGNORE, **fields: Any) -> McpServer:
    """A registered MCP server, its annotations taken on `trust` (T11). Unless `fields` say
    otherwise, a stdio server started with `mcp-files`."""
    fields.setdefault("transport", McpTransport.STDIO)
    if fields["transport"] == McpTransport.STDIO:
        fields.setdefault("command", "mcp-files")
    return mcp_server_create(name=name, actor=TEST_ACTOR, annotation_trust=trust, **fields)


def tools_synced(server: McpServer, listing: Sequence[Mapping[str, Any]]) -> ListingResult:
    """`listing` recorded as the server's whole `tools/list`, as a sync records it (T10)."""
    return mcp_tools_record(server=server, listing=listing, actor=TEST_ACTOR, complete=True)
