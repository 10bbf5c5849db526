"""Every Celery task is safe to run twice (late acks redeliver a task whose worker died, so
any task may run again after it did its work).

Each task runs twice here, as a redelivery would (the same message, the same task id),
and the second run must change nothing: no second grant, no second audit event, no row
rewritten. Runs on SQLite and on PostgreSQL. The tasks run in this process through
Celery's own `apply` (the worker's code path without the broker).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.db.models import Model
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestStatus
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.approvals.tasks import expire_due_requests
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.audit.tasks import task_request_id, verify_chain
from aimon_admin.audit.verification import checkpoint_forget
from aimon_admin.core.actors import Actor
from aimon_admin.registry.choices import McpTransport, SyncStatus
from aimon_admin.registry.models import McpServer, McpSyncRun, Tool
from aimon_admin.registry.services import mcp_server_create, mcp_sync_request
from aimon_admin.registry.sync.messages import ERROR_STALE
from aimon_admin.registry.tasks import fail_stale_mcp_syncs, sync_mcp_server
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR
from tests.registry.mcp_servers import catalog
from tests.registry.mcp_servers.http import serve_http

pytestmark = pytest.mark.django_db


def rows(model: type[Model]) -> list[dict[str, Any]]:
    """Every column of every row, in a fixed order: what a second run must leave as it was."""
    return list(model.objects.order_by("pk").values())


def audit_rows() -> list[tuple[int, str, str]]:
    return list(AuditEvent.objects.order_by("seq").values_list("seq", "action", "hash"))


@pytest.fixture(autouse=True)
def _no_checkpoint_outside_the_log() -> Iterator[None]:
    # The chain's checkpoint copy lives in the shared cache; another test's must not leak in.
    checkpoint_forget()
    yield
    checkpoint_forget()


def test_expiring_due_requests_twice_denies_each_skill_once(runtime: AgentRuntime, approver: User) -> None:
    # S9: the second sweep finds nothing due and writes nothing.
    due = [
        request_create(
            RequestInput(runtime=runtime, skills=["deploy", "notify"], session_id=f"s-{n}", principal="alice")
        )[0]
        for n in range(2)
    ]
    waiting, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id="s-later"))
    ApprovalRequest.objects.filter(pk__in=[r.pk for r in due]).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )

    assert expire_due_requests.apply(task_id="expire-1").get() == 2
    after_first = (rows(ApprovalRequest), rows(ApprovalItem), rows(Grant), audit_rows())
    assert expire_due_requests.apply(task_id="expire-1").get() == 0

    assert (rows(ApprovalRequest), rows(ApprovalItem), rows(Grant), audit_rows()) == after_first
    statuses = dict(ApprovalRequest.objects.values_list("pk", "status"))
    assert statuses == {
        due[0].pk: RequestStatus.EXPIRED,
        due[1].pk: RequestStatus.EXPIRED,
        waiting.pk: RequestStatus.PENDING,
    }
    denials = sorted(
        Grant.objects.filter(revoked_at__isnull=True).values_list(
            "session__session_id", "skill", "decision", "scope"
        )
    )
    assert denials == [
        ("s-0", "deploy", "DENY", "SESSION"),
        ("s-0", "notify", "DENY", "SESSION"),
        ("s-1", "deploy", "DENY", "SESSION"),
        ("s-1", "notify", "DENY", "SESSION"),
    ]
    assert audit_verify_chain() == (len(after_first[3]), None)


def test_a_redelivered_chain_verification_records_its_outcome_once(runtime: AgentRuntime) -> None:
    # A2: the same delivery twice writes one AUDIT_CHAIN_VERIFIED event; a new task (the next
    # beat tick) writes its own.
    assert verify_chain.apply(task_id="verify-1").get() == AuditAction.AUDIT_CHAIN_VERIFIED
    after_first = audit_rows()
    assert verify_chain.apply(task_id="verify-1").get() is None
    assert audit_rows() == after_first

    (event,) = AuditEvent.objects.filter(request_id=task_request_id("verify-1"))
    assert (event.action, event.details["problem"]) == (AuditAction.AUDIT_CHAIN_VERIFIED, "")
    assert event.details["verified_through_seq"] == after_first[-1][0] - 1  # all before it

    assert verify_chain.apply(task_id="verify-2").get() == AuditAction.AUDIT_CHAIN_VERIFIED
    assert len(audit_rows()) == len(after_first) + 1
    assert audit_verify_chain() == (len(after_first) + 1, None)


@pytest.fixture
def catalog_server(db: None) -> Iterator[McpServer]:
    with ExitStack() as stack:
        url = stack.enter_context(serve_http(catalog.build_server()))
        yield mcp_server_create(
            name="catalog",
            transport=McpTransport.STREAMABLE_HTTP,
            url=url,
            timeout_seconds=10,
            actor=TEST_ACTOR,
        )


def test_an_mcp_sync_delivered_twice_stores_the_listing_once(
    catalog_server: McpServer, operator: User
) -> None:
    # T12 + A3: the second delivery finds the run finished and writes nothing.
    run = mcp_sync_request(server=catalog_server, actor=Actor.for_user(operator))  # task not run yet

    assert sync_mcp_server.apply(args=[run.pk], task_id="sync-1").get() == SyncStatus.SUCCEEDED
    after_first = (rows(McpSyncRun), rows(Tool), audit_rows())
    assert sync_mcp_server.apply(args=[run.pk], task_id="sync-1").get() is None

    assert (rows(McpSyncRun), rows(Tool), audit_rows()) == after_first
    run.refresh_from_db()
    assert (run.status, run.attempts, run.tools_added) == (SyncStatus.SUCCEEDED, 1, len(catalog.listing()))
    assert AuditEvent.objects.filter(action=AuditAction.MCP_SYNC_SUCCEEDED).count() == 1


def test_failing_stale_syncs_twice_fails_each_run_once(catalog_server: McpServer, operator: User) -> None:
    # A stale run is failed once, with one event; the second sweep finds none.
    run = mcp_sync_request(server=catalog_server, actor=Actor.for_user(operator))
    McpSyncRun.objects.filter(pk=run.pk).update(
        status=SyncStatus.RUNNING, attempts=1, started_at=timezone.now() - dt.timedelta(hours=2)
    )

    assert fail_stale_mcp_syncs.apply(task_id="stale-1").get() == 1
    after_first = (rows(McpSyncRun), audit_rows())
    assert fail_stale_mcp_syncs.apply(task_id="stale-1").get() == 0

    assert (rows(McpSyncRun), audit_rows()) == after_first
    run.refresh_from_db()
    assert (run.status, run.error) == (SyncStatus.FAILED, ERROR_STALE)
    failed = AuditEvent.objects.filter(action=AuditAction.MCP_SYNC_FAILED)
    assert [event.details["error"] for event in failed] == [ERROR_STALE]
