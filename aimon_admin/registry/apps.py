from __future__ import annotations

import logging

from django.apps import AppConfig

from aimon_admin.runtimes.connect import McpServerEntry, provide_mcp_servers


class RegistryConfig(AppConfig):
    name = "aimon_admin.registry"
    label = "registry"
    verbose_name = "Tool and MCP registry"

    def ready(self) -> None:
        from aimon_admin.core import home as home_sections
        from aimon_admin.registry import home

        # The operators' home: what waits for review and what fails.
        home_sections.provide("registry", home.registry_section, order=home.ORDER)
        # The runtime's page lists, in its gateway.yaml, the MCP servers runtimes are served (G2).
        provide_mcp_servers(served_mcp_servers)
        # The MCP SDK logs a server's whole URL at DEBUG ("Connecting to StreamableHTTP
        # endpoint: …"), credentials and query token included: never below INFO, whatever
        # LOG_LEVEL says (tests/security/test_secrets_at_rest.py).
        logger = logging.getLogger("mcp.client.streamable_http")
        logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))


def served_mcp_servers() -> list[McpServerEntry]:
    """The enabled MCP servers (every runtime is served each), as the runtime's page names them."""
    from aimon_admin.registry.selectors import mcp_servers_enabled

    return [
        McpServerEntry(name=server.name, transport=server.get_transport_display())
        for server in mcp_servers_enabled().only("name", "transport")
    ]
