"""The MCP gateway (G2) against the product in production's shape: a uvicorn web node on
PostgreSQL and Redis, reached over real HTTP only, with mcp-server-git and mcp-server-time
(stdio) and an MCP server built with the SDK (Streamable HTTP) behind the gateway, and the
gateway itself served over Streamable HTTP to the MCP SDK's client.

The product stopped while a call waits for a person: the call is refused with the reason.
Bounded: one 90 s budget for the whole test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import anyio
import pytest
from django.db import connection

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services.answers import request_answer
from aimon_admin.core.actors import Actor
from tests.audit.helpers import database_for_new_process
from tests.clients.gateway_kit import (
    gateway_http,
    git_repo,
    over_http,
    register,
    register_real_servers,
    staged,
    text_of,
    write_config,
)
from tests.ports import free_port
from tests.production.helpers import Deadline, start_node, stop, wait_for_health
from tests.registry.mcp_servers import catalog
from tests.registry.mcp_servers.http import serve_http

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BUDGET_SECONDS = 90


def test_gateway_on_postgres_and_redis_then_the_product_stops_mid_call(
    redis_url: str, runtime_token: str, operator: User, approver: User, tmp_path: Path
) -> None:  # G2, U4, Scale
    deadline = Deadline(BUDGET_SECONDS)
    repo = git_repo(tmp_path / "repo")
    actor = Actor.for_user(operator)
    register_real_servers(actor, repo)
    port = free_port()
    node = start_node(port, database_for_new_process(), redis_url, tmp_path / "node.log")
    with serve_http(catalog.build_server()) as catalog_url:
        register(actor, "records", url=catalog_url)
        try:
            wait_for_health(port, deadline, node, tmp_path / "node.log")
            config = write_config(
                tmp_path / "gateway.yaml", f"http://127.0.0.1:{port}", principal="alice", wait_seconds=8
            )

            def allow_when_asked() -> None:
                while not (found := ApprovalRequest.objects.filter(tool="git_reset").first()):
                    deadline.check("waiting for the gateway's request")
                    time.sleep(0.05)
                request_answer(request=found, user=approver, answer=Answer.ALLOW_CALL)
                connection.close()  # this thread's own connection, or the test database stays in use

            async def agent(url: str) -> tuple[set[str], list[str], bool, str]:
                async with over_http(url) as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    record = await client.call_tool("records__lookup_record", {"record_id": "r-1"})
                    now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
                    answerer = threading.Thread(target=allow_when_asked)
                    answerer.start()
                    reset = await client.call_tool("git__git_reset", {"repo_path": str(repo)})
                    answerer.join()
                    # Now the product dies (SIGKILL) while the next call waits for a person.
                    stopper = threading.Timer(1.5, os.killpg, args=(node.pid, signal.SIGKILL))
                    stopper.start()
                    gone = await client.call_tool("git__git_reset", {"repo_path": str(repo)})
                    stopper.join()
                    texts = [text_of(record), text_of(now)]
                    assert not any(r.is_error for r in (record, now)), texts
                    return names, texts, reset.is_error, text_of(gone) if gone.is_error else "forwarded!"

            with gateway_http(config, runtime_token) as gateway:
                names, texts, reset_refused, gone = anyio.run(agent, gateway.url)
        finally:
            stop(node)
    deadline.check("finishing")

    assert {"git__git_reset", "time__get_current_time", "records__lookup_record"} <= names
    assert texts[0] == "lookup_record called with ['record_id']"  # the HTTP upstream, ALLOW
    assert '"timezone": "UTC"' in texts[1]
    assert not reset_refused
    assert staged(repo) == []  # git_reset ran once, after the answer (U4)
    assert gone.startswith("Refused: ")
    assert "could not be reached" in gone  # the product stopped mid-call: refused with the reason
