"""The one writer of the audit log (A1-A3)."""

from __future__ import annotations

from typing import Any

from django.db import connection, models
from django.utils import timezone

from aimon_admin.audit import chain, chain_head, merkle, tree
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.core.context import current_channel, current_request_id


def _column_text(value: str, limit: int) -> str:
    """Plain text columns take any caller's text: NUL (refused by PostgreSQL) and lone
    surrogates (no UTF-8 form) become U+FFFD rather than failing the change."""
    value = value.replace("\x00", "\ufffd")
    value = value.encode("utf-8", "replace").decode("utf-8") if not value.isascii() else value
    return value[:limit]


class AuditOutsideTransactionError(RuntimeError):
    """audit_record() was called outside a transaction, so A3 could not hold."""


def audit_record(
    *,
    action: AuditAction,
    actor: Actor,
    level: AuditLevel = AuditLevel.INFO,
    runtime: models.Model | None = None,  # a runtimes.AgentRuntime: audit imports no app
    session_key: str = "",
    subject_type: str = "",
    subject: str = "",
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the chain, inside the caller's transaction (A3).

    The caller's transaction must be open, so the event commits or rolls back with the
    change it records. Writers are serialised on the chain head (an advisory lock on
    PostgreSQL, taken in the head's read: audit/chain_head.py; SQLite transactions here
    take the write lock when they begin), so concurrent writers can never fork the chain;
    the unique `prev_hash` would refuse a fork even if they could.
    """
    if not connection.in_atomic_block:
        raise AuditOutsideTransactionError(
            "audit_record() must run inside the transaction of the change it records"
        )
    normalized_details = chain.normalize(details or {})
    if runtime is None and actor.runtime is not None:
        runtime = actor.runtime

    if connection.vendor == "postgresql":
        head = chain_head.locked_head(connection)
    else:
        head = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    prev_seq, prev_hash = head if head else (0, chain.GENESIS_HASH)

    event = AuditEvent(
        seq=prev_seq + 1,
        created_at=timezone.now(),
        actor=actor.user,
        actor_label=_column_text(actor.label, 200),
        channel=current_channel(),
        action=action,
        level=level,
        runtime=runtime,
        session_key=_column_text(session_key, 200),
        subject_type=_column_text(subject_type, 32),
        subject=_column_text(subject, 300),
        details=normalized_details,
        request_id=(current_request_id() or "")[:80],
        prev_hash=prev_hash,
    )
    event.hash = chain.compute_hash(event.content())
    event._written_by_audit_record = True
    event.save(force_insert=True)
    # A4: the event's leaf and the subtrees it completes, under the same lock and transaction.
    tree.append(event.seq - 1, merkle.event_leaf(event.content()))
    return event


def audit_chain_head() -> tuple[int, str]:
    """The last event's seq and hash (0 and the genesis hash for an empty log)."""
    head = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    return head if head else (0, chain.GENESIS_HASH)


def audit_verify_chain() -> tuple[int, chain.ChainProblem | None]:
    """Walk the whole log in order; return how many events were read and the first problem."""
    count = 0

    def events():  # type: ignore[no-untyped-def]
        nonlocal count
        for event in AuditEvent.objects.order_by("seq").iterator(chunk_size=2000):
            count += 1
            yield event.pk, event.content(), event.hash

    problem = chain.verify_chain(events())
    return count, problem
