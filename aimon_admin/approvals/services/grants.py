"""Grants written for an answer (S2, S4-S6, S9, U3): one grant where the answer's target
says, superseding what no longer holds its key, or settled by what does; and what an audit
event names it. The callers (an item's answer, an abort's denial) claim the item and write
the grant's event in the same transaction, in the locks' order: the grant's key, the item,
the audit chain."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import IntegrityError
from django.db.models import Q

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy, tool_rule_grammar
from aimon_admin.approvals.choices import (
    GrantDecision,
    GrantKind,
    GrantOrigin,
    GrantScope,
    RequestKind,
    RevokeReason,
)
from aimon_admin.approvals.models import ApprovalRequest, Grant, Session
from aimon_admin.core import rawsql


@dataclass(frozen=True)
class GrantWrite:
    """What writing one answer's grant came to: the grant that now holds the key, the grants
    it superseded, and — when another request's answer already held the key — that grant
    (`settled_by`: this answer wrote nothing) or the ALLOW this DENY replaced (`replaced`).
    `session`: the session the key is held in (the request's, a fork's invoking session;
    None agent-wide), whose activity the answer counts (S12)."""

    grant: Grant
    superseded: list[int]
    settled_by: Grant | None = None
    replaced: Grant | None = None
    session: Session | None = None


def grant_subject(request: ApprovalRequest, skill: str, pattern: str) -> str:
    """What an audit event names: the skill, or the tool as rule text `Tool(pattern)` (U7)."""
    if request.kind == RequestKind.TOOL:
        return tool_rule_grammar.rule_text(server=request.server, tool=skill, pattern=pattern)
    return skill


def grant_write(
    *,
    request: ApprovalRequest,
    skill: str,
    target: policy.GrantTarget,
    origin: GrantOrigin,
    user: User | None,
    now: dt.datetime,
    settle: bool = True,
    pattern: str = "",
    approvers: int = 1,
) -> GrantWrite:
    """Write one grant where the target says.

    A grant of the same key that is no longer in force (its expiry passed) is superseded. One
    in force was written by another request's answer while this one waited (at creation the
    chain would have read it). A person's answer (`settle`) then follows S2: the same decision
    is answered by that grant, nothing new written; a DENY beats the ALLOW (superseding it);
    an ALLOW meets the DENY standing, and is answered by it. An abort's denial (S9) always
    supersedes. The insert comes first, the key read only when it is held: most keys hold
    nothing. Two answers racing for the same key (each seeing it free, one insert refused by
    the one-active-grant constraint) are settled the same way: the loser reads the key again.
    A tool request's grant is a TOOL grant for its tool, server and `pattern` (U3).
    `approvers`: how many people's answer this is (P3); an ALLOW in force that fewer people
    gave does not settle it, it is replaced (it answers nothing a rule needs more people for).
    """
    # A skill request's answers write SKILL grants; a tool request's, TOOL grants (U3).
    kind = GrantKind.TOOL if request.kind == RequestKind.TOOL else GrantKind.SKILL
    session = _holder_session(request, target.holder)
    grant = Grant(
        runtime=request.runtime,
        kind=kind,
        server=request.server if kind == GrantKind.TOOL else "",
        pattern=pattern,
        scope=target.scope,
        decision=target.decision,
        skill=skill,
        session=session,
        turn_id=request.turn_id if target.scope == GrantScope.TURN else "",
        origin=origin,
        granted_by=user,
        request=request,
        approvers=approvers,
    )
    superseded: list[int] = []
    replaced = None
    for attempt in (1, 2, 3):
        # Most keys hold nothing: the insert alone, no read before it.
        if rawsql.insert_unless_conflict(grant):
            return GrantWrite(grant=grant, superseded=superseded, replaced=replaced, session=session)
        if attempt == 3:
            break
        held = list(Grant.objects.filter(_same_key(grant)).select_related("granted_by"))
        in_force = [g for g in held if g.expires_at is None or g.expires_at > now]
        if settle and in_force:
            current = in_force[0]
            same = current.decision == target.decision
            if current.decision == GrantDecision.DENY or (same and current.approvers >= approvers):
                return GrantWrite(grant=current, superseded=superseded, settled_by=current, session=session)
            if not same:
                replaced = current  # our DENY, made now, beats their ALLOW (S2)
            # else an ALLOW fewer people gave: ours, given by more, supersedes it (P3)
        if held:
            Grant.objects.filter(pk__in=[g.pk for g in held], revoked_at__isnull=True).update(
                revoked_at=now, revoked_by=user, revoke_reason=RevokeReason.SUPERSEDED
            )
            superseded += [g.pk for g in held]
        # Then the insert again: another answer may have committed a grant for this key
        # since the read, and the loser of that race reads the key again.
    raise IntegrityError(f"The {skill} grant's key stayed held by grants written meanwhile.")


def _holder_session(request: ApprovalRequest, holder: str) -> Session | None:
    if holder == policy.Holder.SESSION:
        return request.session
    if holder == policy.Holder.INVOKING_SESSION:
        return request.invoking_session
    return None


def _same_key(grant: Grant) -> Q:
    """The one-active-grant key `grant` (not yet written) would hold: a skill's grants and a
    tool's never answer for each other, and a tool's are per server and subject pattern."""
    key = Q(
        runtime=grant.runtime,
        kind=grant.kind,
        server=grant.server,
        skill=grant.skill,
        pattern=grant.pattern,
        scope=grant.scope,
        session=grant.session,  # None: an AGENT grant, held in no session
        revoked_at__isnull=True,
    )
    if grant.scope == GrantScope.TURN:
        key &= Q(turn_id=grant.turn_id)
    return key
