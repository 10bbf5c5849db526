"""A tool's description is stored and served at most TOOL_DESCRIPTION_MAX characters: an MCP
server's longer one is cut at write, the fingerprint stays that of the definition as sent
(so the same listing is no drift), and the database refuses a longer one."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.models import TOOL_DESCRIPTION_MAX, Tool
from aimon_admin.registry.services import mcp_server_create, mcp_tools_record
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db


def listing(description: str) -> list[dict[str, object]]:
    return [{"name": "probe", "description": description, "inputSchema": {"type": "object"}}]


def test_a_servers_long_description_is_cut_at_write_and_the_same_listing_is_no_drift() -> None:
    server = mcp_server_create(name="wordy", actor=TEST_ACTOR, transport=McpTransport.STDIO, command="mcp")
    sent = "w" * (TOOL_DESCRIPTION_MAX * 3)
    mcp_tools_record(server=server, listing=listing(sent), actor=TEST_ACTOR, complete=True)
    tool = Tool.objects.get()
    assert tool.description == "w" * (TOOL_DESCRIPTION_MAX - 1) + "…"
    again = mcp_tools_record(server=server, listing=listing(sent), actor=TEST_ACTOR, complete=True)
    assert again.changed == []
    assert again.added == []
    changed = mcp_tools_record(server=server, listing=listing(sent + "!"), actor=TEST_ACTOR, complete=True)
    assert changed.changed == ["probe"]


def test_full_clean_and_the_database_refuse_a_longer_description() -> None:
    server = mcp_server_create(name="wordy", actor=TEST_ACTOR, transport=McpTransport.STDIO, command="mcp")
    mcp_tools_record(server=server, listing=listing("short"), actor=TEST_ACTOR, complete=True)
    tool = Tool.objects.get()
    tool.description = "d" * (TOOL_DESCRIPTION_MAX + 1)
    with pytest.raises(ValidationError) as refused:
        tool.full_clean()
    assert f"A tool description is at most {TOOL_DESCRIPTION_MAX} characters." in refused.value.messages
    with pytest.raises(IntegrityError) as by_db, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Tool._meta.db_table} SET description = %s WHERE id = %s",  # nosec B608
            [tool.description, tool.pk],
        )
    assert "tool_description_length" in str(by_db.value)
