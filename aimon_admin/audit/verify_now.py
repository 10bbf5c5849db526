"""*Verify now*: a person asks for the chain verification at once (A2).

Beat verifies the chain every hour; where no beat runs (`make run`: Celery eager, no beat) the
home page said "Never verified" for good. Asking queues the same task beat runs
(`tasks.verify_chain`), with the person as its actor, so its outcome is the same
AUDIT_CHAIN_VERIFIED or AUDIT_CHAIN_BROKEN event. Eager, it runs before the answer and the
answer shows its outcome; with a worker, a marker in the shared cache says a verification was
asked for, and the card polls until an event newer than the one it saw when asked appears
(or the marker lapses with the task's time limit).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from aimon_admin.audit.tasks import TASK_TIME_LIMIT, verify_chain
from aimon_admin.audit.verification import LastVerification, last_verification

PERMISSION = "audit.view_auditevent"
# What asking can come to.
DONE = "done"  # the verification ran already (eager): its outcome is the newest event
RUNNING = "running"  # queued or running on a worker: the card waits for its event
NOT_QUEUED = "not_queued"  # the task queue could not be reached: nothing was started

# Messages people see (tests import these).
VERIFIED_MESSAGE = "Chain verified just now: it is whole."
BROKEN_MESSAGE = "The chain is broken: {problem}"
RUNNING_MESSAGE = "Verification started: the card below shows its outcome when it finishes."
NOT_QUEUED_MESSAGE = (
    "Not started: the task queue (Redis) could not be reached, so no worker was asked to "
    "verify the chain. Try again once it is back, or run manage.py verify_audit --record."
)


@dataclass(frozen=True)
class Pending:
    """A verification someone asked for that has not recorded its outcome yet."""

    after_seq: int  # the newest verification event when asked (0: none)
    requested_at: dt.datetime
    requested_by: str


def _key() -> str:
    # One per database, as the checkpoint's copy: several databases may share one Redis.
    return f"aimon:audit:verify-requested:{connection.vendor}:{connection.settings_dict['NAME']}"


def verification_pending(last: LastVerification | None) -> Pending | None:
    """The verification asked for and still without an outcome newer than `last`, or None."""
    value = cache.get(_key())
    if not isinstance(value, dict):
        return None
    try:
        pending = Pending(
            after_seq=int(value["after_seq"]),
            requested_at=dt.datetime.fromisoformat(value["requested_at"]),
            requested_by=str(value["requested_by"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if last is not None and last.event_seq > pending.after_seq:
        return None
    return pending


def verification_forget() -> None:
    """Drop the marker (the tests; a new, empty database)."""
    cache.delete(_key())


def verification_request(*, user: Any) -> tuple[str, LastVerification | None]:
    """Queue a verification for `user` (its event names them). Returns what came of it
    (DONE, RUNNING, NOT_QUEUED) and the newest verification then."""
    before = last_verification()
    marker = {
        "after_seq": before.event_seq if before is not None else 0,
        "requested_at": timezone.now().isoformat(),
        "requested_by": user.get_username(),
    }
    cache.set(_key(), marker, timeout=TASK_TIME_LIMIT)
    try:
        verify_chain.delay(requested_by=user.pk)
    except BrokerUnavailable:
        verification_forget()
        return NOT_QUEUED, before
    after = last_verification()
    if after is not None and (before is None or after.event_seq > before.event_seq):
        verification_forget()
        return DONE, after
    return RUNNING, before


def outcome_message(outcome: str, last: LastVerification | None) -> str:
    if outcome == NOT_QUEUED:
        return NOT_QUEUED_MESSAGE
    if outcome == DONE and last is not None:
        return VERIFIED_MESSAGE if last.ok else BROKEN_MESSAGE.format(problem=last.problem)
    return RUNNING_MESSAGE


def verification_card(*, user: Any, last: LastVerification | None, message: str = "") -> dict[str, Any]:
    """What the Chain verification card shows: the newest outcome, a verification still
    running, and the Verify now button for whoever may ask."""
    return {
        "verification": last,
        "pending": verification_pending(last),
        "can_verify": user.has_perm(PERMISSION),
        "verify_message": message,
    }
