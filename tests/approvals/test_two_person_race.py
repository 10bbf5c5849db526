"""The two-person rule under concurrency (P3): two people giving allows at the same instant
produce exactly one grant, written with the last allow needed.

On PostgreSQL two threads race in this process; on SQLite they race in a new process on a
database file (as tests/approvals/test_races.py does, and for the same reason).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalAllow, ApprovalItem, ApprovalRequest, Grant
from aimon_admin.approvals.services import (
    AnswerOutcome,
    RequestClosedError,
    RequestInput,
    request_answer,
    request_create,
)
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process, run_in_new_process

ROUNDS = 10
RACERS = ("oscar", "otto")


def race(request: ApprovalRequest) -> dict[str, AnswerOutcome | Exception]:
    """Both racers allow `request` for the session at the same moment, each on its own connection."""
    start = threading.Barrier(len(RACERS))
    results: dict[str, AnswerOutcome | Exception] = {}

    def allow(username: str) -> None:
        try:
            user = User.objects.get(username=username)
            start.wait(timeout=30)
            results[username] = request_answer(request=request, user=user, answer=Answer.ALLOW_SESSION)
        except Exception as exc:  # reported by the caller, never swallowed
            results[username] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=allow, args=(name,)) for name in RACERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an allow hung"
    return results


def check_round(
    request: ApprovalRequest, results: dict[str, AnswerOutcome | Exception], *, first: bool
) -> str:
    """Exactly one grant, the request answered once, and each racer told what became of its allow."""
    for result in results.values():
        if isinstance(result, Exception) and not isinstance(result, RequestClosedError):
            raise result
    outcomes = {name: r for name, r in results.items() if isinstance(r, AnswerOutcome)}
    winners = [name for name, r in outcomes.items() if r.written]
    assert len(winners) == 1, results
    [winner] = winners
    [grant] = Grant.objects.filter(request=request)
    assert grant.granted_by.username == winner
    item = ApprovalItem.objects.get(request=request)
    assert (item.decision, item.grant_id, item.allows_given) == ("ALLOW", grant.pk, 2)
    assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.ANSWERED
    granted = AuditEvent.objects.filter(action=AuditAction.SKILL_GRANTED)
    assert [e.details["grant_id"] for e in granted if e.details["request_id"] == str(request.pk)] == [
        grant.pk
    ]
    allowed = list(ApprovalAllow.objects.filter(item=item).values_list("user__username", flat=True))
    [loser] = [name for name in RACERS if name != winner]
    lost = results[loser]
    if first:
        # Both were among the first two allows needed: both count, the later one writes the grant.
        assert isinstance(lost, AnswerOutcome)
        assert lost.allows_recorded == [(item.skill, 1, 2)]
        assert sorted(allowed) == sorted(RACERS)
        return "recorded"
    # Both gave the last allow needed: one counts, the other finds it answered (or closed).
    assert sorted(allowed) == sorted(["olivia", winner])
    if isinstance(lost, RequestClosedError):
        return "closed"
    assert not lost.written
    assert [seen.skill for seen in lost.already_answered] == [item.skill]
    return "already_answered"


def run_rounds(runtime: AgentRuntime, rounds: int) -> dict[str, int]:
    olivia = User.objects.get(username="olivia")
    told: Counter[str] = Counter()
    for number in range(rounds):
        # The last two allows at once: olivia allowed first, then the racers both give the second.
        request, _ = request_create(
            RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{number}", principal="alice")
        )
        request_answer(request=request, user=olivia, answer=Answer.ALLOW_SESSION)
        told[f"last:{check_round(request, race(request), first=False)}"] += 1
        # The first two allows at once: exactly one of them sees the count reach two.
        request, _ = request_create(
            RequestInput(runtime=runtime, skills=["deploy"], session_id=f"t-{number}", principal="alice")
        )
        told[f"first:{check_round(request, race(request), first=True)}"] += 1
    assert told["first:recorded"] == rounds
    assert audit_verify_chain()[1] is None
    return dict(told)


@pytest.fixture
def two_person_rule(make_user: Callable[..., User]) -> None:
    make_user("alice", Role.APPROVER)
    for name in ("olivia", *RACERS):
        make_user(name, Role.OPERATOR)
    rules.rule_create(pattern="deploy", action=RuleAction.ASK, approvers=2, actor=Actor.system("test"))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_people_allowing_at_once_make_exactly_one_grant_on_postgresql(
    runtime: AgentRuntime, two_person_rule: None
) -> None:  # P3: concurrent clicks from two people produce exactly one grant
    told = run_rounds(runtime, ROUNDS)

    assert sum(told.values()) == 2 * ROUNDS
    assert Grant.objects.count() == 2 * ROUNDS


RACE_IN_A_NEW_PROCESS = """
import json
import sys

import django

django.setup()

from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.test_two_person_race import run_rounds

told = run_rounds(AgentRuntime.objects.get(name=sys.argv[1]), int(sys.argv[2]))
print("TOLD " + json.dumps(told))
"""


@pytest.mark.django_db(transaction=True)
def test_two_people_allowing_at_once_make_exactly_one_grant_in_a_new_process(
    runtime: AgentRuntime, two_person_rule: None, tmp_path: Path
) -> None:  # P3, on a database file (SQLite) or the test database (PostgreSQL)
    child = run_in_new_process(
        ["-c", RACE_IN_A_NEW_PROCESS, runtime.name, str(ROUNDS)], database_for_new_process()
    )

    assert child.returncode == 0, child.stderr[-4000:]
    [line] = [line for line in child.stdout.splitlines() if line.startswith("TOLD ")]
    told = json.loads(line.removeprefix("TOLD "))
    assert sum(told.values()) == 2 * ROUNDS
    assert told["first:recorded"] == ROUNDS
