"""A person's answer (S4-S8, S13): who may give which answer, the grant it writes, and
closing the request (S7)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from django.db import transaction
from django.db.models import Exists, OuterRef, Prefetch, Subquery
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import policy, selectors, tool_answers, wakeups
from aimon_admin.approvals.choices import (
    Answer,
    GrantScope,
    RequestKind,
    RequestStatus,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest
from aimon_admin.approvals.services.errors import (
    ANSWER_NOT_OFFERED_MESSAGE,
    CAPPED_ANSWER_MESSAGE,
    NOT_YOURS_MESSAGE,
    REQUEST_CLOSED_MESSAGE,
    STANDING_ANSWER_REFUSED_MESSAGE,
    AllowRefusedError,
    ApprovalError,
    NotAllowedError,
    RequestClosedError,
)
from aimon_admin.approvals.services.item_answers import item_answer
from aimon_admin.approvals.services.outcomes import AnswerOutcome, ClaimLost
from aimon_admin.approvals.services.requests import (
    request_expire_if_due,
    request_shape,
)
from aimon_admin.approvals.services.two_person import ALLOW_ANSWERS, allow_check, item_allow
from aimon_admin.core import metrics
from aimon_admin.runtimes.models import AgentRuntime

logger = logging.getLogger(__name__)


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
    if request.kind == RequestKind.TOOL and patterns is None:
        patterns = selectors.tool_call_patterns(request=request)
    return _offered(
        request, item, request_shape(request), user_may_grant_agent(user, request.runtime), patterns
    )


def _offered(
    request: ApprovalRequest,
    item: ApprovalItem,
    shape: policy.RequestShape,
    may_grant_agent: bool,
    patterns: selectors.ToolCallPatterns | None,
) -> list[Answer]:
    """`answers_for`, from what the caller has already worked out once for every item."""
    if request.kind == RequestKind.TOOL:
        assert patterns is not None  # nosec B101 # narrows the type: read first for a tool request
        return tool_answers.tool_answers_offered(
            shape, may_grant_agent=may_grant_agent, allow_patterns=patterns.allow
        )
    return policy.answers_offered(shape, may_grant_agent=may_grant_agent, widest_scope=item.widest_scope)


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
    # The request as it stands now, read here whatever the caller holds: its status decides
    # (S7, S9), and the card is shown from it when this call closes it.
    request = (
        ApprovalRequest.objects.select_related("runtime", "session", "invoking_session")
        .prefetch_related(Prefetch("items", queryset=selectors.request_items()))
        .get(pk=request.pk)
    )
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
    may_grant_agent = user_may_grant_agent(user, request.runtime)
    for item in chosen:
        if item.answered:
            outcome.already_answered.append(item)
            continue
        if answer not in _offered(request, item, shape, may_grant_agent, patterns):
            raise NotAllowedError(_refusal(request, item, answer, shape))
    chosen_pattern = ""
    if patterns is not None:
        try:
            chosen_pattern = tool_answers.answer_pattern(
                answer, pattern, allow=patterns.allow, deny=patterns.deny
            )
        except ValueError as exc:  # a pattern the request does not offer (U3)
            raise NotAllowedError(str(exc)) from exc
    open_items = [item for item in chosen if not item.answered]
    # P3: items whose rule needs several people to allow, when this answer is an allow.
    several = {item.pk for item in open_items if item.needs_several and answer in ALLOW_ANSWERS}
    if several:
        allow_check(
            request=request,
            user=user,
            answer=answer,
            pattern=chosen_pattern,
            items=[i for i in open_items if i.pk in several],
        )
    closed_at: dt.datetime | None = None
    for position, item in enumerate(open_items):
        last = position == len(open_items) - 1
        lost = False
        try:
            with transaction.atomic():
                if item.pk in several:
                    written = item_allow(
                        request=request,
                        item=item,
                        answer=answer,
                        shape=shape,
                        user=user,
                        outcome=outcome,
                        pattern=chosen_pattern,
                    )
                else:
                    written = item_answer(
                        request=request,
                        item=item,
                        answer=answer,
                        shape=shape,
                        user=user,
                        notes=outcome.notes,
                        pattern=chosen_pattern,
                    )
                # The last write closes the request in its own transaction when nothing is
                # left open (S7 holds: every grant is written by then), saving a commit on
                # the path from the click to the waiting runtime.
                if last and written is not None:
                    closed_at = _close_if_complete(request)
        except ClaimLost:
            written, lost = None, True
        except AllowRefusedError as exc:  # P3: lost a race to another person's different allow
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
    if closed_at is not None:
        waited = (closed_at - request.created_at).total_seconds()
        metrics.request_answered_on_commit(request.kind, waited)
    if closed_at is not None and not outcome.failed and _answers_in_hand(request, closed_at):
        outcome.request = request
    if outcome.written or outcome.request_answered or outcome.allows_recorded:
        wakeups.publish_after_commit(request.pk)
    return outcome


def _refusal(request: ApprovalRequest, item: ApprovalItem, answer: Answer, shape: policy.RequestShape) -> str:
    """Why an answer not offered is refused, and what to do instead."""
    escalates = shape.escalates
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
