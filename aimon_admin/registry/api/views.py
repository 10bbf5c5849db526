"""The registry's runtime API: a runtime's own tools, MCP server configs and relayed MCP
tool listings (docs/api.md "Tools", "MCP servers"). Tool decisions read approvals (part U of
docs/rules.md), so their view is approvals' (approvals/api/decisions.py), at the same URL.

Every view acts for the runtime its token names (`request.user.runtime`) and sees only
that runtime's local tools; MCP servers and their tools are shared by every runtime.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from aimon_admin.core.api import StrictSerializer, validate_value
from aimon_admin.registry import selectors, services
from aimon_admin.registry.api.serializers import (
    MAX_TOOLS,
    LocalCatalogIn,
    LocalCatalogOut,
    McpListingIn,
    McpServerOut,
    ResolvedToolOut,
    ToolOut,
    flatten_errors,
)
from aimon_admin.registry.choices import SideEffectLevel
from aimon_admin.registry.models import RelayFinding, Tool

NO_SUCH_SERVER_MESSAGE = "No enabled MCP server of that name."

_ERRORS = {
    400: OpenApiResponse(description="Invalid input: `fields` names each offending field."),
    401: OpenApiResponse(description="Missing, malformed, unknown or revoked token."),
}


def _validated(serializer_class: type[StrictSerializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    if not serializer.is_valid():
        raise ValidationError(flatten_errors(serializer.errors))
    return serializer.validated_data


# --- /api/v1/tools -------------------------------------------------------------------------------


def _tool_out(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": tool["name"],
        "source": tool["source"],
        "server": tool["server__name"],
        "side_effect_level": tool["side_effect_level"],
        "destructive_behavior": tool["destructive_behavior"],
        "idempotency_behavior": tool["idempotency_behavior"],
        "read_only": tool["side_effect_level"] == SideEffectLevel.READ_ONLY,
        "description": tool["description"],
        "input_schema": tool["input_schema"],
        "held_for_review": tool["awaiting_review"],
    }


_TOOL_COLUMNS = (
    "name",
    "source",
    "server__name",
    "side_effect_level",
    "destructive_behavior",
    "idempotency_behavior",
    "description",
    "input_schema",
    "awaiting_review",
)


@extend_schema(
    methods=["GET"],
    summary="The tools this runtime may give its model",
    description=(
        "The runtime's own (local) tools plus the tools of every enabled MCP server, "
        "without those its ceiling does not permit. A local tool has `server` null. "
        "`held_for_review`: an MCP tool whose server's latest sync claims less risk than was "
        "accepted, held at the worst axes until an operator reviews it; an enforcement "
        "point may leave it out of what it offers."
    ),
    responses={200: ToolOut(many=True), 401: _ERRORS[401]},
)
@extend_schema(
    methods=["PUT"],
    summary="Replace this runtime's own tool catalog",
    description=(
        "The whole local catalog, replaced: tools left out are marked absent (never deleted). "
        "An omitted or null axis takes its worst default: MUTATING, DESTRUCTIVE, "
        f"NON_IDEMPOTENT. At most {MAX_TOOLS} tools, "
        "names unique."
    ),
    request=LocalCatalogIn,
    responses={200: LocalCatalogOut, **_ERRORS},
)
@api_view(["GET", "PUT"])
def tools(request: Request) -> Response:
    runtime = request.user.runtime
    if request.method == "GET":
        rows = selectors.tools_for_model(runtime=runtime).values(*_TOOL_COLUMNS)
        return Response([_tool_out(row) for row in rows])

    data = _validated(LocalCatalogIn, request)
    try:
        result = services.local_tools_replace(runtime=runtime, tools=data["tools"], actor=request.user.actor)
    except services.RegistryError as exc:
        raise ValidationError({"tools": [str(exc)]}) from exc
    return Response(
        {
            "registered": result.registered,
            "added": sorted(result.added),
            "changed": sorted(result.changed),
            "removed": sorted(result.removed),
        }
    )


# --- /api/v1/mcp-servers -------------------------------------------------------------------------

_SERVER_COLUMNS = ("name", "transport", "command", "args", "url", "timeout_seconds", "annotation_trust")


@extend_schema(
    summary="The enabled MCP servers a runtime connects to",
    description="Connection settings only: environment variables and headers are secrets and "
    "are never returned.",
    responses={200: McpServerOut(many=True), 401: _ERRORS[401]},
)
@api_view(["GET"])
def mcp_servers(request: Request) -> Response:
    # An explicit column list, so env and headers never leave the database.
    rows = selectors.mcp_servers_enabled().values(*_SERVER_COLUMNS)
    return Response([dict(row) for row in rows])


@extend_schema(
    summary="Relay an MCP server's tools/list result",
    description=(
        "A runtime that listed a server's tools itself hands over the result verbatim. A relay "
        "is this runtime's word only: it never changes a tool's description, input schema, "
        "claims, hold or presence, and lowers no axis (a claim of more risk takes effect at "
        "once). Nor does it serve anything new: a tool the server's own sync has not listed, or "
        "no longer lists, is served to no runtime, the relaying one included, until the sync "
        "lists it or an operator accepts it. A relayed definition that differs from the served "
        "one, and any relayed tool no runtime is served, is kept verbatim as a relay finding "
        "attributed to this runtime (`kept_as_finding`, `finding_id`). Tools not in the "
        "listing are left as they are. Unknown or disabled server: 404."
    ),
    request=McpListingIn,
    responses={
        200: ResolvedToolOut(many=True),
        **_ERRORS,
        404: OpenApiResponse(description=NO_SUCH_SERVER_MESSAGE),
    },
)
@api_view(["POST"])
def mcp_server_tools(request: Request, name: str) -> Response:
    name = validate_value("name", name)  # a NUL byte never reaches PostgreSQL (a 500 there)
    server = selectors.mcp_servers_enabled().filter(name=name).first()
    if server is None:
        raise NotFound(NO_SUCH_SERVER_MESSAGE)
    data = _validated(McpListingIn, request)
    try:
        result = services.mcp_tools_relay(server=server, runtime=request.user.runtime, listing=data["tools"])
    except services.RegistryError as exc:
        raise ValidationError({"tools": [str(exc)]}) from exc
    by_name = {tool.name: tool for tool in result.tools}
    findings = {finding.tool_id: finding for finding in result.findings}
    return Response([_resolved_out(by_name[item["name"]], findings) for item in data["tools"]])


def _resolved_out(tool: Tool, findings: dict[int, RelayFinding]) -> dict[str, Any]:
    finding = findings.get(tool.pk)
    return {
        "name": tool.name,
        "side_effect_level": tool.side_effect_level,
        "destructive_behavior": tool.destructive_behavior,
        "idempotency_behavior": tool.idempotency_behavior,
        "read_only": tool.read_only,
        "held_for_review": tool.awaiting_review,
        "warnings": list(tool.claim_warnings or []),
        "kept_as_finding": finding is not None,
        "finding_id": finding.pk if finding is not None else None,
    }
