"""The MCP servers behind the gateway (G2): one long-lived MCP SDK client session each.

Each upstream connects (a child process over stdio, or Streamable HTTP), lists its tools
exactly as the server sent them and hands the listing to the gateway to relay to the product
(T15), on connect and on every ``notifications/tools/list_changed``. A listing too large to
relay (more tools, or more bytes, than the product takes) makes the upstream unusable: its
tools are hidden and refused with that reason, never forwarded on a guess. A server that
stops is reconnected with back-off; meanwhile its calls are refused.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from pydantic import TypeAdapter, ValidationError

from aimon_client import __version__
from aimon_client.gateway.config import UpstreamConfig

logger = logging.getLogger("aimon_client.gateway")

# What the product takes in one relay (its MAX_TOOLS and its 1 MiB body bound, T15).
MAX_TOOLS = 2000
MAX_LISTING_BYTES = 1024 * 1024 - 1024
MAX_PAGES = 100
MAX_SSE_EVENT_BYTES = 32 * 1024 * 1024  # a 5 MB description must be read to be refused in words
RECONNECT_FIRST, RECONNECT_MAX = 1.0, 30.0
CLIENT_INFO = types.Implementation(name="aimon-gateway", version=__version__)

NOT_CONNECTED = "the MCP server {name!r} is not connected ({why}); the call was not forwarded"
STARTING = "it is still starting"
TOO_MANY_TOOLS = (
    "the MCP server {name!r} lists more than {limit} tools; the gateway will not relay or serve a "
    "listing that large, so none of its tools is forwarded"
)
TOO_LARGE = (
    "the MCP server {name!r} sent a tools/list of {size:,} bytes (a description or schema far "
    "too large; at most {limit:,}); none of its tools is forwarded"
)
TOO_MANY_PAGES = (
    "the MCP server {name!r} kept paging its tools/list past {limit} pages; none of its tools is forwarded"
)
BAD_LISTING = "the MCP server {name!r} sent a tools/list that is not a list of tools ({problem})"
STOPPED_MID_CALL = (
    "the MCP server {name!r} stopped while running {tool} ({detail}); the call may or may not have "
    "run there, and nothing else was forwarded"
)
TIMED_OUT = "the MCP server {name!r} did not answer {tool} within {seconds} s; the call was abandoned"
SERVER_ERROR = "the MCP server {name!r} answered {tool} with an error: {detail}"
NOT_A_RESULT = "the MCP server {name!r} answered {tool} with something that is not a tool result"

_raw_sink: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "aimon_raw_sink", default=None
)
_ANY_DICT = TypeAdapter(dict[str, Any])


class UpstreamError(Exception):
    """A call could not be forwarded, or its answer could not be had; `reason` in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _RawDispatcher(JSONRPCDispatcher):
    """The SDK's JSON-RPC dispatcher, also keeping a ``tools/list`` result exactly as sent (T10)
    for the task that asked (a context variable, so concurrent callers never mix pages)."""

    async def send_raw_request(
        self, method: str, params: Any, opts: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        result = await super().send_raw_request(method, params, opts, **kwargs)
        sink = _raw_sink.get()
        if sink is not None and method == "tools/list":
            sink["page"] = result
            return {"tools": []}  # the session's typed view never coerces the server's claims
        return result


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


class Upstream:
    """One MCP server behind the gateway. `run()` keeps it connected until cancelled."""

    def __init__(
        self,
        config: UpstreamConfig,
        on_listing: Callable[[Upstream, list[dict[str, Any]]], Awaitable[None]],
    ) -> None:
        self.config = config
        self.name = config.name
        self._on_listing = on_listing
        self.session: ClientSession | None = None
        self.problem: str | None = STARTING  # why its calls are refused now; None when usable
        self.listing: list[dict[str, Any]] | None = None  # the last listing, verbatim
        self.ready = anyio.Event()  # set after the first attempt, connected or not
        self._broken = anyio.Event()
        self._relist = anyio.Event()

    # --- connecting --------------------------------------------------------------------------

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        if config.command:
            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=dict(config.env) or None, cwd=config.cwd
            )
            async with stdio_client(params) as streams:
                yield streams
            return
        timeout = httpx2.Timeout(30.0, read=float(config.timeout_seconds) + 30.0)
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(config.headers), timeout=timeout)
            )
            streams = await stack.enter_async_context(
                streamable_http_client(config.url, http_client=http, max_sse_event_size=MAX_SSE_EVENT_BYTES)
            )
            yield streams

    async def run(self) -> None:
        """Connect, list, relay; reconnect with back-off whenever the server goes away."""
        delay = RECONNECT_FIRST
        while True:
            try:
                await self._serve_once()
                delay = RECONNECT_FIRST
            except Exception as exc:
                self.problem = NOT_CONNECTED.format(name=self.name, why=_describe(exc))
                logger.warning("%s", self.problem)
            finally:
                self.session = None
                self.ready.set()
            await anyio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)

    async def _serve_once(self) -> None:
        self._broken = anyio.Event()
        async with self._transport() as (read_stream, write_stream):
            dispatcher = _RawDispatcher(read_stream, write_stream)
            session = ClientSession(
                dispatcher=dispatcher, client_info=CLIENT_INFO, message_handler=self._on_message
            )
            async with session:
                with anyio.fail_after(self.config.timeout_seconds):
                    await session.initialize()
                self.session = session
                await self._list_and_relay(session)
                self.ready.set()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._relist_on_change, session)
                    await self._broken.wait()
                    tasks.cancel_scope.cancel()
        self.problem = NOT_CONNECTED.format(name=self.name, why="it stopped")

    async def _on_message(self, message: Any) -> None:
        # Runs on the session's read loop: never await the session here, only wake the lister.
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()

    async def _relist_on_change(self, session: ClientSession) -> None:
        while True:
            await self._relist.wait()
            self._relist = anyio.Event()
            try:
                await self._list_and_relay(session)
            except Exception as exc:
                logger.warning("listing %s again after list_changed failed: %s", self.name, _describe(exc))

    # --- listing ---------------------------------------------------------------------------------

    async def fetch_listing(self, session: ClientSession) -> list[dict[str, Any]]:
        """The server's whole tools/list, every page, each tool as sent; UpstreamError past the
        bounds the product takes in one relay."""
        tools: list[Any] = []
        size, cursor = 0, None
        for _ in range(MAX_PAGES):
            sink: dict[str, Any] = {}
            token = _raw_sink.set(sink)
            try:
                with anyio.fail_after(self.config.timeout_seconds), suppress(ValidationError):
                    await session.send_request(
                        types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor)), _ANY_DICT
                    )
            finally:
                _raw_sink.reset(token)
            page = sink.get("page")
            if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
                raise UpstreamError(BAD_LISTING.format(name=self.name, problem="no `tools` array"))
            tools.extend(page["tools"])
            size += len(json.dumps(page["tools"], ensure_ascii=False).encode())
            if len(tools) > MAX_TOOLS:
                raise UpstreamError(TOO_MANY_TOOLS.format(name=self.name, limit=MAX_TOOLS))
            if size > MAX_LISTING_BYTES:
                raise UpstreamError(TOO_LARGE.format(name=self.name, size=size, limit=MAX_LISTING_BYTES))
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        else:
            raise UpstreamError(TOO_MANY_PAGES.format(name=self.name, limit=MAX_PAGES))
        problems = [
            item for item in tools if not isinstance(item, dict) or not isinstance(item.get("name"), str)
        ]
        if problems:
            raise UpstreamError(BAD_LISTING.format(name=self.name, problem="a tool without a name"))
        return tools

    async def _list_and_relay(self, session: ClientSession) -> None:
        try:
            listing = await self.fetch_listing(session)
        except UpstreamError as exc:
            self.problem, self.listing = exc.reason, None
            logger.warning("%s", exc.reason)
            return
        self.listing, self.problem = listing, None
        await self._on_listing(self, listing)

    # --- calling ---------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Forward one call, the arguments exactly as given; UpstreamError in words otherwise."""
        session = self.session
        if session is None or self.problem is not None:
            raise UpstreamError(self.problem or NOT_CONNECTED.format(name=self.name, why=STARTING))
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=dict(arguments))
        )
        seconds = self.config.timeout_seconds
        try:
            return await session.send_request(
                request, types.CallToolResult, request_read_timeout_seconds=seconds
            )
        except MCPError as exc:
            code = exc.error.code
            if code == types.CONNECTION_CLOSED:
                self._broken.set()
                raise UpstreamError(
                    STOPPED_MID_CALL.format(name=self.name, tool=tool, detail=_describe(exc))
                ) from exc
            if code == types.REQUEST_TIMEOUT:
                raise UpstreamError(TIMED_OUT.format(name=self.name, tool=tool, seconds=seconds)) from exc
            raise UpstreamError(
                SERVER_ERROR.format(name=self.name, tool=tool, detail=_describe(exc))
            ) from exc
        except ValidationError as exc:
            raise UpstreamError(NOT_A_RESULT.format(name=self.name, tool=tool)) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError) as exc:
            self._broken.set()
            raise UpstreamError(
                STOPPED_MID_CALL.format(name=self.name, tool=tool, detail=_describe(exc))
            ) from exc
