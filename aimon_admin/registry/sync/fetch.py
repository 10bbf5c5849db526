"""Fetching a server's whole ``tools/list`` with the official MCP SDK, verbatim (T10).

The SDK's typed client (`ClientSession.list_tools`) validates each page with pydantic:
unknown annotation fields are dropped, ``"readOnlyHint": "yes"`` turns into ``True``, and a
hint it cannot coerce (``2``) fails the whole listing. So the fetch reads ``tools/list``
results one layer down: `_RawListingDispatcher`, the SDK's own JSON-RPC dispatcher, keeps
each result as the JSON the server sent and hands the session an empty page in its place.
The session still does everything else (handshake, request ids, per-request stamping of
headers and ``_meta``).

The fetch runs on an event loop in a helper thread (anyio's blocking portal), so the
caller's thread, where the database connection lives, can record progress as it goes.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import IO, Any

import anyio
import anyio.from_thread
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from pydantic import ValidationError

from aimon_admin.core.encryption import is_unreadable, redact_url
from aimon_admin.core.plurals import counted
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.models import McpServer
from aimon_admin.registry.sync.messages import (
    DETAIL_HTTP_STATUS,
    DETAIL_NOT_JSON_RPC,
    DETAIL_STDERR,
    ERROR_CLOSED,
    ERROR_COMMAND_FAILED,
    ERROR_COMMAND_NOT_FOUND,
    ERROR_PROTOCOL,
    ERROR_SECRETS_UNREADABLE,
    ERROR_SERVER_ERROR,
    ERROR_TIMED_OUT,
    ERROR_TOO_MANY_PAGES,
    ERROR_TOO_MANY_TOOLS,
    ERROR_UNEXPECTED,
    ERROR_UNREACHABLE,
    PROGRESS_LISTED,
    STAGE_CONNECTING,
    STAGE_INITIALIZE,
    STAGE_PAGE,
    STAGE_STARTING,
)

logger = logging.getLogger(__name__)

# Bounds that keep a hostile or broken server from holding a worker (with timeout_seconds).
MAX_TOOLS = 10_000
MAX_PAGES = 1_000
MAX_SSE_EVENT_BYTES = 32 * 1024 * 1024  # one page as one SSE event; the SDK's default is 1 MiB
TOOL_NAME_MAX_LENGTH = 200  # Tool.name
# A tool definition deeper than this is refused: the fingerprint, the audit log and the
# database all walk it recursively, and no real input schema comes near it.
MAX_JSON_DEPTH = 100
CLIENT_INFO = types.Implementation(name="aimon-admin", version="1.0")

ONE_LINE_LIMIT = 500


def one_line(text: str, limit: int = ONE_LINE_LIMIT) -> str:
    """`text` on one line, at most `limit` characters: how a run's error is kept and shown."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SyncError(Exception):
    """A sync failed for a reason an operator can read as it is (one line)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))
        self.message = one_line(message)


@dataclass(frozen=True)
class _Target:
    """What the fetch needs from an McpServer, copied out so the async side never touches the ORM."""

    transport: str
    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    url: str
    headers: dict[str, str]
    timeout_seconds: int

    @property
    def secrets(self) -> list[str]:
        """Env and header values: never in a message (a server may echo them on stderr)."""
        return sorted(
            (v for v in (*self.env.values(), *self.headers.values()) if len(v) >= 4), key=len, reverse=True
        )

    @classmethod
    def of(cls, server: McpServer) -> _Target:
        # Fail closed: never connect with a secret missing (core.encryption.Unreadable).
        if is_unreadable(server.env, server.headers, server.url):
            raise SyncError(ERROR_SECRETS_UNREADABLE)
        return cls(
            transport=server.transport,
            command=server.command,
            args=tuple(str(arg) for arg in server.args or ()),
            env={str(k): str(v) for k, v in (server.env or {}).items()},
            url=server.url,
            headers={str(k): str(v) for k, v in (server.headers or {}).items()},
            timeout_seconds=server.timeout_seconds,
        )


@dataclass
class _FetchState:
    """Where the fetch got to, for the error message if it stops there."""

    stage: str = STAGE_CONNECTING
    stderr: IO[bytes] | None = None  # the stdio server's stderr, a file it shares with us
    stream_errors: list[str] = field(default_factory=list)
    http_status: int | None = None  # the last HTTP error status (the SDK keeps only its own wording)

    async def on_http_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.http_status = response.status_code

    async def on_stream_exception(self, exc: Exception) -> None:
        """The transport met something it could not read (the SDK logs it and reads on)."""
        if len(self.stream_errors) < 3:
            sample = exc.errors()[0].get("input") if isinstance(exc, ValidationError) else None
            self.stream_errors.append(one_line(repr(sample) if isinstance(sample, str) else str(exc), 80))

    def detail(self) -> str:
        """What the server said on the side (stderr tail, non-JSON-RPC output), for messages."""
        text = ""
        if self.stderr is not None:
            # pread: the child writes through the same file offset, which a seek would move.
            fd = self.stderr.fileno()
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 400, max(0, size - 400)).decode("utf-8", "replace").strip()
            if tail:
                text += DETAIL_STDERR.format(tail=one_line(tail.splitlines()[-1], 200))
        if self.stream_errors:
            text += DETAIL_NOT_JSON_RPC.format(sample=self.stream_errors[0])
        if self.http_status is not None:
            text += DETAIL_HTTP_STATUS.format(status=self.http_status)
        return text


class _RawListingDispatcher(JSONRPCDispatcher):
    """The SDK's JSON-RPC dispatcher, keeping each ``tools/list`` result exactly as sent (T10).

    The session above it gets an empty page instead, so its pydantic models never coerce,
    drop or refuse the server's claims.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._page: dict[str, Any] | None = None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        result = await super().send_raw_request(method, params, opts, **kwargs)
        if method != "tools/list":
            return result
        self._page = result
        return {**{k: v for k, v in result.items() if k not in ("tools", "nextCursor")}, "tools": []}

    async def list_tools_page(self, session: ClientSession, cursor: str | None) -> dict[str, Any]:
        """One ``tools/list`` page, verbatim, sent through `session` (stamping, ids, era)."""
        self._page = None
        # A ValidationError is about the typed view of the page's envelope; the raw page counts.
        with suppress(ValidationError):
            await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        if self._page is None:
            raise SyncError("the SDK did not hand back the tools/list result")
        return self._page


def _tool_problem(item: Any) -> str | None:
    if not isinstance(item, dict):
        return "is not an object"
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return "has no name"
    if len(name) > TOOL_NAME_MAX_LENGTH:
        return f"has a name longer than {TOOL_NAME_MAX_LENGTH} characters"
    return _json_problem(item)


def _json_problem(value: Any) -> str | None:
    """What makes a tool's JSON unstorable: too deep, or a NUL character (which PostgreSQL's
    jsonb and the audit log refuse). Walked without recursion, however deep it is."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return "holds a NUL character"
        if isinstance(item, dict | list) and depth > MAX_JSON_DEPTH:
            return f"is nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, dict):
            if any("\x00" in str(key) for key in item):
                return "holds a NUL character"
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return None


async def _list_all(
    session: ClientSession,
    dispatcher: _RawListingDispatcher,
    state: _FetchState,
    report: Callable[[str], None],
    max_tools: int,
    max_pages: int,
) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    first_page: dict[str, int] = {}
    cursor: str | None = None
    cursors: set[str] = set()
    for page in range(1, max_pages + 1):
        state.stage = STAGE_PAGE.format(page=page)
        raw = await dispatcher.list_tools_page(session, cursor)
        batch = raw.get("tools")
        if not isinstance(batch, list):
            raise SyncError(ERROR_PROTOCOL.format(stage=state.stage, detail='"tools" is not a list'))
        if len(tools) + len(batch) > max_tools:
            raise SyncError(ERROR_TOO_MANY_TOOLS.format(limit=max_tools))
        for position, item in enumerate(batch, start=1):
            if problem := _tool_problem(item):
                raise SyncError(ERROR_PROTOCOL.format(stage=state.stage, detail=f"tool {position} {problem}"))
            if item["name"] in first_page:
                detail = f"tool {item['name']!r} listed again (first on page {first_page[item['name']]})"
                raise SyncError(ERROR_PROTOCOL.format(stage=state.stage, detail=detail))
            first_page[item["name"]] = page
            tools.append(item)
        report(counted(PROGRESS_LISTED, len(tools), page=page))
        next_cursor = raw.get("nextCursor")
        if next_cursor is None:
            return tools
        if not isinstance(next_cursor, str):
            raise SyncError(ERROR_PROTOCOL.format(stage=state.stage, detail='"nextCursor" is not a string'))
        if next_cursor in cursors or next_cursor == cursor:
            detail = f"cursor {one_line(next_cursor, 60)!r} handed out twice"
            raise SyncError(ERROR_PROTOCOL.format(stage=state.stage, detail=detail))
        cursors.add(next_cursor)
        cursor = next_cursor
    raise SyncError(ERROR_TOO_MANY_PAGES.format(limit=max_pages))


@asynccontextmanager
async def _connect(target: _Target, state: _FetchState) -> AsyncIterator[Any]:
    """The SDK transport for `target`: a child process on stdio, or streamable HTTP."""
    if target.transport == McpTransport.STDIO:
        state.stage = STAGE_STARTING
        params = StdioServerParameters(command=target.command, args=list(target.args), env=target.env)
        async with stdio_client(params, errlog=state.stderr) as streams:  # type: ignore[arg-type]
            yield streams
        return
    state.stage = STAGE_CONNECTING
    # The SDK's client settings (no redirects followed), plus a hook that keeps the HTTP status.
    http_client = httpx2.AsyncClient(
        headers=target.headers or None,
        timeout=httpx2.Timeout(float(target.timeout_seconds)),
        event_hooks={"response": [state.on_http_response]},
    )
    async with (
        http_client as http,
        streamable_http_client(
            target.url, http_client=http, max_sse_event_size=MAX_SSE_EVENT_BYTES
        ) as streams,
    ):
        yield streams


def _redact(message: str, secrets: list[str]) -> str:
    for secret in secrets:
        message = message.replace(secret, "[secret]")
    return message


def _leaf(exc: BaseException) -> BaseException:
    """The exception that explains a failure, out of the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        exc = (leaves or list(exc.exceptions))[0]
    return exc


def _failure_message(exc: BaseException, target: _Target, state: _FetchState) -> str:
    exc = _leaf(exc)
    where = state.stage
    if isinstance(exc, SyncError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return ERROR_TIMED_OUT.format(seconds=target.timeout_seconds, stage=where, detail=state.detail())
    if where == STAGE_STARTING and isinstance(exc, FileNotFoundError):
        return ERROR_COMMAND_NOT_FOUND.format(command=target.command)
    if where == STAGE_STARTING and isinstance(exc, OSError | ValueError):
        reason = getattr(exc, "strerror", None) or str(exc)
        return ERROR_COMMAND_FAILED.format(command=target.command, reason=reason)
    if isinstance(exc, httpx2.TransportError):
        reason = one_line(str(exc) or type(exc).__name__, 120)
        if where in (STAGE_CONNECTING, STAGE_INITIALIZE):
            return ERROR_UNREACHABLE.format(url=redact_url(target.url), reason=reason)
        return ERROR_CLOSED.format(stage=where, detail=f"; {reason}")
    if isinstance(exc, MCPError):
        if exc.code == types.CONNECTION_CLOSED:
            return ERROR_CLOSED.format(stage=where, detail=state.detail())
        message = one_line(exc.message, 200)
        return ERROR_SERVER_ERROR.format(code=exc.code, stage=where, message=message, detail=state.detail())
    if isinstance(exc, ValidationError):
        problem = exc.errors()[0]
        detail = f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}"
        return ERROR_PROTOCOL.format(stage=where, detail=one_line(detail, 200))
    if isinstance(exc, RuntimeError) and "protocol version" in str(exc):
        return ERROR_PROTOCOL.format(stage=where, detail=one_line(str(exc), 200))
    logger.error("MCP fetch failed %s", where, exc_info=exc)
    return ERROR_UNEXPECTED.format(stage=where, detail=one_line(f"{type(exc).__name__}: {exc}", 200))


async def _fetch(
    target: _Target, report: Callable[[str], None], max_tools: int, max_pages: int
) -> list[dict]:
    # A file, not a pipe, for a stdio server's stderr: a chatty server never blocks on it.
    with tempfile.TemporaryFile() if target.transport == McpTransport.STDIO else nullcontext() as stderr:
        return await _fetch_with(target, _FetchState(stderr=stderr), report, max_tools, max_pages)


async def _fetch_with(
    target: _Target, state: _FetchState, report: Callable[[str], None], max_tools: int, max_pages: int
) -> list[dict[str, Any]]:
    listing: list[dict[str, Any]] | None = None
    try:
        with anyio.fail_after(target.timeout_seconds):
            async with _connect(target, state) as (read_stream, write_stream):
                dispatcher = _RawListingDispatcher(
                    read_stream, write_stream, on_stream_exception=state.on_stream_exception
                )
                async with ClientSession(dispatcher=dispatcher, client_info=CLIENT_INFO) as session:
                    state.stage = STAGE_INITIALIZE
                    # The initialize handshake, which every server speaks (the SDK's "auto" mode
                    # would first probe the 2026-07-28 `server/discover`, a round trip more).
                    await session.initialize()
                    listing = await _list_all(session, dispatcher, state, report, max_tools, max_pages)
    except Exception as exc:
        if listing is None:
            raise SyncError(_redact(_failure_message(exc, target, state), target.secrets)) from exc
        # The listing was complete; only closing the connection went wrong.
        logger.warning("MCP server did not close cleanly after a complete listing: %r", _leaf(exc))
    assert listing is not None  # nosec B101 # narrows the type; the except above raised when it is None
    return listing


def fetch_tool_listing(
    server: McpServer,
    *,
    on_progress: Callable[[str], None] | None = None,
    max_tools: int = MAX_TOOLS,
    max_pages: int = MAX_PAGES,
) -> list[dict[str, Any]]:
    """Connect to `server`, initialize, and return its whole ``tools/list``, every page.

    Each tool is the object the server sent, untouched (T10). The whole fetch is bounded
    by the server's ``timeout_seconds`` and by `max_tools` and `max_pages`. Raises
    `SyncError` with a one-line message. `on_progress` is called on this thread (where
    the database connection lives) with the latest progress line, while the fetch runs
    on an event loop in a helper thread.
    """
    target = _Target.of(server)
    updates: queue.SimpleQueue[str] = queue.SimpleQueue()
    with anyio.from_thread.start_blocking_portal() as portal:
        future = portal.start_task_soon(_fetch, target, updates.put, max_tools, max_pages)
        try:
            while True:
                done, _ = concurrent.futures.wait([future], timeout=0.2)
                latest = None
                while not updates.empty():
                    latest = updates.get()
                if latest is not None and on_progress is not None:
                    on_progress(latest)
                if done:
                    return future.result()
        except BaseException:
            future.cancel()  # e.g. the task's soft time limit: stop the fetch, close the connection
            raise
