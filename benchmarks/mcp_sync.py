"""Time of an MCP sync of 1,000 tools, over stdio and over streamable HTTP, against the bare fetch.

Runs in a throwaway test database of whatever DATABASE_URL names (a temporary SQLite file
by default), against the test server tests/registry/mcp_servers/paginated.py:

    .venv/bin/python benchmarks/mcp_sync.py [--tools 1000] [--page-size 100] [--repeat 5]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/mcp_sync.py

For each transport it times these steps, interleaved so a burst of load hits each alike,
and prints the median and best wall time, the ratio to the bare fetch, and this process's
CPU time (which a busy machine inflates far less than wall time; it includes the HTTP test
server, which runs in this process, but not the stdio one, a child process):

  bare SDK fetch   initialize and every tools/list page with the SDK's typed client, no database
  raw fetch        fetch_tool_listing alone (the sync's own fetch: raw pages, caps, timeout)
  first sync       mcp_sync_request -> eager task -> fetch, store 1,000 new tools, audit
  re-sync          the same server again: 1,000 unchanged tools

The target is a sync of 1,000 tools under 10 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.test")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")  # the sync runs here, on commit

import django

django.setup()

import anyio  # noqa: E402
from django.db import connection  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp_types import PaginatedRequestParams  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 10.0


def bare_fetch(transport: str, target: str, args: list[str]) -> int:
    """What any SDK user would do: initialize, then follow nextCursor with the typed client."""

    async def listing(read_stream: Any, write_stream: Any) -> int:
        count, cursor = 0, None
        async with ClientSession(read_stream, write_stream) as session:
            await session.initialize()
            while True:
                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
                count += len(page.tools)
                if page.next_cursor is None:
                    return count
                cursor = page.next_cursor

    async def fetch() -> int:
        if transport == "STDIO":
            params = StdioServerParameters(command=target, args=args, env={"PYTHONPATH": str(ROOT)})
            async with stdio_client(params) as streams:
                return await listing(*streams)
        async with streamable_http_client(target) as streams:
            return await listing(*streams)

    return anyio.run(fetch)


def timed(action: Callable[[], Any]) -> tuple[float, float]:
    """Wall time, and CPU time of this process."""
    start, start_cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - start, time.process_time() - start_cpu


def run(tools: int, page_size: int, repeat: int) -> bool:
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.choices import SyncStatus
    from aimon_admin.registry.models import McpServer
    from aimon_admin.registry.services import mcp_server_create, mcp_sync_request
    from aimon_admin.registry.sync import fetch_tool_listing
    from tests.registry.mcp_servers import paginated
    from tests.registry.mcp_servers.http import serve_http

    actor = Actor.system("benchmark")
    module_args = ["-m", "tests.registry.mcp_servers.paginated", "--tools", str(tools)]
    module_args += ["--page-size", str(page_size)]
    count = 0

    def new_server(transport: str, target: str) -> McpServer:
        nonlocal count
        count += 1
        fields: dict[str, Any] = (
            {"command": target, "args": module_args, "env": {"PYTHONPATH": str(ROOT)}}
            if transport == "STDIO"
            else {"url": target}
        )
        return mcp_server_create(
            name=f"bench-{count}",
            transport=transport,
            timeout_seconds=60,
            annotation_trust="TRUST",
            actor=actor,
            **fields,
        )

    def sync(server: McpServer) -> None:
        run = mcp_sync_request(server=server, actor=actor)
        run.refresh_from_db()
        assert run.status == SyncStatus.SUCCEEDED, run.error
        assert run.tools_seen == tools, run.tools_seen

    def raw_fetch(server: McpServer) -> None:
        assert len(fetch_tool_listing(server)) == tools

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{connection.vendor}, {tools:,} tools in pages of {page_size}, {repeat} rounds")
    print(f"load average {load} on {os.cpu_count()} cpus")
    ok = True
    with serve_http(paginated.build_server(tools, page_size)) as url:
        for transport, target in (("STDIO", sys.executable), ("STREAMABLE_HTTP", url)):
            again_server = new_server(transport, target)
            sync(again_server)
            steps: dict[str, Callable[[], Any]] = {
                "bare SDK fetch": lambda t=transport, g=target: bare_fetch(t, g, module_args),
                "raw fetch": lambda t=transport, g=target: raw_fetch(new_server(t, g)),
                "first sync": lambda t=transport, g=target: sync(new_server(t, g)),
                "re-sync": lambda s=again_server: sync(s),
            }
            samples: dict[str, list[tuple[float, float]]] = {label: [] for label in steps}
            for _ in range(repeat):
                for label, action in steps.items():
                    samples[label].append(timed(action))
            bare = statistics.median(wall for wall, _ in samples["bare SDK fetch"])
            print(f"  {transport:16s} median (best)    x bare   cpu here")
            for label, values in samples.items():
                wall = statistics.median(w for w, _ in values)
                best = min(w for w, _ in values)
                cpu = statistics.median(c for _, c in values)
                print(f"    {label:15s} {wall:6.2f} s ({best:5.2f})  {wall / bare:5.2f}   {cpu:6.2f} s")
                if "sync" in label:
                    ok = ok and wall < TARGET_SECONDS
    print(f"target: a sync of {tools:,} tools under {TARGET_SECONDS:.0f} s: {'met' if ok else 'MISSED'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        # A database of its own: a file for SQLite (WAL, as in production), a name of its own
        # on a shared PostgreSQL so it never clobbers the test suite's.
        connection.settings_dict.setdefault("TEST", {})["NAME"] = (
            str(Path(scratch) / "mcp-sync-bench.sqlite3")
            if connection.vendor == "sqlite"
            else "test_aimon_benchmark_mcp_sync"
        )
        old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
        try:
            return 0 if run(options.tools, options.page_size, options.repeat) else 1
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    sys.exit(main())
