"""Sync runs: one `McpSyncRun` taken from QUEUED to SUCCEEDED or FAILED, safely retried.

The listing is fetched completely before anything is written, then stored in one
transaction with its audit event (A3), so a failed sync leaves the stored tools exactly as
they were.

Retries. Each claim of a run increments ``attempts``, and that number fences every later
write: progress, the stored listing and the failure are written only while the run is
still RUNNING under the same attempt. A redelivered task (its worker died) claims the
RUNNING run again and finishes it; a duplicate delivery finds the run finished and does
nothing. On PostgreSQL a claim also holds a session advisory lock for the run, which dies
with the worker's connection, so a duplicate of a sync still in progress steps aside
instead of racing it.

Leases. A claim takes a lease on the run (`lease_expires_at`, LEASE from now) and a thread
of the worker renews it every LEASE_RENEW_SECONDS until the run ends. A worker that is
killed (its whole group: nothing acknowledges, nothing cleans up) stops renewing; once its
lease lapses, `sync_runs_fail_stale` fails the run with its audit event, so *Sync now* works
again within a minute instead of when the broker hands the message out again (its visibility
timeout, ten minutes). It runs from beat and from `mcp_sync_request`, so it works without
beat too. A worker that was only slow and finds its run failed writes nothing more: every
write is fenced by the attempt and RUNNING.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core import metrics
from aimon_admin.core.actors import Actor
from aimon_admin.core.plurals import counted
from aimon_admin.registry.choices import SyncStatus
from aimon_admin.registry.models import McpServer, McpSyncRun
from aimon_admin.registry.services import mcp_tools_record
from aimon_admin.registry.sync.fetch import SyncError, fetch_tool_listing, one_line
from aimon_admin.registry.sync.messages import (
    ERROR_DISABLED,
    ERROR_GAVE_UP,
    ERROR_NOT_QUEUED,
    ERROR_STALE,
    ERROR_STORE,
    ERROR_TIME_LIMIT,
    ERROR_UNEXPECTED,
    PROGRESS_CONNECTING,
    PROGRESS_DONE,
    PROGRESS_FAILED,
    PROGRESS_STORING,
    STAGE_SYNC,
)

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
# The sync task's limits: the longest server timeout (600 s) plus storing 10,000 tools. The
# settings' defaults (240 s soft) would cut a slow server's sync short.
TASK_SOFT_TIME_LIMIT = 600 + 120
TASK_TIME_LIMIT = TASK_SOFT_TIME_LIMIT + 60
# A run that never took a lease (written before leases existed) is stale once it has run
# longer than any task may.
STALE_AFTER = timedelta(seconds=TASK_TIME_LIMIT + 120)
# A running worker renews its run's lease every LEASE_RENEW_SECONDS; a lease not renewed for
# LEASE (several renewals missed) means the worker is gone. With beat's check every
# LEASE_CHECK_SECONDS, a dead worker's run is failed within LEASE + LEASE_CHECK_SECONDS.
LEASE = timedelta(seconds=20)
LEASE_RENEW_SECONDS = 5.0
LEASE_CHECK_SECONDS = 15.0
SYNC_ACTOR = Actor.system("task:mcp-sync")
# pg_advisory_lock(namespace, run id): a key space apart from the audit chain's one-key lock.
RUN_LOCK_NAMESPACE = 0x4D435053  # "MCPS"
# A run still queued after this long has no worker taking it (with a worker, a queued run
# starts within seconds; with no broker it fails at once, sync_run_fail_unqueued).
QUEUED_STUCK_AFTER = timedelta(minutes=10)
# Why a server's latest sync needs an operator (run_trouble).
TROUBLE_FAILED = "failed"
TROUBLE_STUCK = "stuck"


@dataclass(frozen=True)
class _Claim:
    run_id: int
    server_id: int
    attempt: int  # the fencing token: writes need the run still RUNNING under this attempt


def _try_lock(run_id: int) -> bool:
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [RUN_LOCK_NAMESPACE, run_id & 0x7FFFFFFF])
        return bool(cursor.fetchone()[0])


def _unlock(run_id: int) -> None:
    if connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [RUN_LOCK_NAMESPACE, run_id & 0x7FFFFFFF])
    except DatabaseError:
        logger.warning("could not release the advisory lock of sync run %s", run_id, exc_info=True)


@contextmanager
def _run_lock(run_id: int) -> Any:
    """Yield whether this process may work on the run (PostgreSQL: nobody else holds it)."""
    locked = _try_lock(run_id)
    try:
        yield locked
    finally:
        if locked:
            _unlock(run_id)


def _claim(run_id: int) -> _Claim | None:
    run = McpSyncRun.objects.filter(pk=run_id).values("status", "attempts", "server_id").first()
    if run is None or run["status"] not in (SyncStatus.QUEUED, SyncStatus.RUNNING):
        return None
    if run["status"] == SyncStatus.RUNNING and run["attempts"] >= MAX_ATTEMPTS:
        # Every earlier worker died holding this run: stop redelivering it.
        _fail(
            _Claim(run_id, run["server_id"], run["attempts"]), ERROR_GAVE_UP.format(attempts=run["attempts"])
        )
        return None
    claimed = McpSyncRun.objects.filter(pk=run_id, status=run["status"], attempts=run["attempts"]).update(
        status=SyncStatus.RUNNING,
        attempts=F("attempts") + 1,
        started_at=timezone.now(),
        finished_at=None,
        progress=PROGRESS_CONNECTING,
        error="",
        lease_expires_at=timezone.now() + LEASE,
    )
    return _Claim(run_id, run["server_id"], run["attempts"] + 1) if claimed else None


def _fenced(claim: _Claim) -> Any:
    return McpSyncRun.objects.filter(pk=claim.run_id, status=SyncStatus.RUNNING, attempts=claim.attempt)


def _progress(claim: _Claim, text: str) -> None:
    _fenced(claim).update(progress=one_line(text, 300))


def _renew(claim: _Claim) -> bool:
    """Extend the lease; False once the run is no longer this attempt's to renew."""
    return bool(_fenced(claim).update(lease_expires_at=timezone.now() + LEASE))


@contextmanager
def _lease_kept(claim: _Claim) -> Iterator[None]:
    """Renew the run's lease from a thread of this worker while the body runs."""
    stop = threading.Event()

    def keep() -> None:
        try:
            while not stop.wait(LEASE_RENEW_SECONDS):
                try:
                    if not _renew(claim):
                        return  # finished, or failed as lapsed: nothing left to hold
                except DatabaseError:
                    logger.warning("sync run %s: could not renew its lease", claim.run_id, exc_info=True)
        finally:
            connection.close()  # this thread's own connection (back to the pool)

    keeper = threading.Thread(target=keep, name=f"sync-lease-{claim.run_id}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=LEASE_RENEW_SECONDS)


def _fail(claim: _Claim, message: str) -> bool:
    """Record the failure and its audit event, if this attempt still owns the run."""
    return _fail_run(_fenced(claim), message, {"attempt": claim.attempt})


def sync_run_fail_unqueued(run_id: int, reason: str) -> bool:
    """Fail a QUEUED run whose task never reached the broker, with its audit event (A3).

    Left QUEUED, the run would block every later sync of its server and no worker would
    ever take it; failed, the operator sees why and can sync again.
    """
    queued = McpSyncRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED)
    return _fail_run(queued, ERROR_NOT_QUEUED, {"attempt": 0, "broker_error": reason[:300]})


def _fail_run(runs: QuerySet[McpSyncRun], message: str, details: dict[str, Any]) -> bool:
    """Fail the run `runs` selects (if it still does, under a row lock), with its event."""
    with transaction.atomic():
        run = runs.select_for_update(of=("self",)).select_related("server").first()
        if run is None:
            return False
        run.status = SyncStatus.FAILED
        run.error = message
        run.progress = PROGRESS_FAILED
        run.finished_at = timezone.now()
        run.lease_expires_at = None
        run.save(update_fields=["status", "error", "progress", "finished_at", "lease_expires_at"])
        metrics.count_on_commit(metrics.MCP_SYNC_RUNS, SyncStatus.FAILED)
        audit_record(
            action=AuditAction.MCP_SYNC_FAILED,
            actor=SYNC_ACTOR,
            level=AuditLevel.WARNING,
            subject_type="mcp_server",
            subject=run.server.name,
            details={"run_id": run.pk, **details, "error": message},
        )
    return True


def _store(claim: _Claim, listing: list[dict[str, Any]]) -> bool:
    """Store the complete listing, the run's outcome and its audit event, all or nothing."""
    with transaction.atomic():
        # The server row first (as a trust change locks it), so the listing is resolved
        # under the trust in force when it commits.
        server = McpServer.objects.select_for_update().get(pk=claim.server_id)
        run = _fenced(claim).select_for_update().first()
        if run is None:
            return False  # another attempt took the run over; it will write the outcome
        result = mcp_tools_record(server=server, listing=listing, actor=SYNC_ACTOR, complete=True)
        run.status = SyncStatus.SUCCEEDED
        run.tools_seen = len(listing)
        run.tools_added = len(result.added)
        run.tools_changed = len(result.changed)
        run.tools_absent = len(result.absent)
        run.progress = counted(
            PROGRESS_DONE,
            run.tools_seen,
            added=run.tools_added,
            changed=run.tools_changed,
            absent=run.tools_absent,
        )
        run.finished_at = timezone.now()
        run.lease_expires_at = None
        run.save()
        metrics.count_on_commit(metrics.MCP_SYNC_RUNS, SyncStatus.SUCCEEDED)
        audit_record(
            action=AuditAction.MCP_SYNC_SUCCEEDED,
            actor=SYNC_ACTOR,
            subject_type="mcp_server",
            subject=server.name,
            details={
                "run_id": run.pk,
                "attempt": claim.attempt,
                "trust": server.annotation_trust,
                "tools_seen": run.tools_seen,
                "tools_added": run.tools_added,
                "tools_changed": run.tools_changed,
                "tools_absent": run.tools_absent,
                "added": sorted(result.added),
                "changed": sorted(result.changed),
                "absent": sorted(result.absent),
                "held_for_review": sorted(result.held_for_review),
            },
        )
    return True


def run_sync(run_id: int) -> McpSyncRun | None:
    """Take sync run `run_id` to its outcome; safe to call again for the same run.

    Does nothing for a run that has finished, or (PostgreSQL) that another worker is
    working on now. A RUNNING run nobody holds (its worker died) is claimed again and
    finished. Returns the run as this call left it, or None if it did nothing.
    """
    with _run_lock(run_id) as locked:
        claim = _claim(run_id) if locked else None
        if claim is None:
            logger.info("sync run %s: nothing to do (finished, missing, or in progress elsewhere)", run_id)
            return None
        try:
            with _lease_kept(claim):
                _run_claimed(claim)
        except SyncError as exc:
            _fail(claim, exc.message)
        except SoftTimeLimitExceeded:
            _fail(claim, ERROR_TIME_LIMIT)
        except Exception as exc:
            # Left RUNNING, the run would block every later sync of its server.
            logger.exception("sync run %s failed unexpectedly", run_id)
            _fail(
                claim,
                ERROR_UNEXPECTED.format(
                    stage=STAGE_SYNC, detail=one_line(f"{type(exc).__name__}: {exc}", 300)
                ),
            )
        return McpSyncRun.objects.get(pk=run_id)


def _run_claimed(claim: _Claim) -> None:
    """Fetch the listing and store it, or fail the run; SyncError and the rest propagate."""
    server = McpServer.objects.get(pk=claim.server_id)
    if not server.enabled:
        _fail(claim, ERROR_DISABLED)
        return
    listing = fetch_tool_listing(server, on_progress=lambda text: _progress(claim, text))
    _progress(claim, counted(PROGRESS_STORING, len(listing)))
    try:
        _store(claim, listing)
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:
        logger.exception("sync run %s: storing the listing failed", claim.run_id)
        _fail(claim, ERROR_STORE.format(detail=one_line(f"{type(exc).__name__}: {exc}", 300)))


def run_trouble(run: McpSyncRun | None, *, now: datetime) -> str:
    """Why a server's latest sync run needs an operator (the home's count, the servers list's
    filter): TROUBLE_FAILED, it failed; TROUBLE_STUCK, it runs with its lease lapsed (its
    worker is gone; beat's sweep fails it, but none may run) or waited in the queue longer
    than QUEUED_STUCK_AFTER (no worker took it); "" otherwise, or when it never synced."""
    if run is None:
        return ""
    if run.status == SyncStatus.FAILED:
        return TROUBLE_FAILED
    if run.status == SyncStatus.RUNNING:
        lease = run.lease_expires_at
        if (lease is not None and lease < now) or (
            lease is None and run.started_at is not None and run.started_at < now - STALE_AFTER
        ):
            return TROUBLE_STUCK
    if run.status == SyncStatus.QUEUED and run.created_at < now - QUEUED_STUCK_AFTER:
        return TROUBLE_STUCK
    return ""


def sync_runs_fail_stale(*, older_than: timedelta = STALE_AFTER, server_id: int | None = None) -> int:
    """Fail RUNNING runs whose worker is gone: its lease lapsed (or, for a run that never
    took one, it has run longer than any task may). Returns how many were failed.

    Each is failed with ERROR_STALE and its audit event (A3), so the server can sync again.
    A lapsed lease decides by itself: a worker cut off without a word may keep its advisory
    lock for as long as PostgreSQL takes to notice, and a worker that was only slow finds its
    run failed and writes nothing more (its writes are fenced). A run without a lease is
    failed only if nobody holds its lock. `server_id` limits the sweep to one server (what
    *Sync now* checks); beat sweeps them all.
    """
    now = timezone.now()
    stale = McpSyncRun.objects.filter(status=SyncStatus.RUNNING).filter(
        Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True, started_at__lt=now - older_than)
    )
    if server_id is not None:
        stale = stale.filter(server_id=server_id)
    failed = 0
    for run_id, server, attempts, lease in stale.values_list(
        "pk", "server_id", "attempts", "lease_expires_at"
    ):
        with _run_lock(run_id) as locked:
            if lease is None and not locked:
                continue
            # Still RUNNING under the same attempt with the same lapsed lease: not renewed,
            # nor taken over by a redelivery, since it was read.
            lapsed = _fenced(_Claim(run_id, server, attempts)).filter(lease_expires_at=lease)
            details = {"attempt": attempts, "lease_expired_at": lease.isoformat() if lease else None}
            if _fail_run(lapsed, ERROR_STALE, details):
                failed += 1
    return failed
