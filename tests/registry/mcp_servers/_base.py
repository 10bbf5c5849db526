"""What the test MCP servers share: the stdio runner and the verbatim-listing middleware."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

RawPage = Callable[[str | None], Mapping[str, Any]]


def verbatim_tools_list(page: RawPage) -> Callable[[ServerRequestContext[Any], CallNext], Awaitable[Any]]:
    """A server middleware that answers ``tools/list`` with `page(cursor)` exactly as given.

    The SDK validates and sieves every result a handler returns (unknown annotation fields
    dropped, ``"yes"`` read as true); a middleware that answers without calling the chain
    owns its result, so this is how a test server sends what a sloppy server would.
    """

    async def middleware(ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        if ctx.method != "tools/list":
            return await call_next(ctx)
        cursor = (ctx.params or {}).get("cursor")
        return dict(page(cursor if isinstance(cursor, str) else None))

    return middleware


async def echo_call(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    """Every test tool can be called; it says what it was asked to do."""
    text = f"{params.name} called with {sorted((params.arguments or {}).keys())}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def run_stdio(server: Server[Any]) -> None:
    """Serve `server` on stdin/stdout until the client closes stdin."""

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
    # The client has hung up; skip the interpreter's teardown (a good part of a second).
    sys.stdout.flush()
    os._exit(0)
