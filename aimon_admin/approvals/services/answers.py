"""A person's answer (S4-S8, S13): who may give which answer, the grant it writes, and
closing the request (S7)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Subquery
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import policy, selectors, tool_policy, wakeups
from aimon_admin.approvals.choices import (
    Answer,
    GrantDecision,
    GrantOrigin,
    GrantScope,
    ItemScope,
    RequestKind,
    RequestStatus,
)
from aimon_admin.approvals.models import ApprovalAllow, ApprovalItem, ApprovalRequest, Grant
from aimon_admin.approvals.services.errors import (
    ALLOW_MUST_MATCH_MESSAGE,
    ALREADY_ALLOWED_MESSAGE,
    ANSWER_NOT_OFFERED_MESSAGE,
    CAPPED_ANSWER_MESSAGE,
    DENY_REPLACED_MESSAGE,
    ESCALATION_REACH,
    NOT_YOURS_MESSAGE,
    OWN_REQUEST_ALLOW_MESSAGE,
    REQUEST_CLOSED_MESSAGE,
    REQUEST_DENY_REACH,
    SETTLED_DENY_STANDS_MESSAGE,
    SETTLED_SAME_MESSAGE,
    STANDING_ANSWER_REFUSED_MESSAGE,
    ApprovalError,
    NotAllowedError,
    RequestClosedError,
)
from aimon_admin.approvals.services.requests import (
    _grant_subject,
    _holder_session,
    _write_grant,
    request_expire_if_due,
    request_shape,
)
from aimon_admin.approvals.services.sessions import _session_active
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

logger = logging.getLogger(__name__)


@dataclass
class AnswerOutcome:
    written: list[ApprovalItem] = field(default_factory=list)
    already_answered: list[ApprovalItem] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    request_answered: bool = False
    # What the person must be told of an answer another request's answer decided (S2).
    notes: list[str] = field(default_factory=list)
    # The request as it now stands, when this call knows all of it: it closed the request
    # with every skill's answer in hand (S7). None: read it again to show it.
    request: ApprovalRequest | None = None
    # P3: allows recorded on items that need more people: (skill, allows given, needed).
    allows_recorded: list[tuple[str, int, int]] = field(default_factory=list)


def user_may_answer(user: User, request: ApprovalRequest) -> bool:
    if not user.is_active or not user.is_authenticated:
        return False
    is_operator = user.has_role(Role.OPERATOR)
    if not (is_operator or user.has_role(Role.APPROVER)):
        return False
    principal = request.principal or None
    # Whether the principal names an active user here: this active user, without a query;
    # and not asked at all of an operator, who answers every request.
    principal_is_user = bool(principal) and (
        principal == user.username
        or (not is_operator and User.objects.filter(username=principal, is_active=True).exists())
    )
    return policy.may_answer(
        username=user.username,
        is_operator=is_operator,
        is_owner=request.runtime.owner_id == user.pk,
        principal=principal,
        principal_is_user=principal_is_user,
    )


def user_may_grant_agent(user: User, runtime: AgentRuntime) -> bool:
    return policy.may_grant_agent_scope(
        is_operator=user.has_role(Role.OPERATOR), is_owner=runtime.owner_id == user.pk
    )


def answers_for(
    user: User,
    request: ApprovalRequest,
    item: ApprovalItem,
    *,
    patterns: selectors.ToolCallPatterns | None = None,
) -> list[Answer]:
    """The buttons this person sees for one item (S4, S13; a tool request's, U3). For a tool
    request the patterns it offers are read now (`patterns` when the caller has them)."""
    if request.kind == RequestKind.TOOL:
        patterns = patterns or selectors.tool_call_patterns(request=request)
        return tool_policy.tool_answers_offered(
            request_shape(request),
            may_grant_agent=user_may_grant_agent(user, request.runtime),
            allow_patterns=patterns.allow,
        )
    return policy.answers_offered(
        request_shape(request),
        may_grant_agent=user_may_grant_agent(user, request.runtime),
        widest_scope=item.widest_scope,
    )


def request_answer(
    *,
    request: ApprovalRequest,
    user: User,
    answer: Answer | str,
    skills: Sequence[str] | None = None,
    pattern: str | None = None,
) -> AnswerOutcome:
    """A person answers one skill or every unanswered skill of a request (S4-S8, S13), or a
    tool request's call (U3), its session and agent answers narrowed to `pattern` (one the
    request offers; None: the narrowest).

    Each skill is written on its own (S8): a failure leaves that skill ASK and the rest
    go on. Exactly once: an item already answered is reported, never overwritten. The
    request is ANSWERED only once every skill holds a concrete grant (S7).
    """
    answer = Answer(answer)
    request = _for_answer(request)
    request_expire_if_due(request)
    if request.status != RequestStatus.PENDING:
        raise RequestClosedError(REQUEST_CLOSED_MESSAGE.format(status=request.status.lower()))
    if not user_may_answer(user, request):
        raise NotAllowedError(NOT_YOURS_MESSAGE)
    items = list(request.items.all())
    chosen = [i for i in items if skills is None or i.skill in set(skills)]
    if skills is not None and len(chosen) != len(set(skills)):
        raise ApprovalError("Unknown skill for this request.")
    outcome = AnswerOutcome()
    shape = request_shape(request)
    patterns = selectors.tool_call_patterns(request=request) if request.kind == RequestKind.TOOL else None
    for item in chosen:
        if item.answered:
            outcome.already_answered.append(item)
            continue
        if answer not in answers_for(user, request, item, patterns=patterns):
            raise NotAllowedError(_refusal(user, request, item, answer))
    chosen_pattern = ""
    if patterns is not None:
        try:
            chosen_pattern = tool_policy.answer_pattern(
                answer, pattern, allow=patterns.allow, deny=patterns.deny
            )
        except ValueError as exc:  # a pattern the request does not offer (U3)
            raise NotAllowedError(str(exc)) from exc
    open_items = [item for item in chosen if not item.answered]
    # P3: items whose rule needs several people to allow, when this answer is an allow.
    several = {item.pk for item in open_items if item.needs_several and answer in ALLOW_ANSWERS}
    if several:
        _allow_refusal(request, user, answer, chosen_pattern, [i for i in open_items if i.pk in several])
    closed_at: dt.datetime | None = None
    for position, item in enumerate(open_items):
        last = position == len(open_items) - 1
        lost = False
        try:
            with transaction.atomic():
                if item.pk in several:
                    written = _allow_one_of_several(
                        request, item, answer, shape, user, outcome, chosen_pattern
                    )
                else:
                    written = _answer_item(request, item, answer, shape, user, outcome.notes, chosen_pattern)
                # The last write closes the request in its own transaction when nothing is
                # left open (S7 holds: every grant is written by then), saving a commit on
                # the path from the click to the waiting runtime.
                if last and written is not None:
                    closed_at = _close_if_complete(request)
        except _ClaimLost:
            written, lost = None, True
        except _AllowRefused as exc:  # P3: lost a race to another person's different allow
            outcome.failed.append((item.skill, str(exc)))
            closed_at = None
            continue
        except Exception as exc:  # S8: one skill's failure must not stop the others
            logger.exception("writing the grant for %s of request %s failed", item.skill, request.pk)
            outcome.failed.append((item.skill, str(exc) or type(exc).__name__))
            closed_at = None
            continue
        if written is None and item.pk in several and not lost:
            continue  # P3: this allow is recorded; the item waits for more people
        if written is None:
            item.refresh_from_db()
            outcome.already_answered.append(item)
        else:
            outcome.written.append(written)
    if closed_at is None:
        # Again after the commits: another person's answer to the request's other skills
        # may have committed alongside ours, each transaction seeing the other's item still
        # open. Whichever call checks last, after both commits, closes it.
        closed_at = _close_if_complete(request)
    outcome.request_answered = closed_at is not None
    if closed_at is not None and not outcome.failed and _answers_in_hand(request, closed_at):
        outcome.request = request
    if outcome.written or outcome.request_answered or outcome.allows_recorded:
        wakeups.publish_after_commit(request.pk)
    return outcome


# --- The two-person rule (P3) -------------------------------------------------------------------

ALLOW_ANSWERS = frozenset({Answer.ALLOW_CALL, Answer.ALLOW_ONCE, Answer.ALLOW_SESSION, Answer.ALLOW_AGENT})


class _AllowRefused(ApprovalError):
    """P3: an allow that, once the item was locked, turned out not to match an allow another
    person had just recorded (or this person's own, a double click): rolled back."""


def request_owner(request: ApprovalRequest) -> str | None:
    """Whose request it is (S13): its own principal, else its session's, else its invoking
    session's. Under the two-person rule this person's allow never counts (P3)."""
    return policy.effective_principal(
        request.principal,
        request.session.principal if request.session else None,
        request.invoking_session.principal if request.invoking_session else None,
    )


def _allow_words(answer: Answer | str, pattern: str) -> str:
    label = Answer(answer).label
    return f"{label} ({pattern})" if pattern else label


def _allow_refusal(
    request: ApprovalRequest, user: User, answer: Answer, pattern: str, items: list[ApprovalItem]
) -> None:
    """P3, before anything is written: the request's own principal never counts, a person
    allows once, and a later allow gives the same answer and pattern as the first."""
    if request_owner(request) == user.username:
        item = items[0]
        raise NotAllowedError(OWN_REQUEST_ALLOW_MESSAGE.format(skill=item.skill, needed=item.approvers))
    given: dict[int, list[ApprovalAllow]] = {}
    for record in ApprovalAllow.objects.filter(item__in=items).select_related("user"):
        given.setdefault(record.item_id, []).append(record)
    for item in items:
        records = given.get(item.pk, [])
        if any(record.user_id == user.pk for record in records):
            raise NotAllowedError(
                ALREADY_ALLOWED_MESSAGE.format(skill=item.skill, given=len(records), needed=item.approvers)
            )
        if records and (records[0].answer, records[0].pattern) != (answer, pattern):
            raise NotAllowedError(_mismatch(item, records[0]))


def _mismatch(item: ApprovalItem, first: ApprovalAllow) -> str:
    return ALLOW_MUST_MATCH_MESSAGE.format(
        skill=item.skill,
        who=first.user.username,
        first=_allow_words(first.answer, first.pattern),
        needed=item.approvers,
    )


def _count_allow(item: ApprovalItem, *, claimed: bool = False) -> int | None:
    """One more allow on an open item of a pending request: the count it now holds, or None
    (the item was answered, or its request closed). One conditional UPDATE: the row stays
    locked to the end of the transaction, so of people allowing at once each sees its own
    count, and exactly one sees it reach the number needed. `claimed`: this transaction has
    just claimed the item itself (the last allow), so only the count is written."""
    quote = connection.ops.quote_name
    items, requests = ApprovalItem._meta.db_table, ApprovalRequest._meta.db_table
    if claimed:
        sql = (
            f"UPDATE {quote(items)} SET allows_given = allows_given + 1 "  # noqa: S608 - the models' tables # nosec B608
            "WHERE id = %s RETURNING allows_given"
        )
        params: list[object] = [item.pk]
    else:
        sql = (
            f"UPDATE {quote(items)} SET allows_given = allows_given + 1 "  # noqa: S608 - the models' tables # nosec B608
            f"WHERE id = %s AND decision = '' AND EXISTS (SELECT 1 FROM {quote(requests)} r "
            f"WHERE r.id = {quote(items)}.request_id AND r.status = %s) RETURNING allows_given"
        )
        params = [item.pk, RequestStatus.PENDING]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None


class _LastAfterAll(Exception):
    """P3: an allow taken for one of several turned out to be the last one needed (another
    person's allow landed since the item was read): rolled back, and taken again as the last."""


def _allow_one_of_several(
    request: ApprovalRequest,
    item: ApprovalItem,
    answer: Answer,
    shape: policy.RequestShape,
    user: User,
    outcome: AnswerOutcome,
    pattern: str,
) -> ApprovalItem | None:
    """P3: this person's allow of an item that needs several, counted and audited as it
    comes; the last one needed writes the grant through the ordinary answer, in the same
    transaction. None: recorded, still waiting for more people.

    Locks are taken in every answer's order (and an abort's): the grant's key, the item, the
    audit chain. So the allow the item as read says is the last one needed writes the grant
    and claims the item first and counts after; any other counts first and writes no grant,
    and should its count reach the number after all, it is rolled back and taken again as
    the last (never the grant's key after the item: a cancel holding the key and waiting on
    the item would deadlock with it)."""
    last = item.allows_given + 1 >= item.approvers
    try:
        with transaction.atomic():
            return _allow(request, item, answer, shape, user, outcome, pattern, last=last)
    except _LastAfterAll:
        with transaction.atomic():
            return _allow(request, item, answer, shape, user, outcome, pattern, last=True)


def _allow(
    request: ApprovalRequest,
    item: ApprovalItem,
    answer: Answer,
    shape: policy.RequestShape,
    user: User,
    outcome: AnswerOutcome,
    pattern: str,
    *,
    last: bool,
) -> ApprovalItem | None:
    given = 0

    def record() -> None:
        nonlocal given
        counted = _count_allow(item, claimed=last)
        if counted is None:
            raise _ClaimLost
        if not last and counted >= item.approvers:
            raise _LastAfterAll
        given = counted
        _record_allow(request, item, answer, user, pattern, given)

    if not last:
        record()
        outcome.allows_recorded.append((item.skill, given, item.approvers))
        item.allows_given = given
        return None
    # The last allow: its own event comes before the grant's, once the item is claimed.
    written = _answer_item(request, item, answer, shape, user, outcome.notes, pattern, on_claim=record)
    if written is None:  # answered by someone else, or the request closed
        raise _ClaimLost
    written.allows_given = given
    return written


def _record_allow(
    request: ApprovalRequest, item: ApprovalItem, answer: Answer, user: User, pattern: str, given: int
) -> None:
    """P3: this person's allow, kept and audited as it comes (the item already locked)."""
    try:
        with transaction.atomic():
            ApprovalAllow.objects.create(item=item, user=user, answer=answer, pattern=pattern)
    except IntegrityError as exc:  # this person's own second click, at the same moment
        raise _AllowRefused(
            ALREADY_ALLOWED_MESSAGE.format(skill=item.skill, given=given - 1, needed=item.approvers)
        ) from exc
    # Read after the lock: every allow committed before ours is seen here.
    records = list(
        ApprovalAllow.objects.filter(item=item).select_related("user").order_by("created_at", "id")
    )
    first = records[0]
    if (first.answer, first.pattern) != (answer, pattern):
        raise _AllowRefused(_mismatch(item, first))
    holder = request.session or request.invoking_session
    tool = request.kind == RequestKind.TOOL
    audit_record(
        action=AuditAction.APPROVAL_ALLOW_RECORDED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=holder.session_id if holder else "",
        subject_type="tool" if tool else "skill",
        subject=_grant_subject(request, item.skill, pattern),
        details={
            "answer": answer.value,
            "pattern": pattern,
            "given": given,
            "needed": item.approvers,
            "request_id": str(request.pk),
            "allowed_by": [record.user.username for record in records],
            "answered_by": user.username,
        },
    )


_ANSWER_RELATIONS = ("runtime", "session", "invoking_session")


def _for_answer(request: ApprovalRequest) -> ApprovalRequest:
    """The request with its runtime, sessions and items: the caller's own when it was just
    read so (the answer view reads it through the visibility selector, S13), else read now.

    Nothing written depends on this read being fresh: each item is claimed by a conditional
    update that holds only while the request is pending and the item open, and an item
    found answered meanwhile is reported as answered (by whom, read again).
    """
    prefetched = getattr(request, "_prefetched_objects_cache", {})
    if "items" in prefetched and all(
        ApprovalRequest._meta.get_field(name).is_cached(request) for name in _ANSWER_RELATIONS
    ):
        return request
    return (
        ApprovalRequest.objects.select_related(*_ANSWER_RELATIONS)
        .prefetch_related("items")
        .get(pk=request.pk)
    )


def _refusal(user: User, request: ApprovalRequest, item: ApprovalItem, answer: Answer) -> str:
    """Why an answer not offered is refused, and what to do instead."""
    escalates = request_shape(request).escalates
    if answer in (Answer.DENY_REQUEST, Answer.ALLOW_ONCE, Answer.ALLOW_CALL):
        return ANSWER_NOT_OFFERED_MESSAGE.format(answer=answer.label, skill=item.skill)
    session_answer = answer in (Answer.ALLOW_SESSION, Answer.DENY)
    reach = GrantScope.SESSION if session_answer and not escalates else GrantScope.AGENT
    if not policy.scope_within(reach, item.widest_scope):
        return CAPPED_ANSWER_MESSAGE.format(
            answer=answer.label, skill=item.skill, widest=GrantScope(item.widest_scope).label.lower()
        )
    if escalates and session_answer:
        return STANDING_ANSWER_REFUSED_MESSAGE.format(
            answer=answer.label, skill=item.skill, runtime=request.runtime.name
        )
    return ANSWER_NOT_OFFERED_MESSAGE.format(answer=answer.label, skill=item.skill)


def _answer_item(
    request: ApprovalRequest,
    item: ApprovalItem,
    answer: Answer,
    shape: policy.RequestShape,
    user: User,
    notes: list[str],
    pattern: str = "",
    on_claim: Callable[[], None] | None = None,
) -> ApprovalItem | None:
    """Write one item's answer: the grant, the item claimed pointing at it, the audit. An
    `on_claim` runs once the item is claimed, before the answer's own audit (the two-person
    rule's last allow records itself there, in the locks' order)."""
    now = timezone.now()
    if policy.stores_nothing(answer):
        return _deny_request_item(request, item, user, now)
    if answer == Answer.ALLOW_CALL:
        return _allow_call_item(request, item, user, now, on_claim)
    target = policy.grant_for_answer(answer, shape)
    origin = GrantOrigin.ESCALATION if target.escalated else GrantOrigin.ANSWER
    # The grant first, then the item claimed pointing at it, in one update: of two people
    # answering at once, one claim finds the item open, and the other's transaction rolls
    # back whatever its grant write did (_ClaimLost). Only while the request is still open:
    # an answer that loses a race with a cancel or an expiry must not write (an escalated
    # grant, above all). `decision` stays on the updated row itself (no join, which Django
    # would turn into an "id IN (subquery)" whose condition PostgreSQL does not re-check
    # after a lock wait).
    written = _write_grant(
        request=request, skill=item.skill, target=target, origin=origin, user=user, now=now, pattern=pattern
    )
    grant = written.grant
    decision = grant.decision
    still_open = Exists(
        ApprovalRequest.objects.filter(pk=OuterRef("request_id"), status=RequestStatus.PENDING)
    )
    claimed = ApprovalItem.objects.filter(still_open, pk=item.pk, decision="").update(
        decision=decision,
        scope=target.scope,
        answered_by=user,
        answered_at=now,
        pattern=pattern,
        grant=grant,
    )
    if claimed != 1:
        raise _ClaimLost
    if on_claim is not None:
        on_claim()
    if written.settled_by is not None:
        _audit_settled(request, item.skill, grant, answer, user)
        notes.append(_settled_note(item.skill, grant, answer))
    else:
        _audit_grant(request, item.skill, grant, target, user, written.superseded)
        if written.replaced is not None:
            notes.append(DENY_REPLACED_MESSAGE.format(skill=item.skill, who=_who(written.replaced)))
    _session_active(_holder_session(request, target.holder), now)
    # What the claim wrote, without reading the row back.
    item.decision, item.scope, item.answered_by, item.answered_at = decision, target.scope, user, now
    item.grant, item.pattern = grant, pattern
    return item


class _ClaimLost(Exception):
    """The item was answered (or its request closed) by someone else after this answer's
    grant was written: raised inside the item's transaction so the write rolls back."""


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
    still_open = Exists(
        ApprovalRequest.objects.filter(pk=OuterRef("request_id"), status=RequestStatus.PENDING)
    )
    claimed = ApprovalItem.objects.filter(still_open, pk=item.pk, decision="").update(
        decision=GrantDecision.ALLOW, scope=ItemScope.CALL, answered_by=user, answered_at=now
    )
    if claimed != 1:
        return None
    if on_claim is not None:
        on_claim()
    holder = request.session or request.invoking_session
    _session_active(holder, now)
    audit_record(
        action=AuditAction.TOOL_CALL_APPROVED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=holder.session_id if holder else "",
        subject_type="tool",
        subject=_grant_subject(request, item.skill, ""),
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
    item.decision, item.scope, item.answered_by, item.answered_at = (
        GrantDecision.ALLOW,
        ItemScope.CALL,
        user,
        now,
    )
    item.grant = None
    return item


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
    still_open = Exists(
        ApprovalRequest.objects.filter(pk=OuterRef("request_id"), status=RequestStatus.PENDING)
    )
    claimed = ApprovalItem.objects.filter(still_open, pk=item.pk, decision="").update(
        decision=GrantDecision.DENY, scope=ItemScope.REQUEST, answered_by=user, answered_at=now
    )
    if claimed != 1:
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
    item.decision, item.scope, item.answered_by, item.answered_at = (
        GrantDecision.DENY,
        ItemScope.REQUEST,
        user,
        now,
    )
    item.grant = None
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
        subject=_grant_subject(request, skill, grant.pattern),
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
    audit_record(
        action=action,
        actor=Actor.for_user(user),
        level=AuditLevel.WARNING if target.escalated else AuditLevel.INFO,
        runtime=request.runtime,
        session_key=session_key,
        subject_type="tool" if tool else "skill",
        subject=_grant_subject(request, skill, grant.pattern),
        details=details,
    )


def _close_if_complete(request: ApprovalRequest) -> dt.datetime | None:
    """S7: ANSWERED only once no skill is left without a concrete decision. Returns when
    this call closed it, or None: it did not (still open, or closed before).

    The request names whoever answered its last skill, not whoever's call closes it: the
    loser of a race on an item (or a retry after a crash) may close it, having answered
    nothing.
    """
    # One conditional UPDATE: still PENDING and no item left open, checked on the row it
    # updates (PostgreSQL re-checks both after a lock wait).
    items = ApprovalItem.objects.filter(request_id=OuterRef("pk"))
    last_answerer = (
        items.exclude(answered_by=None).order_by("-answered_at", "-position").values("answered_by")[:1]
    )
    now = timezone.now()
    closed = (
        ApprovalRequest.objects.filter(
            ~Exists(items.filter(decision="")), pk=request.pk, status=RequestStatus.PENDING
        ).update(
            status=RequestStatus.ANSWERED,
            answered_at=now,
            answered_by_id=Subquery(last_answerer),
            closed_at=now,
        )
        == 1
    )
    return now if closed else None


def _answers_in_hand(request: ApprovalRequest, closed_at: dt.datetime) -> bool:
    """Whether the request this call just closed can be shown as it is in memory: each of its
    items as it was read answered, or as this call answered it (or read it again after losing
    it). An item still open here was answered by someone else meanwhile: not in hand. When in
    hand, the request is given what the close wrote, its answerer from the same items."""
    items = list(request.items.all())
    if not all(item.answered for item in items):
        return False
    answerers = [item for item in items if item.answered_by_id is not None]
    last = max(answerers, key=lambda item: (item.answered_at, item.position), default=None)
    request.status, request.answered_at, request.closed_at = RequestStatus.ANSWERED, closed_at, closed_at
    request.answered_by_id = last.answered_by_id if last else None
    return True
