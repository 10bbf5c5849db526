"""The MCP gateway (G2): one MCP server in front of a runtime's MCP servers, deciding every call
with AIMON Admin.

``tools/list`` serves what the product serves this runtime for the configured servers (the
ceiling applied, held tools left out, the product's description and input schema, never the
upstream's live text; T6, T15), named by ``tool_names``. ``tools/call`` asks the product with
the exact arguments and the client's MCP session as ``session_id``: ALLOW forwards them
unchanged; DENY is a tool error naming the reason; ASK opens a tool approval request, reports
progress while it waits and forwards only when the answer allows this very call (U4). Anything
the gateway cannot be sure of — the product unreachable, an answer it does not understand, an
unknown tool, a server that stopped — is a refusal in words, never a forward on a guess.
"""

from __future__ import annotations

import logging
import re
import string
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from aimon_client import __version__
from aimon_client.client import Client
from aimon_client.errors import AimonError, ProductUnavailable
from aimon_client.gateway.config import GatewayConfig, UpstreamConfig
from aimon_client.gateway.upstream import Upstream, UpstreamError
from aimon_client.results import Decision, Status, ToolInfo, ToolRequest

logger = logging.getLogger("aimon_client.gateway")

USER_AGENT = f"aimon-gateway/{__version__}"
SESSION_HEADER = "mcp-session-id"
CANCEL_GRACE_SECONDS = 5.0

# What the client sees, each a sentence (G2). Tests import these.
UNKNOWN_TOOL = "Refused: {name!r} is not a tool this gateway serves (see tools/list); nothing was forwarded."
DENIED = "Refused by AIMON Admin: {words}. {name} was not run."
NOT_DECIDED = "Refused: {reason} {name} was not run."
PERSON_DENIED = "Refused: {who} denied this call to {name} in AIMON Admin; it was not run."
NO_ANSWER = "Refused: nobody answered the request to run {name} within {seconds} s; it was not run."
CANCELLED = "Refused: the request to run {name} was cancelled; it was not run."
NOT_THIS_CALL = (
    "Refused: the answer in AIMON Admin does not allow this call to {name} with these arguments "
    "({words}); it was not run."
)
UPSTREAM_FAILED = "Refused: {reason}."
INTERNAL = "Refused: the gateway met an unexpected problem ({detail}); {name} was not run."
WAITING = "waiting for {who}'s answer in AIMON Admin, {left} s left"
LISTING_FAILED = "AIMON Admin could not say which tools this runtime may use: {reason}"
REQUEST_REASON = "{name} called through the MCP gateway"


def refusal(text: str) -> types.CallToolResult:
    """A tool error the client's model reads (isError true), never a forwarded call."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class ToolNames:
    """Client-facing tool names from ``tool_names`` ("{server}__{tool}") and back again."""

    def __init__(self, pattern: str, servers: list[str]) -> None:
        self.pattern = pattern
        # Longest names first, so a server named "git" never takes "git-lab"'s tools.
        alternatives = "|".join(re.escape(name) for name in sorted(servers, key=len, reverse=True))
        regex = ""
        for literal, field, _, _ in string.Formatter().parse(pattern):
            regex += re.escape(literal)
            if field == "server":
                regex += f"(?P<server>{alternatives or '(?!)'})"
            elif field == "tool":
                regex += "(?P<tool>.+)"
        self._regex = re.compile(f"^{regex}$", re.DOTALL)

    def name(self, server: str, tool: str) -> str:
        return self.pattern.format(server=server, tool=tool)

    def parse(self, name: str) -> tuple[str, str] | None:
        match = self._regex.match(name)
        return (match["server"], match["tool"]) if match else None


@dataclass(frozen=True)
class Served:
    server: str
    tool: str


def _annotations(info: ToolInfo) -> dict[str, Any]:
    """The product's resolved axes (T11), in MCP's words: what the client should believe."""
    return {
        "readOnlyHint": info.read_only,
        "destructiveHint": info.destructive_behavior == "DESTRUCTIVE",
        "idempotentHint": info.idempotency_behavior == "IDEMPOTENT",
    }


class Gateway:
    """The gateway's state: the upstream servers, the product's client, the served names."""

    def __init__(self, config: GatewayConfig, client: Client, upstreams: list[UpstreamConfig]) -> None:
        self.config = config
        self.client = client
        self.upstreams = {entry.name: Upstream(entry, self._relay) for entry in upstreams}
        self.names = ToolNames(config.tool_names, list(self.upstreams))
        self._served: dict[str, Served] = {}
        # stdio serves one client per process: one session for the process's life (S1).
        self.stdio_session = f"mcp-{uuid.uuid4().hex}"

    # --- upstreams -------------------------------------------------------------------------------

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """Connect every upstream (each relays its listing once connected) and wait until each
        has tried once, at most its own timeout."""
        for upstream in self.upstreams.values():
            tasks.start_soon(upstream.run, name=f"upstream {upstream.name}")
        for upstream in self.upstreams.values():
            with anyio.move_on_after(upstream.config.timeout_seconds + 5):
                await upstream.ready.wait()

    async def _relay(self, upstream: Upstream, listing: list[dict[str, Any]]) -> None:
        """T15: the live listing goes to the product verbatim, so drift shows there."""
        try:
            await self.client.relay_listing(upstream.name, listing)
        except AimonError as exc:
            logger.warning("relaying %s's tools/list to AIMON Admin failed: %s", upstream.name, exc.reason)

    # --- tools/list ------------------------------------------------------------------------------

    async def served_tools(self) -> list[types.Tool]:
        """What the product serves this runtime, for the servers behind this gateway."""
        infos = await self.client.tools()
        tools: list[types.Tool] = []
        served: dict[str, Served] = {}
        for info in infos:
            upstream = self.upstreams.get(info.server or "")
            if upstream is None or info.held_for_review or upstream.listing is None:
                continue  # not behind this gateway, held for review (T15), or unusable
            name = self.names.name(info.server, info.name)
            schema = dict(info.input_schema)
            schema.setdefault("type", "object")
            if name in served or schema["type"] != "object":
                logger.warning(
                    "not serving %s: a duplicate name or an input schema that is not an object", name
                )
                continue
            tool = {"name": name, "description": info.description, "inputSchema": schema}
            tools.append(types.Tool.model_validate({**tool, "annotations": _annotations(info)}))
            served[name] = Served(info.server, info.name)
        self._served = served
        return tools

    async def on_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            return types.ListToolsResult(tools=await self.served_tools())
        except AimonError as exc:
            raise MCPError(
                code=types.INTERNAL_ERROR, message=LISTING_FAILED.format(reason=exc.reason)
            ) from None

    # --- tools/call ------------------------------------------------------------------------------

    def session_id(self, ctx: ServerRequestContext[Any]) -> str | None:
        """The client's MCP session as the product's session_id: the Streamable HTTP session's
        id, or one id for this stdio process. A stateless HTTP client has no session: its calls
        are unattended (T8), so ASK becomes DENY."""
        request = ctx.request
        if request is None:
            return self.stdio_session
        headers = getattr(request, "headers", None)
        value = headers.get(SESSION_HEADER) if headers is not None else None
        return f"mcp-{value}"[:200] if value else None

    async def resolve(self, name: str) -> Served | None:
        found = self._served.get(name)
        if found is None and self.names.parse(name) is not None:
            await self.served_tools()  # perhaps listed since; one look at the product
            found = self._served.get(name)
        return found

    async def on_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments: Mapping[str, Any] = params.arguments if params.arguments is not None else {}
        try:
            return await self.call(ctx, params.name, arguments)
        except AimonError as exc:
            return refusal(NOT_DECIDED.format(reason=exc.reason, name=params.name))
        except UpstreamError as exc:
            return refusal(UPSTREAM_FAILED.format(reason=exc.reason))
        except Exception as exc:
            logger.exception("tools/call %s failed", params.name)
            return refusal(INTERNAL.format(detail=type(exc).__name__, name=params.name))

    async def call(
        self, ctx: ServerRequestContext[Any], name: str, arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        parsed = self.names.parse(name)
        if parsed is None:
            return refusal(UNKNOWN_TOOL.format(name=name))
        upstream = self.upstreams[parsed[0]]
        if upstream.listing is None and upstream.problem is not None:
            return refusal(UPSTREAM_FAILED.format(reason=upstream.problem))
        served = await self.resolve(name)
        if served is None:
            return refusal(UNKNOWN_TOOL.format(name=name))
        ask = {
            "server": served.server,
            "arguments": dict(arguments),
            "session_id": self.session_id(ctx),
            "principal": self.config.principal,
        }
        decision = await self.client.tool_decision(served.tool, **ask)
        if decision.decision == Decision.ALLOW:
            return await upstream.call(served.tool, arguments)
        if decision.decision == Decision.DENY:
            return refusal(DENIED.format(words=decision.in_words(), name=name))
        return await self.ask(ctx, name, served, ask, upstream)

    async def ask(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        served: Served,
        ask: dict[str, Any],
        upstream: Upstream,
    ) -> types.CallToolResult:
        """U2-U4: open a request, wait for a person, forward only on an answer for this call."""
        wait = self.config.wait_seconds
        who = self.config.principal or "a person"
        request = await self.client.open_tool_request(
            served.tool, **ask, reason=REQUEST_REASON.format(name=name), timeout_seconds=wait
        )

        async def progress(state: ToolRequest, left: float) -> None:
            # Only a client that gave a progressToken hears it (the SDK sends nothing otherwise).
            await ctx.session.report_progress(
                max(0.0, wait - left), float(wait), WAITING.format(who=who, left=int(left))
            )

        try:
            if request.pending:
                await progress(request, float(wait))
                request = await self.client.wait_tool_request(request.id, timeout=wait, on_progress=progress)
        except ProductUnavailable:
            raise  # the product is gone: the request expires there (S9), the call is refused
        except BaseException:
            # The client's notifications/cancelled (or the gateway stopping) cancels the
            # request, so it is denied for the session rather than left open (S9).
            await self._cancel_quietly(request.id)
            raise
        if request.pending:
            await self._cancel_quietly(request.id)
            return refusal(NO_ANSWER.format(name=name, seconds=wait))
        if request.status == Status.EXPIRED:
            return refusal(NO_ANSWER.format(name=name, seconds=wait))
        if request.status == Status.CANCELLED:
            return refusal(CANCELLED.format(name=name))
        if request.decision != Decision.ALLOW:
            return refusal(PERSON_DENIED.format(who=request.answered_by or "a person", name=name))
        # U4: what runs is what was approved. Ask again presenting the approval; only ALLOW runs.
        again = await self.client.tool_decision(served.tool, **ask, approval_id=request.id)
        if again.decision != Decision.ALLOW:
            return refusal(NOT_THIS_CALL.format(name=name, words=again.in_words()))
        return await upstream.call(served.tool, ask["arguments"])

    async def _cancel_quietly(self, request_id: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_SECONDS):
            try:
                await self.client.cancel_tool_request(request_id)
            except AimonError as exc:
                logger.warning("cancelling request %s failed: %s", request_id, exc.reason)

    # --- the MCP server ------------------------------------------------------------------------

    def build_server(self) -> Server[Any]:
        return Server(
            "aimon-gateway",
            version=__version__,
            instructions="Tools governed by AIMON Admin: some calls wait for a person's answer.",
            on_list_tools=self.on_list_tools,
            on_call_tool=self.on_call_tool,
        )
