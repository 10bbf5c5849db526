"""A hostile MCP server against the sync.

tests/registry/test_sync.py already covers servers that never answer (initialize or
tools/list, stdio and HTTP), write garbage, exit, loop their cursor, page forever, send
errors, nameless or repeated tools. What it lacked is here: one enormous page past
MAX_TOOLS, deeply nested JSON in an input schema, a NUL in a definition, and every wrong
type for annotations. Each sync finishes within the server's timeout, and a failed one
leaves the stored tools as they were and the audit chain valid (A2, A3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, SyncStatus
from aimon_admin.registry.models import McpServer, McpSyncRun, Tool
from aimon_admin.registry.services import mcp_server_create, mcp_sync_request, mcp_tools_record
from aimon_admin.registry.sync.fetch import MAX_JSON_DEPTH, MAX_TOOLS
from aimon_admin.registry.sync.messages import ERROR_PROTOCOL, ERROR_TOO_MANY_TOOLS, STAGE_PAGE
from tests.conftest import TEST_ACTOR
from tests.registry.mcp_servers import catalog
from tests.registry.mcp_servers._base import echo_call, verbatim_tools_list
from tests.registry.mcp_servers.http import serve_http

pytestmark = pytest.mark.django_db

TIMEOUT = 20  # the server's timeout_seconds: no sync may take longer
PAGE_1 = STAGE_PAGE.format(page=1)


def hostile_server(tools: list[Any]) -> Any:
    """A real SDK server whose tools/list answers `tools` exactly as given, on one page."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        raise AssertionError("answered by the middleware")

    server: Server[Any] = Server("aimon-test-hostile", on_list_tools=list_tools, on_call_tool=echo_call)
    server.middleware.append(verbatim_tools_list(lambda cursor: {"tools": tools}))
    return server


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.fixture
def hostile(operator: Any) -> Iterator[Callable[[list[Any]], McpServer]]:
    """`hostile(tools)`: an McpServer (TRUST) served in-process, with tools an earlier sync stored."""
    with ExitStack() as stack:

        def make(tools: list[Any]) -> McpServer:
            url = stack.enter_context(serve_http(hostile_server(tools)))
            server = mcp_server_create(
                name=f"hostile-{McpServer.objects.count() + 1}",
                transport=McpTransport.STREAMABLE_HTTP,
                url=url,
                timeout_seconds=TIMEOUT,
                annotation_trust=AnnotationTrust.TRUST,
                actor=TEST_ACTOR,
            )
            mcp_tools_record(server=server, listing=catalog.listing(), actor=TEST_ACTOR, complete=True)
            return server

        yield make


@pytest.fixture
def sync(
    django_capture_on_commit_callbacks: Callable[..., Any], operator: Any
) -> Callable[[McpServer], tuple[McpSyncRun, float]]:
    """Request a sync as the UI does; the eager task runs at commit. Returns the run and its seconds."""

    def sync(server: McpServer) -> tuple[McpSyncRun, float]:
        started = time.monotonic()
        with django_capture_on_commit_callbacks(execute=True):
            run = mcp_sync_request(server=server, actor=Actor.for_user(operator))
        run.refresh_from_db()
        return run, time.monotonic() - started

    return sync


def tool_rows(server: McpServer) -> list[dict[str, Any]]:
    return list(Tool.objects.filter(server=server).order_by("name").values())


def assert_failed_cleanly(
    server: McpServer, run: McpSyncRun, seconds: float, before: list[dict[str, Any]]
) -> None:
    assert run.status == SyncStatus.FAILED
    assert seconds < TIMEOUT + 5  # the worker was not held
    assert tool_rows(server) == before  # nothing stored from the hostile listing
    assert audit_verify_chain()[1] is None  # A2


def test_an_enormous_listing_past_max_tools_fails_at_the_cap(
    hostile: Callable[[list[Any]], McpServer], sync: Callable[..., Any]
) -> None:
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(MAX_TOOLS + 1)]
    server = hostile(tools)
    before = tool_rows(server)

    run, seconds = sync(server)

    assert run.error == ERROR_TOO_MANY_TOOLS.format(limit=MAX_TOOLS)
    assert_failed_cleanly(server, run, seconds, before)


def test_an_input_schema_one_level_too_deep_fails_the_sync_cleanly(
    hostile: Callable[[list[Any]], McpServer], sync: Callable[..., Any]
) -> None:
    # nested(k) is 2k + 1 objects deep, under the tool object: MAX_JSON_DEPTH + 2 in all.
    server = hostile([{"name": "deep", "inputSchema": nested(MAX_JSON_DEPTH // 2)}])
    before = tool_rows(server)

    run, seconds = sync(server)

    detail = f"tool 1 is nested deeper than {MAX_JSON_DEPTH} levels"
    assert run.error == ERROR_PROTOCOL.format(stage=PAGE_1, detail=detail)
    assert_failed_cleanly(server, run, seconds, before)


def test_json_nested_thousands_deep_fails_the_sync_cleanly(
    hostile: Callable[[list[Any]], McpServer], sync: Callable[..., Any]
) -> None:
    # The SDK's JSON handling stops it before the fetch's own walk does.
    server = hostile([{"name": "very_deep", "inputSchema": nested(5_000)}])
    before = tool_rows(server)

    run, seconds = sync(server)

    assert PAGE_1 in run.error  # a parse error or a closed connection, as the SDK meets it
    assert_failed_cleanly(server, run, seconds, before)


def test_an_input_schema_at_the_depth_limit_is_stored(
    hostile: Callable[[list[Any]], McpServer], sync: Callable[..., Any]
) -> None:
    # The tool object and 2k + 1 levels of schema: exactly MAX_JSON_DEPTH objects deep.
    schema = nested((MAX_JSON_DEPTH - 2) // 2)
    server = hostile([{"name": "deep_enough", "inputSchema": schema}])

    run, _ = sync(server)

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert Tool.objects.get(server=server, name="deep_enough").input_schema == schema


@pytest.mark.parametrize("where", ["name", "description", "annotations", "key"])
def test_a_nul_character_anywhere_in_a_definition_fails_the_sync_cleanly(
    hostile: Callable[[list[Any]], McpServer], sync: Callable[..., Any], where: str
) -> None:
    # Found by fuzzing: a NUL reached the audit log, which refuses it, as an unexpected error.
    tool: dict[str, Any] = {"name": "nul_tool", "inputSchema": {"type": "object"}}
    if where == "name":
        tool["name"] = "nul\x00tool"
    elif where == "description":
        tool["description"] = "before\x00after"
    elif where == "annotations":
        tool["annotations"] = {"title": "x\x00y"}
    else:
        tool["inputSchema"] = {"type": "object", "properties": {"a\x00b": {"type": "string"}}}
    server = hostile([tool])
    before = tool_rows(server)

    run, seconds = sync(server)

    assert run.error == ERROR_PROTOCOL.format(stage=PAGE_1, detail="tool 1 holds a NUL character")
    assert_failed_cleanly(server, run, seconds, before)


WRONG_ANNOTATIONS: list[Any] = [
    "readOnly",
    ["readOnlyHint", True],
    42,
    True,
    {"readOnlyHint": "true", "destructiveHint": "false", "idempotentHint": "yes", "openWorldHint": "no"},
    {"readOnlyHint": 1, "destructiveHint": 0, "idempotentHint": 1.0, "openWorldHint": 0},
    {"readOnlyHint": {"value": True}, "destructiveHint": [False], "idempotentHint": None},
    {"readOnlyHint": [], "destructiveHint": {}, "x-readOnlyHint": True},
]


def test_annotations_of_every_wrong_type_are_stored_verbatim_and_count_as_absent(
    hostile: Callable[[list[Any]], McpServer], sync: Callable[..., Any]
) -> None:
    # T10: stored as sent; a wrong-typed hint is absent, so under TRUST the spec defaults
    # (mutating, destructive, not idempotent) hold: no wrong type ever lowers the risk.
    tools = [
        {"name": f"wrong_{i}", "description": i, "inputSchema": "not a schema", "annotations": claims}
        for i, claims in enumerate(WRONG_ANNOTATIONS)
    ]
    server = hostile(tools)

    run, _ = sync(server)

    assert run.status == SyncStatus.SUCCEEDED, run.error
    stored = {tool.name: tool for tool in Tool.objects.filter(server=server)}
    for i, claims in enumerate(WRONG_ANNOTATIONS):
        tool = stored[f"wrong_{i}"]
        assert tool.claims == claims
        assert (tool.side_effect_level, tool.destructive_behavior, tool.idempotency_behavior) == (
            "MUTATING",
            "DESTRUCTIVE",
            "NON_IDEMPOTENT",
        )
        assert tool.claim_warnings == list(policy.parse_hints(claims).warnings)
        assert tool.claim_warnings  # each wrong type is said, not silently dropped
    assert audit_verify_chain()[1] is None
