"""Serve a test MCP server over streamable HTTP, in-process, on a free port of 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from mcp.server.lowlevel.server import Server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

STARTUP_TIMEOUT = 10.0


@contextmanager
def serve_asgi(app: Any, *, path: str = "/mcp") -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread; yield its URL (with `path`) until the block ends.

    The socket is bound before uvicorn starts, so the port cannot be taken in between.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # No grace: a hanging test server's open stream would hold every shutdown (uvicorn then logs
    # an error about it, hence "critical"; the SDK's own loggers still report handler failures).
    config = uvicorn.Config(app, log_level="critical", lifespan="on", timeout_graceful_shutdown=0)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"mcp-http-{port}"
    )
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the test HTTP server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(STARTUP_TIMEOUT)
        sock.close()


@contextmanager
def serve_http(server: Server[Any], *, json_response: bool = False) -> Iterator[str]:
    """Serve `server` over streamable HTTP (SSE responses, or plain JSON with `json_response`)."""
    with serve_asgi(server.streamable_http_app(json_response=json_response)) as url:
        yield url


def not_mcp_app(status: int) -> Starlette:
    """A web app that is not an MCP server: every request to /mcp gets `status` and HTML."""

    async def answer(request: Request) -> HTMLResponse:
        return HTMLResponse("<html><body>Not an MCP server</body></html>", status_code=status)

    return Starlette(routes=[Route("/mcp", answer, methods=["GET", "POST", "DELETE"])])
