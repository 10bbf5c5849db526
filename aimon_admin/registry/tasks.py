"""Celery tasks of the registry: MCP syncs (queued by `services.mcp_sync_request`)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from kombu.exceptions import OperationalError as BrokerUnavailable

from aimon_admin.registry.sync import (
    STALE_AFTER,
    TASK_SOFT_TIME_LIMIT,
    TASK_TIME_LIMIT,
    run_sync,
    sync_run_fail_unqueued,
    sync_runs_fail_stale,
)

logger = logging.getLogger(__name__)

SYNC_TASK_NAME = "registry.sync_mcp_server"
FAIL_STALE_TASK_NAME = "registry.fail_stale_mcp_syncs"


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
    """Fail RUNNING syncs whose worker is gone: its lease lapsed (beat, every
    LEASE_CHECK_SECONDS). *Sync now* makes the same check for its server."""
    return sync_runs_fail_stale(older_than=STALE_AFTER)
