"""Requests (S4-S9): opening one, cancel and expiry (aborts deny per session)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from aimon_admin.approvals import policy, tool_answers, tool_policy, tool_rule_grammar, wakeups
from aimon_admin.approvals.choices import (
    GrantDecision,
    GrantOrigin,
    GrantScope,
    RequestKind,
    RequestStatus,
    SkillDecision,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest
from aimon_admin.approvals.services.decisions import SkillVerdict, skills_decide
from aimon_admin.approvals.services.errors import (
    ARGUMENTS_NUL_MESSAGE,
    REQUEST_CLOSED_MESSAGE,
    UNATTENDED_TOOL_REQUEST_MESSAGE,
    BadToolCallError,
    RequestClosedError,
    UnknownInvokingSessionError,
)
from aimon_admin.approvals.services.grants import GrantWrite, grant_subject, grant_write
from aimon_admin.approvals.services.sessions import session_active, session_lookup, session_touch
from aimon_admin.approvals.services.tool_decisions import tool_call_evaluate
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core import hooks, metrics
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

# --- Requests (S4-S9) --------------------------------------------------------------------------


@dataclass
class RequestInput:
    """A request to open: about `skills` (S4), or with `kind` TOOL about one call of `tool`
    (on MCP `server`, None for the runtime's own tool) with its exact `arguments` (U2)."""

    runtime: AgentRuntime
    skills: list[str]
    session_id: str | None = None
    invoking_session_id: str | None = None
    turn_id: str | None = None
    principal: str | None = None
    reason: str = ""
    timeout_seconds: int | None = None
    idempotency_key: str | None = None
    kind: RequestKind = RequestKind.SKILL
    tool: str = ""
    server: str | None = None
    arguments: dict[str, Any] | None = None


def request_shape(request: ApprovalRequest) -> policy.RequestShape:
    return policy.RequestShape(
        has_session=request.session_id is not None,
        has_invoking_session=request.invoking_session_id is not None,
        has_turn=bool(request.turn_id),
    )


def request_create(data: RequestInput) -> tuple[ApprovalRequest, bool]:
    """Open a request (or return the one this Idempotency-Key already opened: created False).

    Skills the chain already decides are filled in at once; if all are, the request is
    ANSWERED from the start. A tool call likewise: a call the tool chain decides is ANSWERED
    from the start (U2); an unattended one (no session, no invoking session) opens nothing
    (T8, U5: BadToolCallError).
    """
    if data.kind == RequestKind.TOOL:
        _tool_call_check(data)
    existing = _opened_already(data)
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            request = _request_create(data)
            if request.status == RequestStatus.PENDING:
                # Whoever listens (notifications: P1) hears of it once it commits; approvals
                # imports no listener (core.hooks).
                hooks.announce_after_commit(hooks.REQUEST_OPENED, request.pk)
                metrics.count_on_commit(metrics.REQUESTS_OPENED, request.kind)
            return request, True
    except IntegrityError:  # another call with the same key committed first
        existing = _opened_already(data)
        if existing is not None:
            return existing, False
        raise


def _opened_already(data: RequestInput) -> ApprovalRequest | None:
    """The request this runtime's Idempotency-Key already opened, if any."""
    if not data.idempotency_key:
        return None
    return ApprovalRequest.objects.filter(runtime=data.runtime, idempotency_key=data.idempotency_key).first()


def _request_create(data: RequestInput) -> ApprovalRequest:
    now = timezone.now()
    session = session_touch(runtime=data.runtime, session_id=data.session_id, principal=data.principal)
    # A fork inherits from a session the runtime has opened (S3): one never seen is refused
    # rather than created with nobody's approvals.
    if (
        data.invoking_session_id
        and session_lookup(runtime=data.runtime, session_id=data.invoking_session_id) is None
    ):
        raise UnknownInvokingSessionError(data.invoking_session_id)
    # A fork's session answers land on its invoking session, so the principal a fork names
    # is held to that session's, like any session's (S12, S13).
    invoking = session_touch(
        runtime=data.runtime,
        session_id=data.invoking_session_id,
        principal=data.principal if session is None else None,
    )
    principal = policy.effective_principal(
        data.principal,
        session.principal if session else None,
        invoking.principal if invoking else None,
    )
    timeout = data.timeout_seconds or settings.AIMON_REQUEST_DEFAULT_TIMEOUT_SECONDS
    common = {
        "runtime": data.runtime,
        "session": session,
        "invoking_session": invoking,
        "turn_id": data.turn_id or "",
        "principal": principal or "",
        "reason": data.reason,
        "idempotency_key": data.idempotency_key or "",
        "expires_at": now + dt.timedelta(seconds=timeout),
    }
    if data.kind == RequestKind.TOOL:
        return _tool_request_create(data, common, now)
    request = ApprovalRequest.objects.create(**common)
    verdicts = skills_decide(
        runtime=data.runtime,
        skills=data.skills,
        session=session,
        invoking_session=invoking,
        turn_id=data.turn_id,
    )
    items = [
        ApprovalItem(
            request=request,
            position=position,
            skill=verdict.skill,
            widest_scope=verdict.widest_scope,
            **_as_decided(verdict, now, verdict.approvers),
        )
        for position, verdict in enumerate(verdicts)
    ]
    ApprovalItem.objects.bulk_create(items)
    if all(item.decision for item in items):
        _answered_at_creation(request, now)
    return request


def _as_decided(
    verdict: SkillVerdict | tool_policy.ToolVerdict, now: dt.datetime, approvers: int
) -> dict[str, Any]:
    """An item's answer as the chain gave it: ALLOW or DENY at once, its source the layer;
    or, the chain asking, open for `approvers` people (P3)."""
    if verdict.decision == SkillDecision.ASK:
        return {"approvers": approvers}
    return {"approvers": 1, "decision": verdict.decision, "source": verdict.source, "answered_at": now}


def _answered_at_creation(request: ApprovalRequest, now: dt.datetime) -> None:
    request.status = RequestStatus.ANSWERED
    request.answered_at = now
    request.closed_at = now
    request.save(update_fields=["status", "answered_at", "closed_at"])


def _tool_call_check(data: RequestInput) -> None:
    """U2: a tool request names a session or an invoking session (an unattended call opens
    none, T8), and arguments fit to store and to digest. The API checks these first; this
    holds for every other caller."""
    if not data.session_id and not data.invoking_session_id:
        raise BadToolCallError(UNATTENDED_TOOL_REQUEST_MESSAGE, field="session_id")
    problems = tool_rule_grammar.tool_name_problems(data.tool)
    if problems:
        raise BadToolCallError(" ".join(problems), field="tool")
    arguments = data.arguments if data.arguments is not None else {}
    problem = tool_policy.arguments_problem(arguments)
    if problem is None and _holds_nul(arguments):
        problem = ARGUMENTS_NUL_MESSAGE
    if problem:
        raise BadToolCallError(problem, field="arguments")


def _holds_nul(value: Any) -> bool:
    """Whether parsed JSON holds a NUL character anywhere (PostgreSQL's jsonb and text refuse it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def _tool_request_create(data: RequestInput, common: dict[str, Any], now: dt.datetime) -> ApprovalRequest:
    """U2: the call, its digest and subject stored; its one item named after the tool, decided
    at once when the tool chain decides it (ALLOW or DENY, its source the layer)."""
    arguments = dict(data.arguments or {})
    decided = tool_call_evaluate(
        runtime=data.runtime,
        tool=data.tool,
        server=data.server,
        session=common["session"],
        invoking_session=common["invoking_session"],
        turn_id=data.turn_id,
        arguments=arguments,
    )
    request = ApprovalRequest.objects.create(
        **common,
        kind=RequestKind.TOOL,
        tool=data.tool,
        server=data.server or "",
        arguments=arguments,
        arguments_digest=decided.digest,
        subject_argument=decided.subject_argument,
        subject=decided.subject.value,
    )
    verdict = decided.verdict
    # P3: the rule that asks (none: the gate asks) says how many people must allow.
    approvers = verdict.rule.approvers if verdict.rule is not None else 1
    item = ApprovalItem.objects.create(
        request=request, position=0, skill=data.tool, **_as_decided(verdict, now, approvers)
    )
    if item.decision:
        _answered_at_creation(request, now)
    return request


class _AbortLost(Exception):
    """Raised inside an abort's transaction to roll it back: the request turned out no
    longer PENDING (answered meanwhile, or aborted by another call), or one skill's claim
    was lost to an answer after its denial was written."""


def _abort(request: ApprovalRequest, status: RequestStatus, actor: Actor, why: str) -> bool:
    """S9: close a PENDING request as `status`; each unanswered skill gets a SESSION DENY
    where a session can hold it, never agent-wide (a tool call: for its exact subject, else
    the whole tool). Returns False if it was not PENDING.

    Locks come in the order an answer takes them (item_answers.item_answer: the grant's key,
    the item, the audit chain, the session, the request), so an answer and an abort at the
    same moment wait for each other instead of deadlocking on PostgreSQL: first each
    skill's denial and its item claimed pointing at it, in skill order (two aborts sharing a
    session's keys take them alike); then the audit events; the request is closed last,
    and if it is no longer PENDING everything rolls back.
    """
    now = timezone.now()
    tool = request.kind == RequestKind.TOOL
    pattern = tool_answers.abort_pattern(request.subject) if tool else ""
    action = AuditAction.TOOL_ABORT_DENIED if tool else AuditAction.SKILL_ABORT_DENIED
    subject_type = "tool" if tool else "skill"
    target = policy.abort_target(request_shape(request))
    try:
        with transaction.atomic():
            open_items = list(request.items.filter(decision="").order_by("skill"))
            if target is None:
                denied: list[tuple[ApprovalItem, GrantWrite | None]] = [(item, None) for item in open_items]
            else:
                denied = [*_abort_deny(request, open_items, target, now, pattern)]
            for item, written in denied:
                session = written.grant.session if written else None
                details: dict[str, Any] = {
                    "request_id": str(request.pk),
                    "why": why,
                    "written": written is not None,
                }
                if written is None:
                    details["note"] = "no session to hold a denial; the skill stays ASK (never agent-wide)"
                else:
                    details["grant_id"] = written.grant.pk
                    if tool:
                        details |= {"pattern": pattern, "arguments_digest": request.arguments_digest}
                    if written.superseded:
                        details["superseded_grant_ids"] = written.superseded
                audit_record(
                    action=action,
                    actor=actor,
                    runtime=request.runtime,
                    session_key=session.session_id if session else "",
                    subject_type=subject_type,
                    subject=grant_subject(request, item.skill, pattern),
                    details=details,
                )
                session_active(session, now)
            closed = ApprovalRequest.objects.filter(pk=request.pk, status=RequestStatus.PENDING).update(
                status=status, closed_at=now
            )
            if closed != 1:
                raise _AbortLost
    except _AbortLost:
        return False
    closed_count = metrics.REQUESTS_EXPIRED if status == RequestStatus.EXPIRED else metrics.REQUESTS_CANCELLED
    metrics.count_on_commit(closed_count, request.kind)
    wakeups.publish_after_commit(request.pk)
    return True


def _abort_deny(
    request: ApprovalRequest,
    items: list[ApprovalItem],
    target: policy.GrantTarget,
    now: dt.datetime,
    pattern: str,
) -> list[tuple[ApprovalItem, GrantWrite]]:
    """S9: each open item's session DENY written, then the item claimed pointing at it, as an
    answer writes its grant and claims. An item a person's answer claimed first keeps that
    answer: the denial (and whatever it superseded, the answer's grant perhaps) rolls back."""
    denied = []
    for item in items:
        try:
            with transaction.atomic():
                written = grant_write(
                    request=request,
                    skill=item.skill,
                    target=target,
                    origin=GrantOrigin.ABORT,
                    user=None,
                    now=now,
                    settle=False,
                    pattern=pattern,
                )
                claimed = ApprovalItem.objects.filter(pk=item.pk, decision="").update(
                    decision=GrantDecision.DENY,
                    scope=GrantScope.SESSION,
                    answered_at=now,
                    pattern=pattern,
                    grant=written.grant,
                )
                if claimed != 1:
                    raise _AbortLost
        except _AbortLost:
            continue
        denied.append((item, written))
    return denied


def request_cancel(*, request: ApprovalRequest, actor: Actor, why: str = "cancelled by the runtime") -> None:
    """The runtime cancels, or a person dismisses: S9. A closed request raises."""
    request = ApprovalRequest.objects.select_related("runtime", "session", "invoking_session").get(
        pk=request.pk
    )
    request_expire_if_due(request)
    if not _abort(request, RequestStatus.CANCELLED, actor, why):
        request.refresh_from_db()
        raise RequestClosedError(REQUEST_CLOSED_MESSAGE.format(status=request.status.lower()))


def request_expire_if_due(request: ApprovalRequest) -> bool:
    """Every read treats an expired request as aborted (S9): close it now if it is due."""
    if request.status != RequestStatus.PENDING or request.expires_at > timezone.now():
        return False
    expired = _abort(request, RequestStatus.EXPIRED, Actor.system("request-expiry"), "timed out")
    if expired:
        request.refresh_from_db()
    return expired


def requests_expire_due(*, limit: int = 500, among: QuerySet[ApprovalRequest] | None = None) -> int:
    """Expire requests past their deadline (S9): the beat task's sweep over all of them, or
    the inbox's over the requests it is about to show (`among`)."""
    requests = ApprovalRequest.objects.all() if among is None else among
    due = requests.filter(status=RequestStatus.PENDING, expires_at__lte=timezone.now()).select_related(
        "runtime", "session", "invoking_session"
    )[:limit]
    return sum(1 for request in due if request_expire_if_due(request))
