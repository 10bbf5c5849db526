"""An MCP server with many well-formed tools served across pages (pagination, benchmark).

    python -m tests.registry.mcp_servers.paginated [--tools N] [--page-size P]

Tool ``tool_0007`` claims one of five shapes in turn (read-only, and the four corners of
{idempotent, not} x {destructive, not}); its input schema is the size of a typical
real tool's. Listings go out through the SDK's ordinary typed path.
"""

from __future__ import annotations

import argparse
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from tests.registry.mcp_servers._base import echo_call, run_stdio

SHAPES: list[dict[str, bool]] = [
    {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
]
CURSOR_PREFIX = "after:"


def tool_name(index: int) -> str:
    return f"tool_{index:04d}"


def tool_definition(index: int) -> dict[str, Any]:
    """The wire form of tool number `index`."""
    return {
        "name": tool_name(index),
        "description": f"Tool number {index}: does one thing to the widget store and reports back.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "widget_id": {"type": "string", "description": "The widget to act on."},
                "count": {"type": "integer", "minimum": 0, "maximum": 1000},
                "dry_run": {"type": "boolean", "default": False},
            },
            "required": ["widget_id"],
        },
        "annotations": SHAPES[index % len(SHAPES)],
    }


def build_server(tools: int = 25, page_size: int = 10) -> Server[Any]:
    """`tools` tools, `page_size` to a page; the cursor names the last index already sent."""
    definitions = [types.Tool.model_validate(tool_definition(i)) for i in range(tools)]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        start = 0
        cursor = params.cursor if params else None
        if cursor is not None:
            if not cursor.startswith(CURSOR_PREFIX) or not cursor[len(CURSOR_PREFIX) :].isdigit():
                raise MCPError(code=types.INVALID_PARAMS, message=f"unknown cursor {cursor!r}")
            start = int(cursor[len(CURSOR_PREFIX) :])
        end = min(start + page_size, tools)
        next_cursor = f"{CURSOR_PREFIX}{end}" if end < tools else None
        return types.ListToolsResult(tools=definitions[start:end], next_cursor=next_cursor)

    return Server("aimon-test-paginated", version="1.0", on_list_tools=list_tools, on_call_tool=echo_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=25)
    parser.add_argument("--page-size", type=int, default=10)
    options = parser.parse_args()
    run_stdio(build_server(options.tools, options.page_size))


if __name__ == "__main__":
    main()
