"""Hooks: how a lower app tells a higher one that something happened, without importing it.

approvals may not import notifications (the layers, tests/test_layers.py), yet notifications
must hear when a request opens, changes or is escalated; audit, a leaf, likewise when it
signs a checkpoint (A4: webhooks witness it). approvals and audit announce it here (from
inside the transaction that made the change, where it has one); notifications listens,
registered once at start-up (its AppConfig.ready). One way only: core knows no app, the
announcing app knows no listener.

Two kinds of listener. One registered `in_transaction` runs at once, inside that
transaction: what it writes (notifications: what the request now owes its channels) commits
with the change or not at all, and its failure fails the change, so nothing owed is ever
lost between the commit and a listener. Every other listener runs after the commit, as a
hint (`core.hints`): it only hurries what the database already holds.

Why not Celery's `send_task` by name: it always goes through the broker and ignores
`task_always_eager`, so under `make run` (no broker) nothing would ever run. A listener calls
its task's own `delay()`, which runs inline when eager and is queued otherwise. Why not a
Django signal: its `send` lets a listener's exception reach the caller and `send_robust`
hides it; here every failure is logged and none reaches the change that was announced (a
request is opened or answered whatever its listeners do).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from functools import partial

from django.db import transaction

from aimon_admin.core import hints

logger = logging.getLogger(__name__)

REQUEST_OPENED = "approval-request-opened"
# The request changed: an answer was written, or it closed (answered, cancelled, expired).
REQUEST_CHANGED = "approval-request-changed"
# Nobody answered it in its runtime's time: it was sent to the operators and the owner (P2).
REQUEST_ESCALATED = "approval-request-escalated"
# A signed audit checkpoint was written (A4); its subject is the checkpoint's id.
CHECKPOINT_SIGNED = "audit-checkpoint-signed"
OUTSIDE_A_TRANSACTION = (
    "{event} was announced outside a transaction: what its listeners write must commit with "
    "the change, so announce it inside the transaction that makes it"
)

Listener = Callable[[str], None]
_listeners: dict[str, list[Listener]] = defaultdict(list)
_in_transaction: dict[str, list[Listener]] = defaultdict(list)


def listen(event: str, listener: Listener, *, in_transaction: bool = False) -> None:
    """Call `listener(subject_id)` for each announcement of `event` (once, however often it is
    registered): after the announcing transaction commits, or `in_transaction`, at once inside
    it."""
    listeners = _in_transaction[event] if in_transaction else _listeners[event]
    if listener not in listeners:
        listeners.append(listener)


def announce_after_commit(event: str, subject_id: uuid.UUID | str) -> None:
    """Announce a change the caller's transaction makes. Each `in_transaction` listener runs
    now, inside it (its failure is the change's: raised); each other listener once the change
    is committed (at once outside a transaction), a hint of its own (`core.hints`: off the
    request's thread in production, so a broker that is down never holds the change that was
    announced); nothing when nobody listens."""
    subject = str(subject_id)
    recorders = list(_in_transaction.get(event, ()))
    if recorders and not transaction.get_connection().in_atomic_block:
        raise RuntimeError(OUTSIDE_A_TRANSACTION.format(event=event))
    for recorder in recorders:
        recorder(subject)
    listeners = list(_listeners.get(event, ()))
    if not listeners:
        return

    def handed_over() -> None:
        for listener in listeners:
            hints.send_soon(f"{event} for {subject}", partial(listener, subject))

    transaction.on_commit(handed_over)
