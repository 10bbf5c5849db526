"""A stdio MCP server whose ``tools/list`` can be made to hang, for a sync to die half-way.

    python -m tests.faults.slow_mcp --variant-file PATH --marker-file PATH

The variant file (read on every ``tools/list``) holds "v1" or "v2" (the catalog test
server's listings, tests/registry/mcp_servers/catalog.py), or "slow" (no answer for
SLOW_SECONDS, then v2). Each ``tools/list`` first appends "<pid> <variant>" to the
marker file, so a test knows the sync is inside the listing, and which process serves it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server

from tests.registry.mcp_servers._base import echo_call, run_stdio
from tests.registry.mcp_servers.catalog import VARIANTS

SLOW = "slow"
SLOW_SECONDS = 120


def build_server(variant_file: Path, marker_file: Path) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        variant = variant_file.read_text().strip()
        with marker_file.open("a") as marker:
            marker.write(f"{os.getpid()} {variant}\n")
        if variant == SLOW:
            await anyio.sleep(SLOW_SECONDS)
            variant = "v2"
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in VARIANTS[variant]])

    return Server("aimon-test-slow", version="1.0", on_list_tools=list_tools, on_call_tool=echo_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant-file", type=Path, required=True)
    parser.add_argument("--marker-file", type=Path, required=True)
    arguments = parser.parse_args()
    run_stdio(build_server(arguments.variant_file, arguments.marker_file))


if __name__ == "__main__":
    main()
