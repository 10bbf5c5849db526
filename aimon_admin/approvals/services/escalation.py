"""Requests nobody answered in time (P2): sent to the operators and the runtime's owner.

A runtime may say how long a request may wait (`AgentRuntime.escalate_after_seconds`, None:
never). A request still PENDING that long after it opened is marked once, `escalated_at`,
by a conditional UPDATE (so two sweeps on two nodes, or a sweep and a read, mark it once),
its REQUEST_ESCALATED event written in the same transaction, and announced through
core.hooks after the commit: notifications then tells the operators and the owner through
their channels. Found by beat's notifications sweep, and on sight by the reads that show
requests (the inbox, a request's page, a runtime's long-poll), as expiry is (S9): under
`make run` no beat runs.

Not S6's escalation (a session answer made agent-wide, SKILL_GRANT_ESCALATED): this one
changes no answer and writes no grant.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from aimon_admin.approvals.choices import RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core import hooks, metrics
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

ESCALATOR = Actor.system("request-escalation")
SUBJECT_TYPE = "approval_request"


def _is_tool(request: ApprovalRequest) -> bool:
    return request.kind == RequestKind.TOOL


def escalation_due_at(request: ApprovalRequest) -> dt.datetime | None:
    """When `request` is sent to the operators if still unanswered (None: its runtime never)."""
    after = request.runtime.escalate_after_seconds
    return None if after is None else request.created_at + dt.timedelta(seconds=after)


def request_escalate_if_due(request: ApprovalRequest, *, now: dt.datetime | None = None) -> bool:
    """Mark `request` escalated if it is still pending past its runtime's time and was not
    marked yet; True when this call marked it (and wrote its event). Reads nothing when it
    is not due."""
    now = now or timezone.now()
    due_at = escalation_due_at(request)
    if (
        due_at is None
        or due_at > now
        or request.status != RequestStatus.PENDING
        or request.escalated_at is not None
        or request.expires_at <= now
    ):
        return False
    with transaction.atomic():
        marked = ApprovalRequest.objects.filter(
            pk=request.pk, status=RequestStatus.PENDING, escalated_at__isnull=True, expires_at__gt=now
        ).update(escalated_at=now)
        if marked != 1:
            return False
        waited = int((now - request.created_at).total_seconds())
        audit_record(
            action=AuditAction.REQUEST_ESCALATED,
            actor=ESCALATOR,
            level=AuditLevel.WARNING,
            runtime=request.runtime,
            subject_type=SUBJECT_TYPE,
            subject=str(request.pk),
            details={
                "request_id": str(request.pk),
                "kind": request.kind,
                **({"tool": request.tool, "server": request.server} if _is_tool(request) else {}),
                "principal": request.principal,
                "escalate_after_seconds": request.runtime.escalate_after_seconds,
                "waited_seconds": waited,
                "expires_at": request.expires_at.isoformat(),
            },
        )
        hooks.announce_after_commit(hooks.REQUEST_ESCALATED, request.pk)
        metrics.count_on_commit(metrics.REQUESTS_ESCALATED, request.kind)
    request.escalated_at = now
    return True


def requests_escalate_due(*, limit: int = 500, among: QuerySet[ApprovalRequest] | None = None) -> int:
    """Escalate every request past its runtime's time (the sweep), or those of `among` (a
    page about to show them); returns how many this call marked."""
    now = timezone.now()
    waits = list(
        AgentRuntime.objects.filter(escalate_after_seconds__isnull=False).values_list(
            "pk", "escalate_after_seconds"
        )
    )
    if not waits:
        return 0
    due = Q()
    for runtime_id, after in waits:
        due |= Q(runtime_id=runtime_id, created_at__lte=now - dt.timedelta(seconds=after))
    requests = ApprovalRequest.objects.all() if among is None else among
    rows = (
        requests.filter(due, status=RequestStatus.PENDING, escalated_at__isnull=True, expires_at__gt=now)
        .select_related("runtime")
        .order_by("created_at")[:limit]
    )
    return sum(1 for request in rows if request_escalate_if_due(request, now=now))
