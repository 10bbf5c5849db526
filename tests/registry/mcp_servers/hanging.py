"""An MCP server that never answers: ``tools/list`` (the default) or even ``initialize``.

python -m tests.registry.mcp_servers.hanging [--stage tools|initialize]
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel.server import Server

from tests.registry.mcp_servers._base import echo_call, run_stdio

STAGES = ("tools", "initialize")


def build_server(stage: str = "tools", *, listing_started: threading.Event | None = None) -> Server[Any]:
    """A server that hangs forever at `stage` (it stops when the client goes away).

    In-process, `listing_started` is set once a ``tools/list`` request has arrived.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}")

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if listing_started is not None:
            listing_started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def hang_on_initialize(ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        if ctx.method == "initialize":
            await anyio.sleep_forever()
        return await call_next(ctx)

    server: Server[Any] = Server("aimon-test-hanging", on_list_tools=list_tools, on_call_tool=echo_call)
    if stage == "initialize":
        server.middleware.append(hang_on_initialize)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=STAGES, default="tools")
    run_stdio(build_server(parser.parse_args().stage))


if __name__ == "__main__":
    main()
