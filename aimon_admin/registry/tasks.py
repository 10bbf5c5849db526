"""Celery tasks of the registry: MCP syncs (queued by `services.mcp_sync_request`)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.registry.choices import SyncStatus
from aimon_admin.registry.models import McpSyncRun
from aimon_admin.registry.sync import (
    STALE_AFTER,
    SYNC_ACTOR,
    TASK_SOFT_TIME_LIMIT,
    TASK_TIME_LIMIT,
    run_sync,
    sync_runs_fail_stale,
)
from aimon_admin.registry.sync.messages import PROGRESS_FAILED

logger = logging.getLogger(__name__)

SYNC_TASK_NAME = "registry.sync_mcp_server"
FAIL_STALE_TASK_NAME = "registry.fail_stale_mcp_syncs"
ERROR_NOT_QUEUED = (
    "Not started: the task queue (Redis) could not be reached, so no worker was asked to run "
    "this sync. Sync again once it is back."
)


def sync_run_fail_unqueued(run_id: int, reason: str) -> bool:
    """Fail a QUEUED run whose task never reached the broker, with its audit event (A3).

    Left QUEUED, the run would block every later sync of its server and no worker would
    ever take it; failed, the operator sees why and can sync again.
    """
    with transaction.atomic():
        run = (
            McpSyncRun.objects.select_for_update(of=("self",))
            .select_related("server")
            .filter(pk=run_id, status=SyncStatus.QUEUED)
            .first()
        )
        if run is None:
            return False
        run.status = SyncStatus.FAILED
        run.error = ERROR_NOT_QUEUED
        run.progress = PROGRESS_FAILED
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "error", "progress", "finished_at"])
        audit_record(
            action=AuditAction.MCP_SYNC_FAILED,
            actor=SYNC_ACTOR,
            level=AuditLevel.WARNING,
            subject_type="mcp_server",
            subject=run.server.name,
            details={"run_id": run.pk, "attempt": 0, "error": ERROR_NOT_QUEUED, "broker_error": reason[:300]},
        )
    return True


class _SyncTask(Task):
    """The sync task; if its message cannot be handed to the broker, the run fails visibly.

    `mcp_sync_request` queues the task once its transaction commits, so a broker outage
    would otherwise surface as a server error after the run was already written, and leave
    the run QUEUED for good.
    """

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        try:
            return super().apply_async(args, kwargs, **options)
        except BrokerUnavailable as exc:
            run_id = args[0] if args else (kwargs or {}).get("run_id")
            logger.error("could not queue MCP sync run %s: %s", run_id, exc)
            if run_id is None:
                raise
            sync_run_fail_unqueued(int(run_id), str(exc))
            return None


@shared_task(
    base=_SyncTask,
    name=SYNC_TASK_NAME,
    ignore_result=True,
    acks_late=True,  # a worker that dies mid-sync leaves the message to be delivered again
    reject_on_worker_lost=True,
    soft_time_limit=TASK_SOFT_TIME_LIMIT,
    time_limit=TASK_TIME_LIMIT,
)
def sync_mcp_server(run_id: int) -> str | None:
    """Run MCP sync `run_id` to its outcome; safe to deliver twice (see `sync.run_sync`).

    Past the soft time limit the run fails with a message that says so; a redelivery
    after a killed worker claims the run again and finishes it.
    """
    run = run_sync(run_id)
    return run.status if run is not None else None


@shared_task(name=FAIL_STALE_TASK_NAME, ignore_result=True, acks_late=True)
def fail_stale_mcp_syncs() -> int:
    """Fail RUNNING syncs whose worker is gone for good (for a periodic schedule)."""
    return sync_runs_fail_stale(older_than=STALE_AFTER)
