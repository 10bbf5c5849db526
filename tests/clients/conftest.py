"""Fixtures for the enforcement points' tests: the real product served by pytest-django's live
server (the Django app over real HTTP, in a thread of this process), a runtime's catalog and
subjects set up through the product's own services, and a person answering through the
product's own answer service."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aimon_client import Client
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals import services as approvals
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.registry import services as registry
from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR

T = TypeVar("T")

# The runtime's own tools: Read never asks (READ_ONLY), Bash and Edit keep their worst axes
# (MUTATING + DESTRUCTIVE), so an attended call asks (T8).
LOCAL_TOOLS = [{"name": "Read", "side_effect_level": "READ_ONLY"}, {"name": "Bash"}, {"name": "Edit"}]
GIT_TOOLS = [
    {"name": "git_status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {
        "name": "git_reset",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
]

# A person answers from the test's own thread while the product serves the waiting call. On the
# SQLite run the live server shares the test's one in-memory connection across threads, which is
# no place for two writers at once: these run on PostgreSQL, each thread with its connection (the
# browser journey, whose click goes through the server, runs on both).
ANSWERED_WHILE_WAITING = pytest.mark.postgres


@pytest.hookimpl(tryfirst=True)  # marks read by tests/conftest.py's selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The enforcement points talk HTTP to the product, and which database it keeps changes
    nothing they do: they run once, in the SQLite run, but for those that need PostgreSQL and
    Redis (answered while a call waits, the gateway beside production)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and not item.get_closest_marker("postgres"):
            item.add_marker(pytest.mark.sqlite_run)


@pytest.fixture
def product(live_server: LiveServer) -> str:
    """The product's address: the Django app served over real HTTP."""
    return live_server.url


@pytest.fixture
def catalog(runtime: AgentRuntime) -> None:
    """The runtime's own tools, the subjects of Bash and the file tools (U1), and a trusted
    MCP server `git` whose sync listed git_status (read-only) and git_reset (destructive)."""
    registry.local_tools_replace(runtime=runtime, tools=LOCAL_TOOLS, actor=TEST_ACTOR)
    registry.tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    registry.tool_subject_set(server=None, tool="Edit", argument="file_path", actor=TEST_ACTOR)
    server = registry.mcp_server_create(
        name="git",
        actor=TEST_ACTOR,
        annotation_trust=AnnotationTrust.TRUST,
        transport=McpTransport.STDIO,
        command="uvx",
    )
    registry.mcp_tools_record(server=server, listing=GIT_TOOLS, actor=TEST_ACTOR, complete=True)


def run(product: str, token: str, use: Callable[[Client], Awaitable[T]], **options: Any) -> T:
    """Run `use(client)` on a fresh Client of `product` in its own event loop."""

    async def go() -> T:
        async with Client(product, token, **options) as client:
            return await use(client)

    return asyncio.run(go())


def answer(request_id: str, user: User, how: str, pattern: str | None = None) -> None:
    """A person answers a request through the product's own answer service, as the
    request page's buttons do."""
    request = ApprovalRequest.objects.get(pk=request_id)
    approvals.request_answer(request=request, user=user, answer=how, pattern=pattern)
