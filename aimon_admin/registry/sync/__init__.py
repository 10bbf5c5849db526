"""MCP sync: fetch a server's whole tool listing with the official SDK, then store it.

`fetch.fetch_tool_listing` talks to the server and returns every tool as sent (T10);
`runs.run_sync` takes one `McpSyncRun` to its outcome and is safe to deliver twice. The
Celery task is `aimon_admin.registry.tasks.sync_mcp_server`; the words a sync shows are in
`messages`.
"""

from __future__ import annotations

from aimon_admin.registry.sync.fetch import MAX_PAGES, MAX_TOOLS, SyncError, fetch_tool_listing
from aimon_admin.registry.sync.runs import (
    MAX_ATTEMPTS,
    QUEUED_STUCK_AFTER,
    RUN_LOCK_NAMESPACE,
    STALE_AFTER,
    SYNC_ACTOR,
    TASK_SOFT_TIME_LIMIT,
    TASK_TIME_LIMIT,
    TROUBLE_FAILED,
    TROUBLE_STUCK,
    run_sync,
    run_trouble,
    sync_run_fail_unqueued,
    sync_runs_fail_stale,
)

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_PAGES",
    "MAX_TOOLS",
    "QUEUED_STUCK_AFTER",
    "RUN_LOCK_NAMESPACE",
    "STALE_AFTER",
    "SYNC_ACTOR",
    "TASK_SOFT_TIME_LIMIT",
    "TASK_TIME_LIMIT",
    "TROUBLE_FAILED",
    "TROUBLE_STUCK",
    "SyncError",
    "fetch_tool_listing",
    "run_sync",
    "run_trouble",
    "sync_run_fail_unqueued",
    "sync_runs_fail_stale",
]
