"""U4 exactly once: two tool decisions presenting one *Allow this call* at the same moment get
one ALLOW between them (PostgreSQL, where rows are really locked: two threads race in this
process, each on its own connection, round after round)."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer, RequestKind
from aimon_admin.approvals.services import (
    RequestInput,
    ToolCall,
    ToolCallDecision,
    request_answer,
    request_create,
    tool_call_decide,
)
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR

ROUNDS = 15
USES = 3  # each round, this many decisions present the same approval at once
ARGUMENTS = {"command": "git push origin main"}


def use_at_once(
    runtime: AgentRuntime, approval_id: uuid.UUID, session_id: str
) -> list[ToolCallDecision | Exception]:
    start = threading.Barrier(USES)
    results: list[ToolCallDecision | Exception] = []

    def use() -> None:
        try:
            start.wait(timeout=30)
            results.append(
                tool_call_decide(
                    runtime,
                    ToolCall(
                        tool="Bash", session_id=session_id, arguments=ARGUMENTS, approval_id=approval_id
                    ),
                )
            )
        except Exception as exc:  # reported by the caller, never swallowed
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=use) for _ in range(USES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a decision hung"
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_uses_of_one_call_approval_give_exactly_one_allow(
    runtime: AgentRuntime, approver: User
) -> None:  # U4
    local_tools_replace(runtime=runtime, tools=[{"name": "Bash"}], actor=TEST_ACTOR)
    ToolSubject.objects.create(server="", tool="Bash", argument="command")
    for number in range(ROUNDS):
        session_id = f"s-{number}"
        request, _ = request_create(
            RequestInput(
                runtime=runtime,
                skills=[],
                kind=RequestKind.TOOL,
                tool="Bash",
                arguments=ARGUMENTS,
                session_id=session_id,
                principal="alice",
            )
        )
        request_answer(request=request, user=approver, answer=Answer.ALLOW_CALL)

        results = use_at_once(runtime, request.pk, session_id)

        errors = [r for r in results if isinstance(r, Exception)]
        assert not errors, errors
        decisions = sorted(r.verdict.decision.value for r in results if isinstance(r, ToolCallDecision))
        assert decisions == ["ALLOW"] + ["ASK"] * (USES - 1), number
        used = AuditEvent.objects.filter(
            action=AuditAction.TOOL_CALL_APPROVAL_USED, details__request_id=str(request.pk)
        )
        assert used.count() == 1
