"""Reads for the registry: what a runtime's model may see, and what the gate decides."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet

from aimon_admin.registry import policy
from aimon_admin.registry.choices import SideEffectLevel, ToolSource
from aimon_admin.registry.models import McpServer, Tool
from aimon_admin.runtimes.models import AgentRuntime


def tools_available_to(*, runtime: AgentRuntime) -> QuerySet[Tool]:
    """A runtime's present local tools plus the present tools of every enabled MCP server."""
    return (
        Tool.objects.filter(present=True)
        .filter(Q(source=ToolSource.LOCAL, runtime=runtime) | Q(source=ToolSource.MCP, server__enabled=True))
        .select_related("server")
        .order_by("source", "server__name", "name")
    )


def tools_for_model(*, runtime: AgentRuntime) -> QuerySet[Tool]:
    """T6: the tool definitions the runtime may give its model: those its ceiling permits."""
    tools = tools_available_to(runtime=runtime)
    if runtime.ceiling == SideEffectLevel.READ_ONLY:
        tools = tools.filter(side_effect_level=SideEffectLevel.READ_ONLY)
    return tools


def tool_lookup(*, runtime: AgentRuntime, name: str, server: str | None) -> Tool | None:
    """The registered tool a decision is about, or None (then T9: MUTATING + DESTRUCTIVE)."""
    if server is None:
        return Tool.objects.filter(source=ToolSource.LOCAL, runtime=runtime, name=name, present=True).first()
    return Tool.objects.filter(
        source=ToolSource.MCP, server__name=server, server__enabled=True, name=name, present=True
    ).first()


@dataclass(frozen=True)
class ToolDecisionResult:
    tool: Tool | None
    axes: policy.ToolAxes
    result: policy.GateResult


def tool_decide(
    *, runtime: AgentRuntime, name: str, server: str | None, attended: bool
) -> ToolDecisionResult:
    tool = tool_lookup(runtime=runtime, name=name, server=server)
    axes = tool.axes if tool is not None else policy.UNREGISTERED
    result = policy.gate_decision(
        axes,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        attended=attended,
    )
    return ToolDecisionResult(tool=tool, axes=axes, result=result)


def mcp_servers_enabled() -> QuerySet[McpServer]:
    return McpServer.objects.filter(enabled=True).order_by("name")
