"""The two-person rule (P3): an item whose rule needs two or three people, each distinct
person's allow counted and audited as it comes, the grant written with the last one needed
(through the ordinary item answer, in the same transaction)."""

from __future__ import annotations

from django.db import IntegrityError, connection, transaction

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy
from aimon_admin.approvals.choices import (
    Answer,
    RequestKind,
    RequestStatus,
)
from aimon_admin.approvals.models import ApprovalAllow, ApprovalItem, ApprovalRequest
from aimon_admin.approvals.services.errors import (
    ALLOW_MUST_MATCH_MESSAGE,
    ALREADY_ALLOWED_MESSAGE,
    OWN_REQUEST_ALLOW_MESSAGE,
    AllowRefusedError,
    NotAllowedError,
)
from aimon_admin.approvals.services.grants import grant_subject
from aimon_admin.approvals.services.item_answers import item_answer
from aimon_admin.approvals.services.outcomes import AnswerOutcome, ClaimLost
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor

ALLOW_ANSWERS = frozenset({Answer.ALLOW_CALL, Answer.ALLOW_ONCE, Answer.ALLOW_SESSION, Answer.ALLOW_AGENT})


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


def allow_check(
    *, request: ApprovalRequest, user: User, answer: Answer, pattern: str, items: list[ApprovalItem]
) -> None:
    """P3, before anything is written: the request's own principal never counts, a person
    allows once, and a later allow gives the same answer and pattern as the first. Raises
    NotAllowedError, saying which, for the first of `items` (each needing several people) it
    refuses."""
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


def item_allow(
    *,
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
            raise ClaimLost
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
    written = item_answer(
        request=request,
        item=item,
        answer=answer,
        shape=shape,
        user=user,
        notes=outcome.notes,
        pattern=pattern,
        on_claim=record,
    )
    if written is None:  # answered by someone else, or the request closed
        raise ClaimLost
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
        raise AllowRefusedError(
            ALREADY_ALLOWED_MESSAGE.format(skill=item.skill, given=given - 1, needed=item.approvers)
        ) from exc
    # Read after the lock: every allow committed before ours is seen here.
    records = list(
        ApprovalAllow.objects.filter(item=item).select_related("user").order_by("created_at", "id")
    )
    first = records[0]
    if (first.answer, first.pattern) != (answer, pattern):
        raise AllowRefusedError(_mismatch(item, first))
    holder = request.session or request.invoking_session
    tool = request.kind == RequestKind.TOOL
    audit_record(
        action=AuditAction.APPROVAL_ALLOW_RECORDED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=holder.session_id if holder else "",
        subject_type="tool" if tool else "skill",
        subject=grant_subject(request, item.skill, pattern),
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
