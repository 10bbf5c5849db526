"""Sessions (S12): first sight, the fixed principal, the idle TTL and its expiry, activity."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from aimon_admin.approvals.choices import (
    RequestStatus,
    RevokeReason,
)
from aimon_admin.approvals.models import ApprovalRequest, Grant, Session
from aimon_admin.approvals.services.errors import (
    PRINCIPAL_CONFLICT_MESSAGE,
    PrincipalConflictError,
    _unknown_invoking,
)
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core import rawsql
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

SEEN_RESOLUTION = dt.timedelta(seconds=60)


# --- Sessions (S12) ----------------------------------------------------------------------------


def session_idle_ttl() -> dt.timedelta:
    return dt.timedelta(seconds=settings.AIMON_SESSION_IDLE_TTL_SECONDS)


def session_touch(*, runtime: AgentRuntime, session_id: str | None, principal: str | None) -> Session | None:
    """The session (runtime, session_id), created at first sight; None without an id.

    The principal is fixed once a non-empty one has been named; naming another raises
    PrincipalConflictError (API: 409). A session seen again after idling past its TTL
    first loses its turn and session approvals (S12).
    """
    if not session_id:
        return None
    now = timezone.now()
    session, created = Session.objects.get_or_create(
        runtime=runtime,
        session_id=session_id,
        defaults={"principal": principal or "", "last_seen_at": now},
    )
    if created:
        return session
    if principal and session.principal and session.principal != principal:
        raise PrincipalConflictError(
            PRINCIPAL_CONFLICT_MESSAGE.format(session=session_id, fixed=session.principal)
        )
    updates: dict[str, object] = {}
    if principal and not session.principal:
        updates["principal"] = principal
    if now - session.last_seen_at > session_idle_ttl() and not _has_pending_request(session):
        _expire_session_grants(session, now)
    if now - session.last_seen_at > SEEN_RESOLUTION:
        updates["last_seen_at"] = now
    if updates:
        Session.objects.filter(pk=session.pk).update(**updates)
        for key, value in updates.items():
            setattr(session, key, value)
    return session


def _has_pending_request(session: Session) -> bool:
    """S12: a session with a pending request (its own, or a fork's that lands on it) is not idle."""
    return ApprovalRequest.objects.filter(
        Q(session=session) | Q(invoking_session=session), status=RequestStatus.PENDING
    ).exists()


def _session_active(session_pk: int | None, now: dt.datetime) -> None:
    """S12: an answer (or an abort's denial) counts as activity of the session it lands on,
    so what was just written is in force for a whole idle TTL from now."""
    if session_pk is not None:
        Session.objects.filter(pk=session_pk, last_seen_at__lt=now).update(last_seen_at=now)


def sessions_for_decision(
    *, runtime: AgentRuntime, session_id: str | None, invoking_session_id: str | None, principal: str | None
) -> tuple[Session | None, Session | None]:
    """The session (touched, as session_touch does) and the invoking session (only read)
    of a decision, in one query when nothing about the session needs writing.

    An invoking session never seen for this runtime is refused (UnknownInvokingSessionError),
    before anything is written: a fork inherits from a session that exists (S3).
    """
    wanted = [sid for sid in (session_id, invoking_session_id) if sid]
    found = {s.session_id: s for s in _sessions_read(runtime, wanted)} if wanted else {}
    invoking = found.get(invoking_session_id) if invoking_session_id else None
    if invoking_session_id and invoking is None and invoking_session_id != session_id:
        raise _unknown_invoking(invoking_session_id)
    session = found.get(session_id) if session_id else None
    if session_id and (session is None or _needs_touch(session, principal)):
        session = session_touch(runtime=runtime, session_id=session_id, principal=principal)
    if invoking_session_id and invoking is None:
        invoking = session  # the same id twice, seen for the first time just now
    return session, invoking


_SESSION_FIELDS = rawsql.all_columns(Session)


def _sessions_read(runtime: AgentRuntime, session_ids: list[str]) -> list[Session]:
    """The runtime's sessions with these ids (one or two), as model instances.

    Plain SQL on purpose, as `_grants_in_force`: it runs on every decision, and the ORM's
    query building costs more than the query (measured in benchmarks/skill_decisions.py).
    """
    marks = ", ".join(["%s"] * len(session_ids))
    sql = (
        f"SELECT {rawsql.select_list(Session, 's', _SESSION_FIELDS)} "  # noqa: S608 - no input in the text # nosec B608
        f"FROM {Session._meta.db_table} s WHERE s.runtime_id = %s AND s.session_id IN ({marks})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [runtime.pk, *session_ids])
        rows = cursor.fetchall()
    sessions = []
    for row in rows:
        session = rawsql.build(Session, _SESSION_FIELDS, row)
        session.runtime = runtime
        sessions.append(session)
    return sessions


def _needs_touch(session: Session, principal: str | None) -> bool:
    if principal and session.principal != principal:
        return True  # to fix an empty principal, or to refuse a different one
    return timezone.now() - session.last_seen_at > SEEN_RESOLUTION


def session_lookup(*, runtime: AgentRuntime, session_id: str | None) -> Session | None:
    if not session_id:
        return None
    return Session.objects.filter(runtime=runtime, session_id=session_id).first()


def _expire_session_grants(session: Session, now: dt.datetime) -> None:
    with transaction.atomic():
        count = (
            Grant.objects.active()
            .filter(session=session)
            .update(revoked_at=now, revoke_reason=RevokeReason.EXPIRED)
        )
        if count:
            audit_record(
                action=AuditAction.SESSION_EXPIRED,
                actor=Actor.system("session-ttl"),
                runtime=session.runtime,
                session_key=session.session_id,
                details={"removed": count, "idle_since": session.last_seen_at.isoformat()},
            )
