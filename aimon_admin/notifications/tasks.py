"""Background work of notifications (Celery): fan a request's event out, send each delivery,
send digests, and the beat's sweep that picks up whatever was left (P2: nothing lost).

Every task is safe to run twice: a fan-out happens once (its marker row), a send only after
claiming its row (services.delivery)."""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app, shared_task

from aimon_admin.approvals.services.escalation import requests_escalate_due
from aimon_admin.notifications import policy, services
from aimon_admin.notifications.choices import DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Delivery

logger = logging.getLogger(__name__)

OPENED_TASK = "notifications.request_opened"
CHANGED_TASK = "notifications.request_changed"
ESCALATED_TASK = "notifications.request_escalated"
DELIVER_TASK = "notifications.deliver"
DIGEST_TASK = "notifications.send_digest"
SWEEP_TASK = "notifications.sweep"


def _eager() -> bool:
    return bool(current_app.conf.task_always_eager)


def queue_deliveries(ids: list[int]) -> None:
    """Queue one send per delivery; a queue that cannot be reached leaves them due (logged):
    the sweep queues them again."""
    for delivery_id in ids:
        try:
            deliver.apply_async(args=[delivery_id], retry=False)
        except Exception:
            logger.exception("could not queue delivery %s; the sweep will", delivery_id)
            if not _eager():
                return  # the broker is down: the rest would fail alike


@shared_task(name=OPENED_TASK, ignore_result=True)
def request_opened(request_id: str) -> int:
    """A request opened (P1): make its deliveries and queue those due now."""
    ids = services.request_fan_out(request_id=request_id, event=NotificationEvent.REQUESTED)
    queue_deliveries(ids)
    return len(ids)


@shared_task(name=CHANGED_TASK, ignore_result=True)
def request_changed(request_id: str) -> int:
    """A request changed: once it is closed, the webhooks that take 'approval.answered' are told."""
    ids = services.request_fan_out(request_id=request_id, event=NotificationEvent.ANSWERED)
    queue_deliveries(ids)
    return len(ids)


@shared_task(name=ESCALATED_TASK, ignore_result=True)
def request_escalated(request_id: str) -> int:
    """Nobody answered a request in its runtime's time (P2): tell the operators, the owner and
    the webhooks that take 'approval.escalated', at once whatever their quiet hours."""
    ids = services.request_fan_out(request_id=request_id, event=NotificationEvent.ESCALATED)
    queue_deliveries(ids)
    return len(ids)


@shared_task(bind=True, name=DELIVER_TASK, ignore_result=True)
def deliver(self: Any, delivery_id: int) -> str | None:
    """Send one delivery; after a failure it is retried with back-off (a Celery retry with a
    worker; eager, the sweep retries it, so a click never waits on a second try)."""
    status = services.delivery_send(delivery_id=delivery_id)
    if status == DeliveryStatus.PENDING and not _eager():
        attempts = Delivery.objects.filter(pk=delivery_id).values_list("attempts", flat=True).first() or 1
        # One second late at most, so the retry finds the row due (the sweep covers a lost one).
        raise self.retry(countdown=policy.backoff_seconds(attempts) + 1, max_retries=None)
    return status


@shared_task(name=DIGEST_TASK, ignore_result=True)
def send_digest(channel_id: int) -> int:
    return services.digest_send(channel_id=channel_id)


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep() -> dict[str, int]:
    """Beat, every few seconds: escalate the requests nobody answered in their runtime's time
    (each announced after its commit, so its fan-out is queued at once), fan out what was
    missed, hand back lapsed leases, queue what is due."""
    escalated = requests_escalate_due()
    found = services.deliveries_sweep()
    for request_id in found.opened:
        request_opened.delay(request_id)
    for request_id in found.escalated:
        request_escalated.delay(request_id)
    for request_id in found.answered:
        request_changed.delay(request_id)
    queue_deliveries(found.due)
    for channel_id in found.digests:
        send_digest.delay(channel_id)
    return {
        "escalated": escalated,
        "opened": len(found.opened),
        "answered": len(found.answered),
        "due": len(found.due),
        "digests": len(found.digests),
        "reclaimed": found.reclaimed,
    }


def listen() -> None:
    """Hear approvals' announcements (core.hooks): queue the fan-out, never failing the caller."""
    from aimon_admin.core import hooks

    hooks.listen(hooks.REQUEST_OPENED, _opened)
    hooks.listen(hooks.REQUEST_CHANGED, _changed)
    hooks.listen(hooks.REQUEST_ESCALATED, _escalated)


# In the web request that opened or answered the request, after its commit: no publish
# retries (a broker that is down fails at once, and the sweep fans the request out later),
# so the answer to the runtime or the click never waits on Redis.


def _opened(request_id: str) -> None:
    request_opened.apply_async(args=[request_id], retry=False)


def _changed(request_id: str) -> None:
    request_changed.apply_async(args=[request_id], retry=False)


def _escalated(request_id: str) -> None:
    request_escalated.apply_async(args=[request_id], retry=False)
