"""Exactly once: two sweeps on two nodes escalating the same requests at once (P2).

Each request past its runtime's time is marked by a conditional UPDATE of `escalated_at`;
of two sweeps that both read it as due, one marks it and writes its event, the other finds
it marked. On PostgreSQL two threads race in this process, each on its own connection.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection
from django.utils import timezone

from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.approvals.services.escalation import requests_escalate_due
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.runtimes.models import AgentRuntime

REQUESTS = 12
SWEEPS = 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_escalate_each_request_once_on_postgresql(runtime: AgentRuntime) -> None:  # P2
    AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=60)
    for number in range(REQUESTS):
        request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{number}"))
    ApprovalRequest.objects.update(created_at=timezone.now() - dt.timedelta(minutes=5))

    start = threading.Barrier(SWEEPS)
    marked: list[int | Exception] = []

    def sweep() -> None:
        try:
            start.wait(timeout=30)
            marked.append(requests_escalate_due())
        except Exception as exc:  # reported below, never swallowed
            marked.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(SWEEPS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a sweep hung"

    assert not [m for m in marked if isinstance(m, Exception)], marked
    assert sum(marked) == REQUESTS  # type: ignore[arg-type]
    assert not ApprovalRequest.objects.filter(escalated_at__isnull=True).exists()
    events = AuditEvent.objects.filter(action=AuditAction.REQUEST_ESCALATED)
    assert events.count() == REQUESTS
    assert sorted(events.values_list("subject", flat=True)) == sorted(
        str(pk) for pk in ApprovalRequest.objects.values_list("pk", flat=True)
    )
    assert audit_verify_chain()[1] is None
