"""Sessions (S12): first sight, the fixed principal, the idle TTL and its expiry, activity."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
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
)
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
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


def session_active(session: Session | None, now: dt.datetime) -> None:
    """S12: an answer (or an abort's denial) counts as activity of the session it lands on,
    so what was just written is in force for the idle TTL from now. Written as first sight
    writes it, at most once per SEEN_RESOLUTION: a session read as seen within it (as the
    answer's own read of its request found it) needs no write, its idle TTL being longer
    than that interval (approvals.E001). What is in hand is never newer than the row, so a
    stale copy costs a write, never a missed one."""
    if session is None or now - session.last_seen_at <= SEEN_RESOLUTION:
        return
    Session.objects.filter(pk=session.pk, last_seen_at__lt=now).update(last_seen_at=now)
    session.last_seen_at = now


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
