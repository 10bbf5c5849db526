"""Which MCP syncs need an operator (the home counts them, and the servers list filtered with
?sync=attention lists them): a latest run that failed, or one stuck (its worker's lease
lapsed, or queued with no worker taking it)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from aimon_admin.accounts.models import User
from aimon_admin.registry.choices import SyncStatus
from aimon_admin.registry.models import McpSyncRun
from aimon_admin.registry.sync import (
    QUEUED_STUCK_AFTER,
    STALE_AFTER,
    TROUBLE_FAILED,
    TROUBLE_STUCK,
    run_trouble,
)
from aimon_admin.registry.views.servers import BAD_SYNC_FILTER
from tests.registry.factories import mcp_server

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def run(status: str, **fields: object) -> McpSyncRun:
    return McpSyncRun(status=status, created_at=fields.pop("created_at", NOW), **fields)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("made", "trouble"),
    [
        (None, ""),
        (run(SyncStatus.SUCCEEDED), ""),
        (run(SyncStatus.FAILED), TROUBLE_FAILED),
        (run(SyncStatus.RUNNING, lease_expires_at=NOW + dt.timedelta(seconds=10)), ""),
        (run(SyncStatus.RUNNING, lease_expires_at=NOW - dt.timedelta(seconds=1)), TROUBLE_STUCK),
        # A run from before leases: stuck once it has run longer than any task may.
        (run(SyncStatus.RUNNING, started_at=NOW - STALE_AFTER + dt.timedelta(seconds=5)), ""),
        (run(SyncStatus.RUNNING, started_at=NOW - STALE_AFTER - dt.timedelta(seconds=5)), TROUBLE_STUCK),
        (run(SyncStatus.QUEUED, created_at=NOW - QUEUED_STUCK_AFTER + dt.timedelta(seconds=5)), ""),
        (
            run(SyncStatus.QUEUED, created_at=NOW - QUEUED_STUCK_AFTER - dt.timedelta(seconds=5)),
            TROUBLE_STUCK,
        ),
    ],
)
def test_run_trouble(made: McpSyncRun | None, trouble: str) -> None:
    assert run_trouble(made, now=NOW) == trouble


def test_the_servers_list_filtered_to_attention_lists_enabled_servers_whose_last_sync_failed_or_is_stuck(
    operator: User,
) -> None:
    now = timezone.now()
    broken = mcp_server("broken")
    McpSyncRun.objects.create(server=broken, status=SyncStatus.FAILED, error="unreachable", finished_at=now)
    stuck = mcp_server("stuck")
    McpSyncRun.objects.create(
        server=stuck,
        status=SyncStatus.RUNNING,
        started_at=now,
        lease_expires_at=now - dt.timedelta(minutes=1),
    )
    recovered = mcp_server("recovered")
    McpSyncRun.objects.create(
        server=recovered, status=SyncStatus.FAILED, finished_at=now - dt.timedelta(hours=1)
    )
    McpSyncRun.objects.create(server=recovered, status=SyncStatus.SUCCEEDED, finished_at=now)
    mcp_server("never")
    off = mcp_server("off", enabled=False)
    McpSyncRun.objects.create(server=off, status=SyncStatus.FAILED, finished_at=now)
    client = Client()
    client.force_login(operator)
    url = reverse("registry:server-list")
    every = client.get(url).content.decode()
    assert re.findall(r'<a href="/registry/servers/([^/]+)/">', every) == [
        "broken",
        "never",
        "off",
        "recovered",
        "stuck",
    ]
    page = client.get(url, {"sync": "attention"}).content.decode()
    assert re.findall(r'<a href="/registry/servers/([^/]+)/">', page) == ["broken", "stuck"]
    assert 'data-testid="server-filter"' in page


def test_the_servers_list_filter_says_when_nothing_is_in_trouble_and_refuses_a_value_it_cannot_read(
    operator: User,
) -> None:
    client = Client()
    client.force_login(operator)
    url = reverse("registry:server-list")
    assert (
        "Every enabled server's last sync succeeded"
        in client.get(url, {"sync": "attention"}).content.decode()
    )
    response = client.get(url, {"sync": "failed"})
    assert response.status_code == 400
    assert escape(BAD_SYNC_FILTER.format(value="failed")) in response.content.decode()
