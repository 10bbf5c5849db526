"""The runtime client (G1): what a runtime calls to be governed by AIMON Admin, so it need not
write its own HTTP client, wait loop or refusals.

HTTP goes through aiohttp, its connections kept alive for the hot decision calls: in front
of every tool call, it costs the MCP gateway about a third less CPU per call than httpx2
(the MCP SDK's own client) did, and takes ~20% off the time the gateway adds to a call
(benchmarks/gateway.py, docs/performance.md). Connection errors
and 502/503/504 are retried with exponential back-off (a 503's Retry-After honoured up to a
cap); no 4xx is retried. Opens carry an Idempotency-Key, the same on every retry, so a retry
never opens a second request. Every failure is an AimonError whose `reason` says what to do;
none of them allows anything (fail closed).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json as jsonlib
import math
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import aiohttp

from aimon_client import results
from aimon_client.errors import (
    BAD_SHAPE,
    NOT_AUTHORIZED,
    NOT_JSON,
    SERVER_ERROR,
    UNAVAILABLE,
    UNREACHABLE,
    NotAuthorized,
    ProductUnavailable,
    ProtocolError,
    refused_from,
)
from aimon_client.results import Revoked, SkillDecision, SkillRequest, ToolDecision, ToolRequest

USER_AGENT = "aimon-client/0.1.0"
RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_AFTER_CAP = 10.0  # seconds: a Retry-After longer than this is not waited out in full
MAX_WAIT_ROUND = 60  # the product's long-poll holds a round at most this long
PROGRESS_ROUND = 10  # with on_progress, a round is at most this long (progress at least this often)
IDEMPOTENCY_HEADER = "Idempotency-Key"

R = TypeVar("R", ToolRequest, SkillRequest)
Progress = Callable[[Any, float], Awaitable[None]]

_UNSET = object()


def _body(**fields: Any) -> dict[str, Any]:
    """A request body without its absent (None) fields: the product reads absent as null, and
    the decision endpoints answer the plainest bodies fastest."""
    return {name: value for name, value in fields.items() if value is not None}


class Client:
    """AIMON Admin's runtime API for one runtime token. Use as `async with Client(...) as c:`
    (or call `aclose()`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        user_agent: str = USER_AGENT,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._headers = {
            "Authorization": f"Bearer {token}",
            "User-Agent": user_agent,
            "Accept": "application/json",
        }
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        """The HTTP session, made on first use (aiohttp wants its event loop running). No cap
        on connections: a gateway's waiting long-polls must never queue its decisions."""
        if self._http is None:
            self._http = aiohttp.ClientSession(
                base_url=self.base_url + "/",
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60.0),
                proxy=_env_proxy(self.base_url),
            )
        return self._http

    # --- The transport, its retries and its errors ------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = _UNSET,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        accept: tuple[int, ...] = (),
    ) -> tuple[int, Any]:
        """Send one request (retried as the module says) and return its status and JSON body.
        A 2xx, or a status in `accept`, is returned; anything else raises."""
        what = f"{method} {path}"
        attempt = 0
        while True:
            delay = self.backoff * (2**attempt)
            try:
                async with self._session().request(
                    method,
                    path.lstrip("/"),
                    json=None if json is _UNSET else json,
                    params=params,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout),
                ) as response:
                    status = response.status
                    content = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                if attempt >= self.retries:
                    raise ProductUnavailable(
                        UNREACHABLE.format(url=self.base_url, detail=_words(exc), attempts=attempt + 1)
                    ) from exc
            else:
                if status not in RETRY_STATUSES:
                    return status, self._read(status, content, what, accept)
                if attempt >= self.retries:
                    raise ProductUnavailable(
                        UNAVAILABLE.format(url=self.base_url, status=status, attempts=attempt + 1)
                    )
                delay = max(delay, _retry_after(response.headers.get("Retry-After", "0")))
            attempt += 1
            await asyncio.sleep(delay)

    def _read(self, status: int, content: bytes, what: str, accept: tuple[int, ...]) -> Any:
        if status >= 500:
            raise ProductUnavailable(SERVER_ERROR.format(url=self.base_url, status=status))
        try:
            body = jsonlib.loads(content)
        except ValueError as exc:
            if status == 401:
                raise NotAuthorized(NOT_AUTHORIZED.format(detail="401")) from exc
            raise ProtocolError(NOT_JSON.format(what=what, status=status)) from exc
        if 200 <= status < 300 or status in accept:
            return body
        if status == 401:
            detail = body.get("detail") if isinstance(body, dict) else None
            raise NotAuthorized(NOT_AUTHORIZED.format(detail=detail or "401"))
        if 400 <= status < 500:
            raise refused_from(status, body)
        raise ProtocolError(NOT_JSON.format(what=what, status=status))

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._call(method, path, **kwargs))[1]

    # --- Decisions ----------------------------------------------------------------------------

    async def skill_decisions(
        self,
        skills: list[str],
        *,
        session_id: str | None = None,
        invoking_session_id: str | None = None,
        turn_id: str | None = None,
        principal: str | None = None,
    ) -> list[SkillDecision]:
        """S1-S3: each skill's decision, in the order asked."""
        body = _body(
            skills=list(skills),
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            principal=principal,
        )
        path = "/api/v1/skill-decisions"
        return results.skill_decisions_from(await self._json("POST", path, json=body), f"POST {path}")

    async def tool_decision(
        self,
        tool: str,
        *,
        server: str | None = None,
        arguments: dict[str, Any] | None = None,
        session_id: str | None = None,
        invoking_session_id: str | None = None,
        turn_id: str | None = None,
        principal: str | None = None,
        approval_id: str | None = None,
        replay: bool = False,
    ) -> ToolDecision:
        """T8, U1-U6: may this call run now? Pass the call's exact `arguments`; after an
        *Allow this call* pass the request's id as `approval_id` with the same arguments (U4)."""
        body = _body(
            tool=tool,
            server=server,
            arguments=arguments,
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            principal=principal,
            approval_id=approval_id,
            replay=True if replay else None,
        )
        path = "/api/v1/tool-decisions"
        return results.tool_decision_from(await self._json("POST", path, json=body), f"POST {path}")

    # --- Approval requests: open, wait, cancel ----------------------------------------------------

    async def open_tool_request(
        self,
        tool: str,
        *,
        server: str | None = None,
        arguments: dict[str, Any] | None = None,
        session_id: str | None = None,
        invoking_session_id: str | None = None,
        turn_id: str | None = None,
        principal: str | None = None,
        reason: str | None = None,
        timeout_seconds: int = 300,
        idempotency_key: str | None = None,
    ) -> ToolRequest:
        """U2: ask a person about one call with its exact arguments."""
        body = _body(
            tool=tool,
            server=server,
            arguments=arguments,
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            principal=principal,
            reason=reason,
            timeout_seconds=timeout_seconds,
        )
        path = "/api/v1/tool-approval-requests"
        answer = await self._open(path, body, idempotency_key)
        return results.tool_request_from(answer, f"POST {path}")

    async def open_skill_request(
        self,
        skills: list[str],
        *,
        session_id: str | None = None,
        invoking_session_id: str | None = None,
        turn_id: str | None = None,
        principal: str | None = None,
        reason: str | None = None,
        timeout_seconds: int = 300,
        idempotency_key: str | None = None,
    ) -> SkillRequest:
        """S4: ask a person about skills."""
        body = _body(
            skills=list(skills),
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            principal=principal,
            reason=reason,
            timeout_seconds=timeout_seconds,
        )
        path = "/api/v1/approval-requests"
        answer = await self._open(path, body, idempotency_key)
        return results.skill_request_from(answer, f"POST {path}")

    async def _open(self, path: str, body: dict[str, Any], idempotency_key: str | None) -> Any:
        # One key for every retry of this open: a retry returns the request the first try
        # opened, never a second one.
        key = idempotency_key or str(uuid.uuid4())
        return await self._json("POST", path, json=body, headers={IDEMPOTENCY_HEADER: key})

    async def wait_tool_request(
        self, request_id: str, *, timeout: float | None = None, on_progress: Progress | None = None
    ) -> ToolRequest:
        """Long-poll until the request leaves PENDING or `timeout` seconds pass (then its
        PENDING state is returned). `on_progress(state, seconds_left)` is awaited after every
        round, at least every 10 s."""
        path = f"/api/v1/tool-approval-requests/{_segment(request_id)}"
        return await self._wait(path, results.tool_request_from, timeout, on_progress)

    async def wait_skill_request(
        self, request_id: str, *, timeout: float | None = None, on_progress: Progress | None = None
    ) -> SkillRequest:
        """As wait_tool_request, for a skill request."""
        path = f"/api/v1/approval-requests/{_segment(request_id)}"
        return await self._wait(path, results.skill_request_from, timeout, on_progress)

    async def _wait(
        self,
        path: str,
        parse: Callable[[Any, str], R],
        timeout: float | None,
        on_progress: Progress | None,
    ) -> R:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        longest = PROGRESS_ROUND if on_progress is not None else MAX_WAIT_ROUND
        outage = 0
        while True:
            now = time.monotonic()
            left = math.inf if deadline is None else deadline - now
            wait = int(min(longest, max(0, math.ceil(left))))
            try:
                body = await self._json("GET", path, params={"wait": wait}, timeout=self.timeout + wait)
            except ProductUnavailable:
                # A dropped connection or a restart outlasting the retries: a bounded wait
                # keeps trying until its deadline (the request lives on in the product).
                if deadline is None or time.monotonic() >= deadline:
                    raise
                outage += 1
                pause = min(self.backoff * (2**outage), 5.0, max(0.0, deadline - time.monotonic()))
                await asyncio.sleep(pause)
                continue
            outage = 0
            state = parse(body, f"GET {path}")
            if not state.pending:
                return state
            left = math.inf if deadline is None else deadline - time.monotonic()
            if on_progress is not None:
                until_expiry = (state.expires_at - dt.datetime.now(dt.UTC)).total_seconds()
                await on_progress(state, max(0.0, min(left, until_expiry)))
            if left <= 0:
                return state

    async def cancel_tool_request(self, request_id: str) -> ToolRequest:
        """Cancel a PENDING tool request (S9: the call is then denied for the session). One
        already answered, expired or cancelled is returned as it is."""
        path = f"/api/v1/tool-approval-requests/{_segment(request_id)}"
        return await self._cancel(path, results.tool_request_from)

    async def cancel_skill_request(self, request_id: str) -> SkillRequest:
        """As cancel_tool_request, for a skill request."""
        path = f"/api/v1/approval-requests/{_segment(request_id)}"
        return await self._cancel(path, results.skill_request_from)

    async def _cancel(self, path: str, parse: Callable[[Any, str], R]) -> R:
        status, body = await self._call("POST", f"{path}/cancel", accept=(409,))
        if status == 409:  # closed already (answered, expired, or a retry's cancel): read it
            body = await self._json("GET", path, params={"wait": 0})
        return parse(body, f"POST {path}/cancel")

    # --- Sessions -----------------------------------------------------------------------------

    async def clear_session(self, session_id: str) -> int:
        """S10: drop the session's turn and session approvals; how many were removed."""
        path = f"/api/v1/sessions/{_segment(session_id)}/clear"
        reader = results.Reader(await self._json("POST", path), f"POST {path}")
        return reader.typed("removed", int)

    async def revoke_session(self, session_id: str, *, agent: bool = False) -> Revoked:
        """S10: revoke the session's approvals, and with `agent` the runtime's agent-wide ones."""
        path = f"/api/v1/sessions/{_segment(session_id)}/revoke"
        body = await self._json("POST", path, json={"agent": agent})
        return results.revoked_from(body, f"POST {path}")

    # --- Tools and MCP servers ------------------------------------------------------------------

    async def tools(self) -> list[results.ToolInfo]:
        """T6: the tools this runtime may give its model (its own and its MCP servers')."""
        path = "/api/v1/tools"
        return results.listed(await self._json("GET", path), f"GET {path}", results.tool_info_from)

    async def put_tools(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """Replace this runtime's own tool catalog; the product's answer as it is."""
        path = "/api/v1/tools"
        body = await self._json("PUT", path, json={"tools": tools})
        return results.Reader(body, f"PUT {path}").body

    async def mcp_servers(self) -> list[results.McpServerConfig]:
        """The enabled MCP server configs this runtime connects to (no secrets)."""
        path = "/api/v1/mcp-servers"
        return results.listed(await self._json("GET", path), f"GET {path}", results.mcp_server_from)

    async def relay_listing(self, server: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """T15: hand over a server's `tools/list` result verbatim; each tool's resolved axes."""
        path = f"/api/v1/mcp-servers/{_segment(server)}/tools"
        body = await self._json("POST", path, json={"tools": tools})
        if not isinstance(body, list) or not all(isinstance(item, dict) for item in body):
            raise ProtocolError(BAD_SHAPE.format(what=f"POST {path}", problem="expected an array of objects"))
        return body


def _segment(value: str) -> str:
    """One path segment, percent-encoded (a session id may hold `/`)."""
    return quote(value, safe="")


def _env_proxy(url: str) -> str | None:
    """The proxy the usual environment variables (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) name for
    the product's address, looked up once: aiohttp's `trust_env` looks it up on every request,
    which cost the gateway ~1 ms of CPU per call (benchmarks/gateway.py)."""
    parts = urlsplit(url)
    if parts.hostname is None or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _retry_after(value: str) -> float:
    try:
        return min(max(0.0, float(value)), RETRY_AFTER_CAP)
    except ValueError:  # an HTTP date, or nonsense: the back-off alone
        return 0.0


def _words(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
