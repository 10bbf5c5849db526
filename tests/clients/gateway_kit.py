"""What the gateway tests share (G2): real MCP servers registered and synced in the product,
gateway.yaml, the gateway started as its console script, and the MCP SDK's own client.

Nothing of the gateway is imported here: the tests reach it only the way an MCP client
does, over stdio or Streamable HTTP.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import yaml
from django.db import transaction
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from aimon_admin.core.actors import Actor
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, SyncStatus
from aimon_admin.registry.models import McpServer
from aimon_admin.registry.services import mcp_server_create, mcp_sync_request

BIN = Path(sys.executable).parent
GATEWAY = str(BIN / "aimon-gateway")
GIT_SERVER = str(BIN / "mcp-server-git")
TIME_SERVER = str(BIN / "mcp-server-time")
START_SECONDS = 30.0


def git_repo(path: Path) -> Path:
    """A git repository with one commit and one staged change (what git_reset unstages)."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (path / "README").write_text("hello\n")
    git("add", "README")
    git("commit", "-q", "-m", "first")
    stage(path)
    return path


def stage(repo: Path, text: str = "a change\n") -> None:
    (repo / "README").write_text(text)
    subprocess.run(["git", "add", "README"], cwd=repo, check=True, capture_output=True)


def staged(repo: Path) -> list[str]:
    """The files staged in `repo`: empty once git_reset has run there."""
    out = subprocess.run(
        ["git", "diff", "--cached", "--name-only"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def register(actor: Actor, name: str, **fields: Any) -> McpServer:
    """An MCP server registered (trusted, so its read-only claims count, T11) and synced the way
    an operator's *Sync now* does: the eager task runs when the request commits."""
    transport = McpTransport.STDIO if "command" in fields else McpTransport.STREAMABLE_HTTP
    server = mcp_server_create(
        name=name,
        actor=actor,
        annotation_trust=AnnotationTrust.TRUST,
        transport=transport,
        timeout_seconds=30,
        **fields,
    )
    with transaction.atomic():
        run = mcp_sync_request(server=server, actor=actor)
    run.refresh_from_db()
    assert (run.status, run.error) == (SyncStatus.SUCCEEDED, ""), run.error
    return server


def register_real_servers(actor: Actor, repo: Path) -> None:
    """mcp-server-git on `repo` and mcp-server-time, both stdio, as the product knows them."""
    register(actor, "git", command=GIT_SERVER, args=["--repository", str(repo)])
    register(actor, "time", command=TIME_SERVER, args=["--local-timezone", "UTC"])


def write_config(path: Path, product_url: str, **settings: Any) -> Path:
    """gateway.yaml: the product, the token's variable, and `settings` (servers: product)."""
    body = {"product_url": product_url, "token_env": "AIMON_TEST_TOKEN", "servers": "product", **settings}
    path.write_text(yaml.safe_dump(body))
    return path


def gateway_env(token: str) -> dict[str, str]:
    return {**os.environ, "AIMON_TEST_TOKEN": token}


@asynccontextmanager
async def over_stdio(config: Path, token: str) -> AsyncIterator[ClientSession]:
    """The MCP SDK's client, starting `aimon-gateway --config config` as a stdio server."""
    params = StdioServerParameters(command=GATEWAY, args=["--config", str(config)], env=gateway_env(token))
    with open(config.with_suffix(".stderr"), "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class HttpGateway:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    sessions: list[str] = field(default_factory=list)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def gateway_http(config: Path, token: str) -> Iterator[HttpGateway]:
    """`aimon-gateway --http 127.0.0.1:PORT` as a process; its /mcp URL once it listens."""
    port = free_port()
    log = config.with_suffix(".http.log")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [GATEWAY, "--config", str(config), "--http", f"127.0.0.1:{port}"],
            env=gateway_env(token),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    gateway = HttpGateway(f"http://127.0.0.1:{port}/mcp", process, log)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert process.poll() is None, f"the gateway exited: {gateway.output()}"
            assert time.monotonic() < deadline, f"the gateway did not listen: {gateway.output()}"
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@asynccontextmanager
async def over_http(url: str) -> AsyncIterator[ClientSession]:
    """The MCP SDK's client over Streamable HTTP (the handshake era: one MCP session)."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
