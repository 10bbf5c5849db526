"""An MCP server whose tools cover every kind of claim the sync must store verbatim (T10).

    python -m tests.registry.mcp_servers.catalog [--variant-file PATH]

Variant "v1" (the default) has the four corners of {idempotent, not} x {destructive, not},
a read-only tool, a read-only tool that also claims destructive, a tool without
annotations, one whose hints have the wrong type and one with fields the spec does not
know. Variant "v2" changes them (drift, T15): one claims less risk, one more, one only
rewords its description, one disappears and one is new. The variant is read from
``--variant-file`` on every ``tools/list``, so a running server drifts when the file does;
"slow" answers v1 after a minute, for a sync to be interrupted half-way.

Well-formed tools go out through the SDK's typed path, validated like any SDK server's
results; the sloppy ones are appended after it (see `_base.verbatim_tools_list`), the way
a server written without this SDK would send them.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel.server import Server

from tests.registry.mcp_servers._base import echo_call, run_stdio

RECORD_SCHEMA = {
    "type": "object",
    "properties": {"record_id": {"type": "string", "description": "The record to act on."}},
    "required": ["record_id"],
}


def _tool(name: str, description: str, annotations: dict[str, Any] | None, **schema: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": description, "inputSchema": schema or RECORD_SCHEMA}
    if annotations is not None:
        tool["annotations"] = annotations
    return tool


WELL_FORMED_V1: list[dict[str, Any]] = [
    _tool(
        "lookup_record",
        "Read one record.",
        {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
    ),
    _tool(
        "upsert_record",
        "Create or replace a record.",
        {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    ),
    _tool(
        "append_note",
        "Append a note to a record.",
        {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    ),
    _tool(
        "delete_record",
        "Delete a record.",
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    ),
    _tool(
        "transfer_funds",
        "Move money between accounts.",
        {"title": "Transfer funds", "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
        type="object",
        properties={"source": {"type": "string"}, "target": {"type": "string"}, "amount": {"type": "number"}},
        required=["source", "target", "amount"],
    ),
    _tool("inspect_disk", "Report disk usage.", {"readOnlyHint": True, "destructiveHint": True}),
    _tool("bare_tool", "A tool that makes no claims at all.", None),
]

# What a server outside this SDK might send: the SDK's own models would refuse or rewrite these.
SLOPPY: list[dict[str, Any]] = [
    _tool(
        "sloppy_flags",
        "Hints of the wrong type.",
        {"readOnlyHint": "yes", "destructiveHint": False, "idempotentHint": 1},
    ),
    _tool(
        "vendor_extras",
        "Hints plus fields the spec does not know.",
        {
            "title": "Vendor extras",
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": False,
            "x-vendor-risk": "low",
            "audience": ["ops", "finance"],
        },
    ),
]


def _v2(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {tool["name"]: copy.deepcopy(tool) for tool in tools}
    by_name["delete_record"]["annotations"]["destructiveHint"] = False  # claims less risk
    by_name["append_note"]["annotations"]["destructiveHint"] = True  # claims more risk
    by_name["lookup_record"]["description"] = "Read one record by its id."  # no new claim
    del by_name["bare_tool"]
    by_name["archive_record"] = _tool(
        "archive_record",
        "Move a record to the archive.",
        {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    )
    return list(by_name.values())


VARIANTS = {"v1": WELL_FORMED_V1, "v2": _v2(WELL_FORMED_V1)}
SLOW = "slow"  # v1, after a long pause: a sync to interrupt half-way
SLOW_SECONDS = 60


def listing(variant: str = "v1") -> list[dict[str, Any]]:
    """The whole listing as it goes on the wire for `variant`: what the sync must store."""
    return copy.deepcopy(VARIANTS[variant] + SLOPPY)


def build_server(variant_file: Path | None = None) -> Server[Any]:
    """The catalog server; `variant_file` (read on every listing) holds "v1", "v2" or "slow"."""

    def variant() -> str:
        if variant_file is None or not variant_file.exists():
            return "v1"
        return variant_file.read_text().strip() or "v1"

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        chosen = variant()
        if chosen == SLOW:
            await anyio.sleep(SLOW_SECONDS)
            chosen = "v1"
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in VARIANTS[chosen]])

    async def append_sloppy(ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        result = await call_next(ctx)
        if ctx.method == "tools/list" and isinstance(result, dict):
            result = {**result, "tools": [*result["tools"], *copy.deepcopy(SLOPPY)]}
        return result

    server: Server[Any] = Server(
        "aimon-test-catalog", version="1.0", on_list_tools=list_tools, on_call_tool=echo_call
    )
    server.middleware.append(append_sloppy)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant-file", type=Path)
    run_stdio(build_server(parser.parse_args().variant_file))


if __name__ == "__main__":
    main()
