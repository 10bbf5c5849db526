"""AIMON Admin's enforcement points for agent runtimes: the runtime client (G1), the MCP
gateway (G2, `aimon_client.gateway`) and the Claude Code hook (G3, `aimon_client.claude_hook`)."""

from __future__ import annotations

from aimon_client.client import Client
from aimon_client.errors import AimonError, NotAuthorized, ProductUnavailable, ProtocolError, Refused
from aimon_client.results import (
    Decision,
    McpServerConfig,
    Revoked,
    Scope,
    SkillDecision,
    SkillItem,
    SkillRequest,
    Status,
    ToolDecision,
    ToolInfo,
    ToolReason,
    ToolRequest,
)

__version__ = "0.1.0"

__all__ = [
    "AimonError",
    "Client",
    "Decision",
    "McpServerConfig",
    "NotAuthorized",
    "ProductUnavailable",
    "ProtocolError",
    "Refused",
    "Revoked",
    "Scope",
    "SkillDecision",
    "SkillItem",
    "SkillRequest",
    "Status",
    "ToolDecision",
    "ToolInfo",
    "ToolReason",
    "ToolRequest",
    "__version__",
]
