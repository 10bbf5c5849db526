"""A sync run's worker lease (A1-A3).

A killed worker group left its run RUNNING, and *Sync now* refused ("already queued or
running") until the broker handed the message out again, ten minutes later. The running
worker now renews a lease on its run; a run whose lease lapsed is failed, with its audit
event, by beat's sweep and by *Sync now* itself. The end-to-end proof, a real worker really
killed, is tests/faults/test_worker_killed.py.
"""

from __future__ import annotations

import datetime as dt
import time

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, SyncStatus
from aimon_admin.registry.models import McpServer, McpSyncRun
from aimon_admin.registry.services import (
    QUEUED_RESEND_AFTER,
    SYNC_ALREADY_ACTIVE,
    RegistryError,
    mcp_server_create,
    mcp_sync_request,
)
from aimon_admin.registry.sync import runs
from aimon_admin.registry.sync.messages import ERROR_STALE
from aimon_admin.registry.tasks import FAIL_STALE_TASK_NAME, fail_stale_mcp_syncs
from tests.conftest import TEST_ACTOR


@pytest.fixture
def server(db: None) -> McpServer:
    return mcp_server_create(
        name="leased",
        transport=McpTransport.STREAMABLE_HTTP,
        url="http://127.0.0.1:9/mcp",
        timeout_seconds=10,
        annotation_trust=AnnotationTrust.IGNORE,
        actor=TEST_ACTOR,
    )


def running(server: McpServer, *, lease_in: dt.timedelta | None, started_ago: dt.timedelta) -> McpSyncRun:
    """A run as a worker left it: RUNNING under attempt 1, its lease ending `lease_in` from now."""
    run = mcp_sync_request(server=server, actor=TEST_ACTOR)
    now = timezone.now()
    McpSyncRun.objects.filter(pk=run.pk).update(
        status=SyncStatus.RUNNING,
        attempts=1,
        started_at=now - started_ago,
        lease_expires_at=None if lease_in is None else now + lease_in,
    )
    run.refresh_from_db()
    return run


def failures(server: McpServer) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject=server.name, action=AuditAction.MCP_SYNC_FAILED))


def test_a_run_whose_lease_lapsed_is_failed_with_its_audit_event(server: McpServer) -> None:
    # A3: seconds after its worker stopped renewing, not ten minutes.
    run = running(server, lease_in=dt.timedelta(seconds=-1), started_ago=dt.timedelta(seconds=30))
    assert fail_stale_mcp_syncs.apply().get() == 1
    run.refresh_from_db()
    assert (run.status, run.error, run.lease_expires_at) == (SyncStatus.FAILED, ERROR_STALE, None)
    [event] = failures(server)
    assert event.details["run_id"] == run.pk
    assert event.details["error"] == ERROR_STALE
    assert event.details["attempt"] == 1
    assert event.details["lease_expired_at"] is not None
    assert fail_stale_mcp_syncs.apply().get() == 0  # once


def test_a_long_sync_whose_worker_still_renews_is_left_alone(server: McpServer) -> None:
    # Running for two hours, but its lease is fresh: the worker is alive.
    run = running(server, lease_in=runs.LEASE, started_ago=dt.timedelta(hours=2))
    assert fail_stale_mcp_syncs.apply().get() == 0
    run.refresh_from_db()
    assert run.status == SyncStatus.RUNNING
    assert failures(server) == []


def test_sync_now_fails_a_lapsed_run_and_queues_a_new_one(server: McpServer) -> None:
    # Item 13: without beat, the button itself finds the dead worker's run.
    operator = Actor.system("test-operator")
    stuck = running(server, lease_in=dt.timedelta(seconds=-1), started_ago=dt.timedelta(seconds=30))
    fresh = mcp_sync_request(server=server, actor=operator)
    stuck.refresh_from_db()
    assert (stuck.status, stuck.error) == (SyncStatus.FAILED, ERROR_STALE)
    assert fresh.status == SyncStatus.QUEUED
    assert [e.details["run_id"] for e in failures(server)] == [stuck.pk]


def test_sync_now_still_refuses_while_the_worker_holds_its_lease(server: McpServer) -> None:
    running(server, lease_in=runs.LEASE, started_ago=dt.timedelta(seconds=30))
    with pytest.raises(RegistryError, match=SYNC_ALREADY_ACTIVE):
        mcp_sync_request(server=server, actor=TEST_ACTOR)
    assert failures(server) == []


def test_a_dead_worker_is_found_within_a_minute() -> None:
    # The lease lapses LEASE after the last renewal; beat sweeps every LEASE_CHECK_SECONDS.
    schedule = settings.CELERY_BEAT_SCHEDULE["registry-fail-stale-mcp-syncs"]
    assert schedule["task"] == FAIL_STALE_TASK_NAME
    assert schedule["schedule"] <= runs.LEASE_CHECK_SECONDS
    assert runs.LEASE.total_seconds() + runs.LEASE_CHECK_SECONDS <= 60
    assert runs.LEASE.total_seconds() >= 3 * runs.LEASE_RENEW_SECONDS  # a late renewal is not death


@pytest.mark.django_db(transaction=True)
def test_the_worker_renews_its_lease_while_it_runs_and_stops_once_the_run_is_not_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = mcp_server_create(
        name="renewed",
        transport=McpTransport.STREAMABLE_HTTP,
        url="http://127.0.0.1:9/mcp",
        timeout_seconds=10,
        annotation_trust=AnnotationTrust.IGNORE,
        actor=TEST_ACTOR,
    )
    run = running(server, lease_in=dt.timedelta(seconds=1), started_ago=dt.timedelta(seconds=1))
    monkeypatch.setattr(runs, "LEASE_RENEW_SECONDS", 0.05)
    claim = runs._Claim(run.pk, server.pk, 1)
    with runs._lease_kept(claim):
        time.sleep(0.5)
        run.refresh_from_db()
        assert run.lease_expires_at > timezone.now() + runs.LEASE - dt.timedelta(seconds=1)
    # A run failed as lapsed (or taken over by a later attempt) is not renewed again.
    McpSyncRun.objects.filter(pk=run.pk).update(status=SyncStatus.FAILED, lease_expires_at=None)
    assert runs._renew(claim) is False


@pytest.mark.postgres
def test_a_lapsed_lease_is_failed_even_while_a_cut_off_worker_still_holds_its_lock(server: McpServer) -> None:
    # A worker whose host vanished without a word keeps its advisory lock until PostgreSQL
    # notices the dead connection (its TCP keepalive: hours by default); the lease decides.
    run = running(server, lease_in=dt.timedelta(seconds=-1), started_ago=dt.timedelta(seconds=30))
    settings_dict = connection.settings_dict
    with psycopg.connect(
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
        user=settings_dict["USER"],
        password=settings_dict["PASSWORD"] or None,
        dbname=settings_dict["NAME"],
        autocommit=True,
    ) as cut_off_worker:
        cut_off_worker.execute("SELECT pg_advisory_lock(%s, %s)", [runs.RUN_LOCK_NAMESPACE, run.pk])
        assert runs.sync_runs_fail_stale() == 1
    run.refresh_from_db()
    assert (run.status, run.error) == (SyncStatus.FAILED, ERROR_STALE)


def test_sync_now_sends_a_run_queued_over_a_minute_again(
    server: McpServer, django_capture_on_commit_callbacks
) -> None:
    # Item 13: a worker group killed after taking the message, before claiming the run, left it
    # QUEUED until the broker's ten-minute visibility timeout; the button now sends it again.
    queued = McpSyncRun.objects.create(server=server, progress="Queued")
    McpSyncRun.objects.filter(pk=queued.pk).update(
        created_at=timezone.now() - QUEUED_RESEND_AFTER - dt.timedelta(seconds=1)
    )
    with django_capture_on_commit_callbacks() as callbacks:
        again = mcp_sync_request(server=server, actor=TEST_ACTOR)
    assert again.pk == queued.pk
    assert len(callbacks) == 1  # the task, sent again for the same run (its claim runs it once)
    [event] = AuditEvent.objects.filter(action=AuditAction.MCP_SYNC_REQUESTED)
    assert (event.details["run_id"], event.details["resent"]) == (queued.pk, True)


def test_sync_now_still_refuses_a_run_queued_moments_ago(server: McpServer) -> None:
    McpSyncRun.objects.create(server=server, progress="Queued")
    with pytest.raises(RegistryError, match=SYNC_ALREADY_ACTIVE):
        mcp_sync_request(server=server, actor=TEST_ACTOR)
