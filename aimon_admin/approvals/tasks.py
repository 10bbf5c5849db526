"""Background work for skill approvals (Celery)."""

from __future__ import annotations

from celery import shared_task

from aimon_admin.approvals import services

EXPIRE_TASK_NAME = "approvals.expire_due_requests"
# Bounds one run; whatever is left waits 30 s for the next beat (and every read of a due
# request expires it on the spot anyway, S9).
EXPIRE_BATCH = 500
EXPIRE_MAX_BATCHES = 20


@shared_task(name=EXPIRE_TASK_NAME, ignore_result=True)
def expire_due_requests() -> int:
    """Expire every request past its deadline (S9: each unanswered skill is denied for the
    session). Idempotent: a request is closed by a conditional update, so a run that
    overlaps another, or a read expiring the same request, closes it once."""
    expired = 0
    for _ in range(EXPIRE_MAX_BATCHES):
        count = services.requests_expire_due(limit=EXPIRE_BATCH)
        expired += count
        if count < EXPIRE_BATCH:
            break
    return expired
