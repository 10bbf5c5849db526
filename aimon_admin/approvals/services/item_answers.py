"""One request item's answer written (S4-S8, U3): the grant first, then the item claimed
pointing at it in one conditional update, then its audit event; *Allow this call* and *Deny
this request*, which store no grant. Locks are taken in this order on every path that
answers or aborts: the grant's key, the item, the audit chain, the request."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.db.models import Exists, OuterRef
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy
from aimon_admin.approvals.choices import (
    Answer,
    GrantDecision,
    GrantOrigin,
    ItemScope,
    RequestKind,
    RequestStatus,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant
from aimon_admin.approvals.services.errors import (
    DENY_REPLACED_MESSAGE,
    ESCALATION_REACH,
    REQUEST_DENY_REACH,
    SETTLED_DENY_STANDS_MESSAGE,
    SETTLED_SAME_MESSAGE,
)
from aimon_admin.approvals.services.grants import grant_subject, grant_write
from aimon_admin.approvals.services.outcomes import ClaimLost
from aimon_admin.approvals.services.sessions import session_active
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core import metrics
from aimon_admin.core.actors import Actor


def item_answer(
    *,
    request: ApprovalRequest,
    item: ApprovalItem,
    answer: Answer,
    shape: policy.RequestShape,
    user: User,
    notes: list[str],
    pattern: str = "",
    on_claim: Callable[[], None] | None = None,
) -> ApprovalItem | None:
    """Write one item's answer: the grant, the item claimed pointing at it, the audit; None
    when a claim that writes no grant found the item answered. Runs inside the caller's
    transaction (the answer's, which may close the request in it too); ClaimLost, raised
    when the item went to someone else after the grant was written, rolls it back. An
    `on_claim` runs once the item is claimed, before the answer's own audit (the two-person
    rule's last allow records itself there, in the locks' order). `notes`: what the person
    must be told (S2) is appended there."""
    now = timezone.now()
    if policy.stores_nothing(answer):
        return _deny_request_item(request, item, user, now)
    if answer == Answer.ALLOW_CALL:
        return _allow_call_item(request, item, user, now, on_claim)
    target = policy.grant_for_answer(answer, shape)
    origin = GrantOrigin.ESCALATION if target.escalated else GrantOrigin.ANSWER
    # The grant first, then the item claimed pointing at it, in one update: of two people
    # answering at once, one claim finds the item open, and the other's transaction rolls
    # back whatever its grant write did (ClaimLost). Only while the request is still open:
    # an answer that loses a race with a cancel or an expiry must not write (an escalated
    # grant, above all). `decision` stays on the updated row itself (no join, which Django
    # would turn into an "id IN (subquery)" whose condition PostgreSQL does not re-check
    # after a lock wait).
    written = grant_write(
        request=request,
        skill=item.skill,
        target=target,
        origin=origin,
        user=user,
        now=now,
        pattern=pattern,
        approvers=item.approvers,
    )
    grant = written.grant
    decision = grant.decision
    if not _claim(
        item, decision=decision, scope=target.scope, user=user, now=now, grant=grant, pattern=pattern
    ):
        raise ClaimLost
    if on_claim is not None:
        on_claim()
    if written.settled_by is not None:
        _audit_settled(request, item.skill, grant, answer, user)
        notes.append(_settled_note(item.skill, grant, answer))
    else:
        _audit_grant(request, item.skill, grant, target, user, written.superseded)
        if written.replaced is not None:
            notes.append(DENY_REPLACED_MESSAGE.format(skill=item.skill, who=_who(written.replaced)))
    session_active(written.session, now)
    return item


def _allow_call_item(
    request: ApprovalRequest,
    item: ApprovalItem,
    user: User,
    now: dt.datetime,
    on_claim: Callable[[], None] | None = None,
) -> ApprovalItem | None:
    """U3, U4: *Allow this call*: the item reads ALLOW at scope CALL and no grant is written;
    the request's arguments digest is the approval, used once by a tool decision that
    presents it. Audited with the digest (U7)."""
    if not _claim(item, decision=GrantDecision.ALLOW, scope=ItemScope.CALL, user=user, now=now):
        return None
    if on_claim is not None:
        on_claim()
    holder = request.session or request.invoking_session
    session_active(holder, now)
    audit_record(
        action=AuditAction.TOOL_CALL_APPROVED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=holder.session_id if holder else "",
        subject_type="tool",
        subject=grant_subject(request, item.skill, ""),
        details={
            "decision": GrantDecision.ALLOW,
            "scope": ItemScope.CALL,
            "request_id": str(request.pk),
            "arguments_digest": request.arguments_digest,
            "subject": request.subject,
            "answered_by": user.username,
            "stored": False,
        },
    )
    return item


def _claim(
    item: ApprovalItem,
    *,
    decision: str,
    scope: str,
    user: User,
    now: dt.datetime,
    grant: Grant | None = None,
    pattern: str = "",
) -> bool:
    """Claim `item` with its answer in one conditional update, only while it is unanswered and
    its request still PENDING (so an answer that loses a race with another answer, a cancel or
    an expiry writes nothing); an answer that wrote a grant stores it and its pattern too. On
    success `item` is given what the claim wrote, without reading the row back."""
    still_open = Exists(
        ApprovalRequest.objects.filter(pk=OuterRef("request_id"), status=RequestStatus.PENDING)
    )
    answered: dict[str, object] = {
        "decision": decision,
        "scope": scope,
        "answered_by": user,
        "answered_at": now,
    }
    if grant is not None:
        answered |= {"pattern": pattern, "grant": grant}
    if ApprovalItem.objects.filter(still_open, pk=item.pk, decision="").update(**answered) != 1:
        return False
    item.decision, item.scope, item.answered_by, item.answered_at = decision, scope, user, now
    item.grant = grant
    if grant is not None:
        item.pattern = pattern
    return True


def _who(grant: Grant) -> str:
    return grant.granted_by.username if grant.granted_by else "the system"


def _settled_note(skill: str, grant: Grant, answer: Answer) -> str:
    if grant.decision == GrantDecision.DENY and answer != Answer.DENY:
        return SETTLED_DENY_STANDS_MESSAGE.format(skill=skill, who=_who(grant))
    return SETTLED_SAME_MESSAGE.format(skill=skill, who=_who(grant), how=answer.label)


def _deny_request_item(
    request: ApprovalRequest, item: ApprovalItem, user: User, now: dt.datetime
) -> ApprovalItem | None:
    """S13's *Deny this request*: the item reads DENY (so the request, its long-poll and the
    runtime say DENY), scope REQUEST, and no grant is written anywhere."""
    if not _claim(item, decision=GrantDecision.DENY, scope=ItemScope.REQUEST, user=user, now=now):
        return None
    holder = request.session or request.invoking_session
    audit_record(
        action=AuditAction.SKILL_REQUEST_DENIED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=holder.session_id if holder else "",
        subject_type="skill",
        subject=item.skill,
        details={
            "decision": GrantDecision.DENY,
            "scope": ItemScope.REQUEST,
            "request_id": str(request.pk),
            "answered_by": user.username,
            "stored": False,
            "reach": REQUEST_DENY_REACH,
        },
    )
    return item


def _audit_settled(request: ApprovalRequest, skill: str, grant: Grant, answer: Answer, user: User) -> None:
    """A person's answer met a grant another request's answer wrote for the same key (S2)."""
    tool = request.kind == RequestKind.TOOL
    audit_record(
        action=AuditAction.TOOL_ANSWER_SETTLED if tool else AuditAction.SKILL_ANSWER_SETTLED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=grant.session.session_id if grant.session else "",
        subject_type="tool" if tool else "skill",
        subject=grant_subject(request, skill, grant.pattern),
        details={
            "answer": answer.value,
            "decision": grant.decision,
            "scope": grant.scope,
            "request_id": str(request.pk),
            "grant_id": grant.pk,
            "grant_request_id": str(grant.request_id) if grant.request_id else None,
            "answered_by": user.username,
            "stored": False,
        },
    )


def _audit_grant(
    request: ApprovalRequest,
    skill: str,
    grant: Grant,
    target: policy.GrantTarget,
    user: User,
    superseded: list[int],
) -> None:
    details: dict[str, object] = {
        "decision": grant.decision,
        "scope": grant.scope,
        "request_id": str(request.pk),
        "grant_id": grant.pk,
        "answered_by": user.username,
    }
    if superseded:
        details["superseded_grant_ids"] = superseded
    if grant.approvers > 1:
        details["approvers"] = grant.approvers  # P3: given by this many people
    tool = request.kind == RequestKind.TOOL
    if tool:
        # U7: the subject pattern the grant carries, and the call it was answered on.
        details["pattern"] = grant.pattern
        details["arguments_digest"] = request.arguments_digest
    if grant.session is not None and grant.session_id != request.session_id:
        details["lands_on_invoking_session"] = grant.session.session_id
    if target.escalated:
        details["reach"] = ESCALATION_REACH
        details["all_sessions"] = True
        details["expires"] = False
        details["survives_clear"] = True
        details["removed_by"] = "Revoke (this approval on its own), or Revoke agent-wide"
    session_key = (
        grant.session.session_id
        if grant.session
        else (request.invoking_session.session_id if request.invoking_session else "")
    )
    if tool:
        action = AuditAction.TOOL_GRANTED
    else:
        action = AuditAction.SKILL_GRANT_ESCALATED if target.escalated else AuditAction.SKILL_GRANTED
    if target.escalated:  # S6
        metrics.count_on_commit(metrics.SCOPE_ESCALATIONS, request.kind)
    audit_record(
        action=action,
        actor=Actor.for_user(user),
        level=AuditLevel.WARNING if target.escalated else AuditLevel.INFO,
        runtime=request.runtime,
        session_key=session_key,
        subject_type="tool" if tool else "skill",
        subject=grant_subject(request, skill, grant.pattern),
        details=details,
    )
