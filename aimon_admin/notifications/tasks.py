"""Background work of notifications (Celery): fan a request's event (or a signed audit
checkpoint, A4) out, send each delivery, send digests, and the beat's sweep that queues
whatever is owed or due (P2: nothing lost).

Fan-outs, sends and digests run on the `notifications` queue (CELERY_TASK_ROUTES), so a
burst of them never delays the default queue's work (request expiry, MCP syncs); the sweep
stays on the default queue, since it only takes rows and queues their tasks.

Every task is safe to run twice: a fan-out happens once (it locks and marks its owed row), a
send only after claiming its row (services.delivery). Each task queued for a row leases the
row first, so the sweep does not queue it again while it waits its turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task, current_app, shared_task

from aimon_admin.approvals.services.escalation import requests_escalate_due
from aimon_admin.core import hooks
from aimon_admin.notifications import services
from aimon_admin.notifications.choices import NotificationEvent

logger = logging.getLogger(__name__)

FAN_OUT_TASK = "notifications.fan_out"
DELIVER_TASK = "notifications.deliver"
DIGEST_TASK = "notifications.send_digest"
SWEEP_TASK = "notifications.sweep"
# Where CELERY_TASK_ROUTES sends fan-outs, sends and digests.
QUEUE = "notifications"
# The sweep tops that queue up to this many waiting messages, never past it. A row that is
# due and not leased may be waiting in a backlog already (a hint's fan-out, its age past
# the grace): behind a longer backlog the sweep queues nothing, and what is left it queues
# once the backlog has shrunk, so a burst is never made longer by the sweep.
SWEEP_ROOM = 500


def _eager() -> bool:
    return bool(current_app.conf.task_always_eager)


def _queue(task: Task, jobs: Sequence[tuple[int, list[Any]]], hand_back: Callable[[list[int]], None]) -> None:
    """Queue `task` once per job (its row's id, the task's arguments), the rows already
    leased. When the broker cannot be reached the job and the rest are handed back (their
    leases end, so the sweep queues them at its next run); run eagerly, a job that fails is
    its own failure, logged, and the rest still run."""
    for n, (row_id, args) in enumerate(jobs):
        try:
            task.apply_async(args=args, retry=False)
        except Exception:
            if _eager():
                logger.exception("%s failed for %s", task.name, args)
                hand_back([row_id])
                continue
            logger.exception("could not queue %s for %s; the sweep will", task.name, args)
            hand_back([row_id for row_id, _ in jobs[n:]])
            return


def _waiting() -> int:
    """Messages waiting on the notifications queue (none when tasks run eagerly)."""
    if _eager():
        return 0
    with current_app.connection_for_read() as connection:
        return int(connection.default_channel.queue_declare(queue=QUEUE).message_count)


def queue_deliveries(ids: list[int]) -> None:
    """Queue one send per delivery not already queued (each leased first)."""
    taken = services.deliveries_take(ids=ids)
    _queue(deliver, [(pk, [pk]) for pk in taken], lambda rows: services.leases_end(deliveries=rows))


@shared_task(name=FAN_OUT_TASK, ignore_result=True)
def fan_out(subject_id: str, event: str) -> int:
    """What a request's event (or a signed checkpoint, `subject_id` its id) owes, made into
    deliveries (once); those due now are queued."""
    if event == NotificationEvent.CHECKPOINT:
        ids = services.checkpoint_fan_out(checkpoint_id=subject_id)
    else:
        ids = services.request_fan_out(request_id=subject_id, event=event)
    queue_deliveries(ids)
    return len(ids)


@shared_task(name=DELIVER_TASK, ignore_result=True)
def deliver(delivery_id: int) -> str | None:
    """Send one delivery. After a failure it is due again after its back-off, and the sweep
    queues it then (no Celery retry waiting in a worker's memory)."""
    return services.delivery_send(delivery_id=delivery_id)


@shared_task(name=DIGEST_TASK, ignore_result=True)
def send_digest(channel_id: int) -> int:
    return services.digest_send(channel_id=channel_id)


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep() -> dict[str, int]:
    """Beat, every few seconds: escalate the requests nobody answered in their runtime's time
    (each owes its escalation from that commit), hand back lapsed claims, and queue every
    fan-out owed and every delivery and digest due that is not queued already, as far as
    `SWEEP_ROOM` allows."""
    escalated = requests_escalate_due()
    waiting = _waiting()
    found = services.deliveries_sweep(limit=max(SWEEP_ROOM - waiting, 0))
    _queue(
        fan_out,
        [(row.pk, [row.subject_id, row.event]) for row in found.fanouts],
        lambda rows: services.leases_end(fanouts=rows),
    )
    _queue(deliver, [(pk, [pk]) for pk in found.due], lambda rows: services.leases_end(deliveries=rows))
    held = found.digests
    _queue(
        send_digest,
        [(channel_id, [channel_id]) for channel_id in held],
        lambda channels: services.leases_end(deliveries=[pk for c in channels for pk in held[c]]),
    )
    return {
        "escalated": escalated,
        "waiting": waiting,
        "owed": len(found.fanouts),
        "due": len(found.due),
        "digests": len(held),
        "reclaimed": found.reclaimed,
    }


def _owe_opened(request_id: str) -> None:
    # Inside the transaction that opened it: the request now owes its opening message, and
    # its answer's once it closes (so the answer's own transaction writes nothing more).
    services.fanout_owe(
        request_id=request_id, events=[NotificationEvent.REQUESTED, NotificationEvent.ANSWERED]
    )


def _owe_escalated(request_id: str) -> None:
    services.fanout_owe(request_id=request_id, events=[NotificationEvent.ESCALATED])


def _owe_checkpoint(checkpoint_id: str) -> None:
    services.checkpoint_owe(checkpoint_id=checkpoint_id)


def _hint(event: str) -> Callable[[str], None]:
    # After the commit, off the request's thread in production: no publish retries (a broker
    # that is down fails at once, and the sweep queues the fan-out once its grace is over).
    def hint(subject_id: str) -> None:
        fan_out.apply_async(args=[subject_id, event], retry=False)

    return hint


# approvals' and audit's announcements (core.hooks): what each owes, written inside its
# transaction, and the fan-out hinted after its commit. Made once, so listening twice
# registers nothing more.
LISTENERS = {
    hooks.REQUEST_OPENED: (_owe_opened, _hint(NotificationEvent.REQUESTED)),
    hooks.REQUEST_CHANGED: (None, _hint(NotificationEvent.ANSWERED)),
    hooks.REQUEST_ESCALATED: (_owe_escalated, _hint(NotificationEvent.ESCALATED)),
    hooks.CHECKPOINT_SIGNED: (_owe_checkpoint, _hint(NotificationEvent.CHECKPOINT)),
}


def listen() -> None:
    """Hear approvals' and audit's announcements (core.hooks): inside the transaction that
    opened or escalated a request, or signed a checkpoint, record what it owes; once a
    change commits, queue its fan-out."""
    for announced, (owe, hint) in LISTENERS.items():
        if owe is not None:
            hooks.listen(announced, owe, in_transaction=True)
        hooks.listen(announced, hint)
