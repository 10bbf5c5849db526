"""An MCP server that gets the protocol wrong in one chosen way.

    python -m tests.registry.mcp_servers.misbehaving --mode MODE

Modes:
  exit            exit with status 3 at once, a line on stderr, before speaking (stdio only)
  leak-secret     the same, but the line echoes its $API_TOKEN (stdio only)
  garbage         answer nothing, write lines that are not JSON-RPC (stdio only)
  error           answer ``tools/list`` with a JSON-RPC error
  not-a-list      answer ``tools/list`` with ``{"tools": "nope"}``
  nameless        list a tool without a name
  duplicate       list the same tool name on page 1 and page 2
  endless         hand out a fresh cursor on every page, forever
  cursor-loop     hand back the cursor it was given
  fail-on-page-2  answer page 1 well, then a JSON-RPC error for page 2
  exit-on-page-2  answer page 1 well, then die (stdio only)
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

MODES = (
    "exit",
    "leak-secret",
    "garbage",
    "error",
    "not-a-list",
    "nameless",
    "duplicate",
    "endless",
    "cursor-loop",
    "fail-on-page-2",
    "exit-on-page-2",
)
STDIO_ONLY = ("exit", "leak-secret", "garbage", "exit-on-page-2")
EXIT_STATUS = 3
EXIT_MESSAGE = "misbehaving: giving up before saying anything"
LEAK_MESSAGE = "misbehaving: the token {token} was refused"
ERROR_MESSAGE = "the tool index is being rebuilt"
GARBAGE_LINE = "Starting widget server v2.1 (debug build)"
PAGE_1 = [
    {"name": "first_tool", "description": "On page 1.", "inputSchema": {"type": "object"}},
    {"name": "second_tool", "description": "On page 1.", "inputSchema": {"type": "object"}},
]


def _page(mode: str, cursor: str | None) -> dict[str, Any]:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    if mode == "error" or (mode == "fail-on-page-2" and cursor is not None):
        raise MCPError(code=types.INTERNAL_ERROR, message=ERROR_MESSAGE)
    if mode == "exit-on-page-2" and cursor is not None:
        os._exit(4)
    if mode == "not-a-list":
        return {"tools": "nope"}
    if mode == "nameless":
        return {"tools": [{"description": "Who am I?", "inputSchema": {"type": "object"}}]}
    if mode == "duplicate":
        tool = {"name": "twice", "inputSchema": {"type": "object"}}
        return {"tools": [tool], "nextCursor": "2"} if cursor is None else {"tools": [tool]}
    if mode == "endless":
        number = int(cursor or 0) + 1
        return {
            "tools": [{"name": f"t{number}", "inputSchema": {"type": "object"}}],
            "nextCursor": str(number),
        }
    if mode == "cursor-loop":
        return {"tools": [], "nextCursor": cursor or "same-again"}
    # fail-on-page-2 / exit-on-page-2, page 1
    return {"tools": PAGE_1, "nextCursor": "page-2"}


def build_server(mode: str) -> Server[Any]:
    """The misbehaving server for `mode` (the protocol-level modes only)."""
    # The SDK is imported here, not at the top: the "exit" and "garbage" modes misbehave
    # at once, without the second it takes to import it.
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    from tests.registry.mcp_servers._base import echo_call, verbatim_tools_list

    if mode not in MODES or mode in ("exit", "leak-secret", "garbage"):
        raise ValueError(f"{mode!r} is not a protocol-level mode")

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        raise AssertionError("answered by the middleware")

    server: Server[Any] = Server("aimon-test-misbehaving", on_list_tools=list_tools, on_call_tool=echo_call)
    server.middleware.append(verbatim_tools_list(lambda cursor: _page(mode, cursor)))
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    mode = parser.parse_args().mode
    if mode in ("exit", "leak-secret"):
        line = EXIT_MESSAGE if mode == "exit" else LEAK_MESSAGE.format(token=os.environ.get("API_TOKEN"))
        print(line, file=sys.stderr, flush=True)
        sys.exit(EXIT_STATUS)
    if mode == "garbage":
        for _ in range(3):
            print(GARBAGE_LINE, flush=True)
        sys.stdin.read()  # until the client hangs up
        return
    from tests.registry.mcp_servers._base import run_stdio

    run_stdio(build_server(mode))


if __name__ == "__main__":
    main()
