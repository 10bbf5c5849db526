"""An MCP server retired: disabled for good, its stored secrets erased, its row, tools and
history kept; frozen against edits, trust switches, syncs and configuration files; its page's
Retire… is an operator's, after a confirmation.

A server could already be disabled (`enabled`, reversible, also set by configuration files);
retiring adds what disabling cannot: a server that is gone stays gone, and no credential for
it lingers in the database.
"""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.registry import config
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.models import McpServer, Tool
from aimon_admin.registry.services import (
    MCP_SERVER_RETIRED_MESSAGE,
    RegistryError,
    mcp_server_create,
    mcp_server_retire,
    mcp_server_set_trust,
    mcp_server_update,
    mcp_sync_request,
    mcp_tools_record,
)
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

SECRET_URL = "https://user:hunter2@mcp.example.test/mcp?key=s3cret"


@pytest.fixture
def server() -> McpServer:
    server = mcp_server_create(
        name="search",
        transport=McpTransport.STREAMABLE_HTTP,
        url=SECRET_URL,
        headers={"Authorization": "Bearer top-secret"},
        actor=TEST_ACTOR,
    )
    mcp_tools_record(server=server, listing=[{"name": "find"}], actor=TEST_ACTOR, complete=True)
    return server


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_retire_disables_erases_the_secrets_and_keeps_the_row(server: McpServer, operator: User) -> None:
    mcp_server_retire(server=server, actor=Actor.for_user(operator))

    server.refresh_from_db()
    assert (server.enabled, server.retired_by, server.headers, server.env) == (False, operator, {}, {})
    assert server.retired_at is not None
    assert server.url == "https://***@mcp.example.test/mcp?key=***"
    assert Tool.objects.filter(server=server, name="find").exists()
    [event] = AuditEvent.objects.filter(action=AuditAction.MCP_SERVER_RETIRED)
    assert (event.actor, event.subject, event.level) == (operator, "search", AuditLevel.WARNING)
    assert event.details == {
        "was_enabled": True,
        "erased": {"env_names": [], "headers_names": ["Authorization"], "url_credentials": True},
        "tools": 1,
    }
    assert "hunter2" not in str(event.content())
    assert "top-secret" not in str(event.content())


def test_a_retired_server_is_frozen(server: McpServer) -> None:
    mcp_server_retire(server=server, actor=TEST_ACTOR)
    before = AuditEvent.objects.count()
    for write in (
        lambda: mcp_server_update(server=server, actor=TEST_ACTOR, enabled=True),
        lambda: mcp_server_set_trust(server=server, trust="TRUST", actor=TEST_ACTOR),
        lambda: mcp_sync_request(server=server, actor=TEST_ACTOR),
        lambda: mcp_server_retire(server=server, actor=TEST_ACTOR),
    ):
        with pytest.raises(RegistryError, match=MCP_SERVER_RETIRED_MESSAGE):
            write()
    server.refresh_from_db()
    assert (server.enabled, server.annotation_trust) == (False, "IGNORE")
    assert AuditEvent.objects.count() == before
    assert not server.sync_runs.exists()


def test_a_configuration_file_naming_a_retired_server_is_refused_whole(server: McpServer) -> None:
    mcp_server_retire(server=server, actor=TEST_ACTOR)
    text = "mcpServers:\n  other:\n    command: uvx\n  search:\n    url: https://mcp.example.test/mcp\n"
    with pytest.raises(config.ConfigError) as refused:
        config.config_apply(config.config_parse(text, filename="mcp.yaml"), actor=TEST_ACTOR)
    assert refused.value.errors == [f"mcp.yaml:4: mcpServers.search: {MCP_SERVER_RETIRED_MESSAGE}"]
    assert not McpServer.objects.filter(name="other").exists()  # all or nothing


def test_runtimes_are_offered_nothing_of_a_retired_server(server: McpServer, api: APIClient) -> None:
    assert [s["name"] for s in api.get("/api/v1/mcp-servers").json()] == ["search"]
    mcp_server_retire(server=server, actor=TEST_ACTOR)
    assert api.get("/api/v1/mcp-servers").json() == []
    relayed = api.post("/api/v1/mcp-servers/search/tools", {"tools": [{"name": "find"}]}, format="json")
    assert relayed.status_code == 404


def test_a_retired_server_is_disabled_by_constraint(server: McpServer) -> None:
    server.retired_at = timezone.now()
    with pytest.raises(ValidationError, match="A retired MCP server cannot be enabled"):
        server.full_clean()
    table = McpServer._meta.db_table
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET retired_at = %s, enabled = %s WHERE id = %s",
            [timezone.now(), True, server.pk],
        )


def test_who_retired_needs_when(server: McpServer, operator: User) -> None:
    table = McpServer._meta.db_table
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET enabled = %s, retired_by_id = %s WHERE id = %s",
            [False, operator.pk, server.pk],
        )


# --- The page -------------------------------------------------------------------------------------


def test_retire_is_for_operators_after_a_confirmation(
    server: McpServer, operator: User, approver: User, auditor: User
) -> None:
    path = reverse("registry:server-retire", args=["search"])
    for other in (approver, auditor):
        client = signed_in(other)
        assert client.get(path).status_code == 403
        assert client.post(path).status_code == 403
    client = signed_in(operator)
    confirm = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", client.get(path).content.decode()))
    assert "Retire search?" in confirm
    assert "The value of Authorization is erased" in confirm
    server.refresh_from_db()
    assert server.retired_at is None

    response = client.post(path)
    detail = reverse("registry:server-detail", args=["search"])
    assert response["Location"] == detail
    page = client.get(detail).content.decode()
    assert "Retired: offered to no runtime, never synced again" in page
    assert "Edit settings" not in page
    assert "Sync now" not in page
    assert "claims</span>…" not in page  # no Trust / Ignore the server's claims… button
    for address in ("registry:server-edit", "registry:server-trust"):
        refused = client.get(reverse(address, args=["search"]), follow=True)
        assert MCP_SERVER_RETIRED_MESSAGE in refused.content.decode()
    listed = client.get(reverse("registry:server-list")).content.decode()
    assert "Retired" in listed
