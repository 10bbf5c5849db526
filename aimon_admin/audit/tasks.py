"""Background work of the audit log (Celery): the chain verification (A2), run by beat every
hour and by a person's *Verify now*; the signed checkpoint (A4), by beat every
AIMON_AUDIT_CHECKPOINT_MINUTES."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.contrib.auth import get_user_model
from django.core.cache import cache

from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import TASK_ACTOR_LABEL, VERIFICATION_ACTIONS, audit_chain_verify
from aimon_admin.core.actors import Actor

VERIFY_TASK_NAME = "audit.verify_chain"
# A run from a checkpoint reads only what was written since the last one; a full re-verify
# of a million events takes tens of seconds. Past the soft limit the run stops and writes
# nothing: the next beat starts again from the same checkpoint.
TASK_SOFT_TIME_LIMIT = 600
TASK_TIME_LIMIT = 660
_RUNNING_KEY = "aimon:audit:verify-running"


def task_request_id(task_id: str) -> str:
    """The request id a task's audit events carry (set by aimon_admin.celery for every task)."""
    return f"task-{task_id}"


@shared_task(
    bind=True,
    name=VERIFY_TASK_NAME,
    ignore_result=True,
    soft_time_limit=TASK_SOFT_TIME_LIMIT,
    time_limit=TASK_TIME_LIMIT,
)
def verify_chain(self: Any, full: bool = False, requested_by: int | None = None) -> str | None:
    """Verify the chain from the last checkpoint and write the outcome as an event, naming as
    its actor the person who asked (`requested_by`, a user id: *Verify now*), else the verifier.

    Idempotent: a delivery of this task records at most one event, whatever happens to
    the message. A redelivery (the worker died after the event committed, before the late
    ack) finds the event its task id already wrote and does nothing; a run that finds
    another still going (a slow full re-verify, a beat that fired twice) does nothing too,
    since the running one covers the same events. A new beat tick is a new task and
    records a new outcome. Returns the action written, or None when it stood aside.
    """
    task_id = self.request.id
    if (
        task_id
        and AuditEvent.objects.filter(
            action__in=VERIFICATION_ACTIONS, request_id=task_request_id(task_id)
        ).exists()
    ):
        return None
    if not cache.add(_RUNNING_KEY, "1", timeout=TASK_TIME_LIMIT):
        return None
    try:
        result = audit_chain_verify(actor=_actor(requested_by), full=full)
    finally:
        cache.delete(_RUNNING_KEY)
    return result.event.action if result.event is not None else None


def _actor(requested_by: int | None) -> Actor:
    person = get_user_model().objects.filter(pk=requested_by).first() if requested_by is not None else None
    return Actor.for_user(person) if person is not None else Actor.system(TASK_ACTOR_LABEL)


SIGN_TASK_NAME = "audit.sign_checkpoint"


@shared_task(name=SIGN_TASK_NAME, ignore_result=True)
def sign_checkpoint() -> int | None:
    """Sign and publish a checkpoint of the log (A4), by beat every AIMON_AUDIT_CHECKPOINT_MINUTES.
    A refusal is kept for the auditor's home (checkpoints.refusal) and tried again next time;
    returns the tree size signed, or None."""
    from aimon_admin.audit.checkpoints import CheckpointRefusedError, checkpoint_sign

    try:
        return checkpoint_sign().tree_size
    except CheckpointRefusedError:
        return None
