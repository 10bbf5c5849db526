"""Clear and revoke (S10): sessions' approvals, agent-wide ones, one grant; each audited with
counts. And the undo of an allow just given (S14), which is that one grant's revoke."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy
from aimon_admin.approvals.choices import (
    GrantKind,
    GrantOrigin,
    GrantScope,
    RevokeReason,
)
from aimon_admin.approvals.models import Grant
from aimon_admin.approvals.services.errors import (
    UNDO_DENY_MESSAGE,
    UNDO_NOT_THEIRS_MESSAGE,
    UNDO_TOO_LATE_MESSAGE,
    NotAllowedError,
)
from aimon_admin.approvals.services.sessions import session_lookup
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

# --- Clear and revoke (S10) --------------------------------------------------------------------


def _revoke(
    runtime: AgentRuntime, actor: Actor, reason: RevokeReason, *, session_id: str | None = None
) -> int:
    """Revoke the runtime's grants in force held in the session `session_id` (one never seen
    holds none), or with no session its AGENT-scope ones; how many were revoked."""
    if session_id is None:
        grants = Q(scope=GrantScope.AGENT)
    else:
        session = session_lookup(runtime=runtime, session_id=session_id)
        if session is None:
            return 0
        grants = Q(session=session)
    return (
        Grant.objects.active()
        .filter(grants, runtime=runtime)
        .update(revoked_at=timezone.now(), revoked_by=actor.user, revoke_reason=reason)
    )


@transaction.atomic
def session_clear(*, runtime: AgentRuntime, session_id: str, actor: Actor) -> int:
    """S10: drop the session's turn and session approvals (and denials)."""
    removed = _revoke(runtime, actor, RevokeReason.CLEAR, session_id=session_id)
    audit_record(
        action=AuditAction.SESSION_CLEARED,
        actor=actor,
        runtime=runtime,
        session_key=session_id,
        details={"removed": removed},
    )
    return removed


@transaction.atomic
def session_revoke(*, runtime: AgentRuntime, session_id: str, agent: bool, actor: Actor) -> tuple[int, int]:
    """S10: revoke the session's approvals; with agent=True the runtime's agent-wide ones too."""
    removed_session = _revoke(runtime, actor, RevokeReason.REVOKE, session_id=session_id)
    removed_agent = _revoke(runtime, actor, RevokeReason.REVOKE_AGENT) if agent else 0
    audit_record(
        action=AuditAction.SESSION_REVOKED,
        actor=actor,
        level=AuditLevel.WARNING if agent else AuditLevel.INFO,
        runtime=runtime,
        session_key=session_id,
        details={"removed_session": removed_session, "removed_agent": removed_agent, "agent": agent},
    )
    return removed_session, removed_agent


@transaction.atomic
def agent_grants_revoke(*, runtime: AgentRuntime, actor: Actor) -> int:
    """Revoke agent-wide: every AGENT-scope grant of the runtime (S10)."""
    removed = _revoke(runtime, actor, RevokeReason.REVOKE_AGENT)
    audit_record(
        action=AuditAction.AGENT_GRANTS_REVOKED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=runtime,
        details={"removed_agent": removed},
    )
    return removed


@transaction.atomic
def grant_revoke(*, grant: Grant, actor: Actor, undo: bool = False) -> bool:
    """Revoke one grant on its own; False if it was no longer in force. `undo`: the person
    who gave it took it back just after (S14), which its event says."""
    revoked = (
        Grant.objects.active()
        .filter(pk=grant.pk)
        .update(revoked_at=timezone.now(), revoked_by=actor.user, revoke_reason=RevokeReason.SINGLE)
    )
    if revoked:
        audit_record(
            action=AuditAction.GRANT_REVOKED,
            actor=actor,
            runtime=grant.runtime,
            session_key=grant.session.session_id if grant.session else "",
            # A tool grant is named with its subject pattern, as its grant event named it (U7).
            subject_type="tool" if grant.kind == GrantKind.TOOL else "skill",
            subject=grant.label,
            details={
                "grant_id": grant.pk,
                "scope": grant.scope,
                "decision": grant.decision,
                **({"pattern": grant.pattern} if grant.kind == GrantKind.TOOL else {}),
                **({"undo": True, "request_id": str(grant.request_id)} if undo else {}),
            },
        )
    return bool(revoked)


UNDO_REFUSED = {
    policy.UndoRefusal.NOT_THEIRS: UNDO_NOT_THEIRS_MESSAGE,
    policy.UndoRefusal.DENY: UNDO_DENY_MESSAGE,
    policy.UndoRefusal.TOO_LATE: UNDO_TOO_LATE_MESSAGE.format(
        minutes=int(policy.JUST_ANSWERED_FOR.total_seconds() // 60)
    ),
}


def undo_refusal(*, grant: Grant, user: User) -> policy.UndoRefusal | None:
    """S14: why `user` may not undo the answer that wrote `grant` now, or None."""
    return policy.undo_refusal(
        decision=grant.decision,
        given_by_them=grant.granted_by_id is not None and grant.granted_by_id == user.pk,
        from_answer=grant.request_id is not None and grant.origin != GrantOrigin.ABORT,
        age=timezone.now() - grant.created_at,
    )


def grant_undo(*, grant: Grant, user: User) -> bool:
    """S14: the person who gave an allow takes it back, just after: a revoke of that grant on
    its own (grant_revoke, audited as such), refused (NotAllowedError, saying why) to anyone
    else, for a deny, and once JUST_ANSWERED_FOR has passed. False if it was no longer in
    force. What the agent already did with the allow stays done."""
    refusal = undo_refusal(grant=grant, user=user)
    if refusal is not None:
        raise NotAllowedError(UNDO_REFUSED[refusal])
    return grant_revoke(grant=grant, actor=Actor.for_user(user), undo=True)
