"""Hooks: how a lower app tells a higher one that something happened, without importing it.

approvals may not import notifications (the layers, tests/test_layers.py), yet notifications
must hear when a request opens or changes. approvals announces it here after its transaction
commits; notifications listens, registered once at start-up (its AppConfig.ready). One way
only: core knows no app, approvals knows no listener.

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

Listener = Callable[[str], None]
_listeners: dict[str, list[Listener]] = defaultdict(list)


def listen(event: str, listener: Listener) -> None:
    """Call `listener(subject_id)` after each committed announcement of `event` (once, however
    often it is registered)."""
    if listener not in _listeners[event]:
        _listeners[event].append(listener)


def announce(event: str, subject_id: str) -> None:
    """Call every listener now; a listener that fails is logged and the rest still run."""
    for listener in list(_listeners.get(event, ())):
        try:
            listener(subject_id)
        except Exception:
            logger.exception("a listener of %s failed for %s; its own sweep picks it up", event, subject_id)


def announce_after_commit(event: str, subject_id: uuid.UUID | str) -> None:
    """Announce once the change is committed (at once outside a transaction), each listener
    a hint of its own (`core.hints`: off the request's thread in production, so a broker
    that is down never holds the change that was announced); nothing when nobody listens."""
    listeners = list(_listeners.get(event, ()))
    if not listeners:
        return
    subject = str(subject_id)

    def handed_over() -> None:
        for listener in listeners:
            hints.send_soon(f"{event} for {subject}", partial(listener, subject))

    transaction.on_commit(handed_over)
