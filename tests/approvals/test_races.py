"""Exactly once: two people answering the same item at once (S7, S13).

One answer wins; the other is told who answered and how; the request is answered once;
one grant and one audit event per item. On PostgreSQL two threads race in this process;
on SQLite they race in a new process on a database file (Django's in-memory shared-cache
test database fails a second writer at once instead of letting it wait, unlike the file
the product runs on) — the approach of tests/audit/test_concurrency.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection, transaction

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals.choices import Answer, GrantScope, RequestStatus
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant
from aimon_admin.approvals.services import (
    AnswerOutcome,
    RequestClosedError,
    RequestInput,
    request_answer,
    request_create,
)
from aimon_admin.approvals.services.errors import SETTLED_SAME_MESSAGE
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process, run_in_new_process

ROUNDS = 20
# The operator allows for the session, the principal denies: the winner's answer is visible.
CONTENDERS = (("olivia", Answer.ALLOW_SESSION, "ALLOW"), ("alice", Answer.DENY, "DENY"))


def race(request: ApprovalRequest, skills: list[str] | None) -> dict[str, AnswerOutcome | Exception]:
    """Both contenders answer `request` at the same moment, each on its own connection."""
    start = threading.Barrier(len(CONTENDERS))
    results: dict[str, AnswerOutcome | Exception] = {}

    def answer(username: str, button: Answer) -> None:
        try:
            user = User.objects.get(username=username)
            start.wait(timeout=30)
            results[username] = request_answer(request=request, user=user, answer=button, skills=skills)
        except Exception as exc:  # reported by the caller, never swallowed
            results[username] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=answer, args=(name, button)) for name, button, _ in CONTENDERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an answer hung"
    return results


def check_one_round(
    request: ApprovalRequest, skill: str, results: dict[str, AnswerOutcome | Exception], *, whole: bool
) -> str:
    """Exactly one winner, and what the loser was told; returns how the loser learned it."""
    for result in results.values():
        if isinstance(result, Exception) and not isinstance(result, RequestClosedError):
            raise result
    winners = [name for name, r in results.items() if isinstance(r, AnswerOutcome) and r.written]
    assert len(winners) == 1, results
    [winner] = winners
    [loser] = [name for name in results if name != winner]
    decision = {name: d for name, _, d in CONTENDERS}[winner]

    row = ApprovalItem.objects.select_related("answered_by", "grant").get(request=request, skill=skill)
    assert (row.answered_by.username, row.decision, row.scope) == (winner, decision, GrantScope.SESSION)
    [grant] = Grant.objects.filter(request=request, skill=skill)  # one grant, none superseded
    assert (grant.pk, grant.decision, grant.granted_by.username, grant.revoked_at) == (
        row.grant.pk,
        decision,
        winner,
        None,
    )
    events = AuditEvent.objects.filter(action=AuditAction.SKILL_GRANTED, subject=skill)
    assert [e.details["request_id"] for e in events] == [str(request.pk)]
    assert events.get().actor_label == winner

    lost = results[loser]
    if isinstance(lost, RequestClosedError):  # came after the request was closed: told so
        assert whole, "a request with a skill left open cannot be closed"
        told = "closed"
    else:
        assert not lost.written
        assert not lost.failed
        [seen] = lost.already_answered  # told who answered and how
        assert (seen.skill, seen.answered_by.username, seen.decision, seen.scope) == (
            skill,
            winner,
            decision,
            GrantScope.SESSION,
        )
        told = "already_answered"

    fresh = ApprovalRequest.objects.select_related("answered_by").get(pk=request.pk)
    if whole:  # the request had this one skill: answered once, naming the winner
        assert fresh.status == RequestStatus.ANSWERED
        assert fresh.answered_by.username == winner
        closers = [r for r in results.values() if isinstance(r, AnswerOutcome) and r.request_answered]
        assert len(closers) == 1
    else:
        assert fresh.status == RequestStatus.PENDING
    return told


def run_rounds(runtime: AgentRuntime, rounds: int) -> dict[str, int]:
    """Fresh requests raced over and over; returns how often each way of losing happened."""
    told: Counter[str] = Counter()
    for number in range(rounds):
        # A one-skill request, both answering it whole: the loser may find it already closed.
        skill = f"deploy-{number}"
        request, _ = request_create(
            RequestInput(runtime=runtime, skills=[skill], session_id=f"s-{number}", principal="alice")
        )
        told[f"whole:{check_one_round(request, skill, race(request, None), whole=True)}"] += 1
        # A two-skill request, both answering the same skill: the loser always gets the report.
        skill = f"notify-{number}"
        request, _ = request_create(
            RequestInput(
                runtime=runtime, skills=[skill, "other"], session_id=f"s-{number}", principal="alice"
            )
        )
        told[f"one:{check_one_round(request, skill, race(request, [skill]), whole=False)}"] += 1
    assert told["one:already_answered"] == rounds
    assert audit_verify_chain()[1] is None
    return dict(told)


@pytest.fixture
def contenders(make_user: Callable[..., User]) -> None:
    make_user("olivia", Role.OPERATOR)
    make_user("alice", Role.APPROVER)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_people_answering_the_same_item_at_once_on_postgresql(
    runtime: AgentRuntime, contenders: None
) -> None:  # S7, S13: exactly once
    told = run_rounds(runtime, ROUNDS)

    assert sum(told.values()) == 2 * ROUNDS
    assert Grant.objects.count() == 2 * ROUNDS


RACE_IN_A_NEW_PROCESS = """
import json
import sys

import django

django.setup()

from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.test_races import run_rounds

told = run_rounds(AgentRuntime.objects.get(name=sys.argv[1]), int(sys.argv[2]))
print("TOLD " + json.dumps(told))
"""


@pytest.mark.django_db(transaction=True)
def test_two_people_answering_the_same_item_at_once_in_a_new_process(
    runtime: AgentRuntime, contenders: None, tmp_path: Path
) -> None:  # S7, S13: exactly once, on a database file (SQLite) or the test database (PostgreSQL)
    child = run_in_new_process(
        ["-c", RACE_IN_A_NEW_PROCESS, runtime.name, str(ROUNDS)], database_for_new_process()
    )

    assert child.returncode == 0, child.stderr[-4000:]
    [line] = [line for line in child.stdout.splitlines() if line.startswith("TOLD ")]
    told = json.loads(line.removeprefix("TOLD "))
    assert sum(told.values()) == 2 * ROUNDS
    assert told["one:already_answered"] == ROUNDS


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_people_answering_different_skills_at_once_close_the_request(
    runtime: AgentRuntime, contenders: None
) -> None:  # S7: once every skill is answered the request is ANSWERED, however the answers interleave
    for number in range(ROUNDS):
        request, _ = request_create(
            RequestInput(
                runtime=runtime, skills=["deploy", "notify"], session_id=f"s-{number}", principal="alice"
            )
        )
        start = threading.Barrier(2)
        results: dict[str, AnswerOutcome | Exception] = {}

        def answer(
            username: str,
            skill: str,
            request: ApprovalRequest = request,
            start: threading.Barrier = start,
            results: dict[str, AnswerOutcome | Exception] = results,
        ) -> None:
            try:
                user = User.objects.get(username=username)
                start.wait(timeout=30)
                results[username] = request_answer(
                    request=request, user=user, answer=Answer.ALLOW_SESSION, skills=[skill]
                )
            except Exception as exc:  # reported below, never swallowed
                results[username] = exc
            finally:
                connection.close()

        threads = [
            threading.Thread(target=answer, args=("olivia", "deploy")),
            threading.Thread(target=answer, args=("alice", "notify")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert all(isinstance(r, AnswerOutcome) and len(r.written) == 1 for r in results.values()), results
        assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.ANSWERED
        assert sum(r.request_answered for r in results.values()) == 1  # type: ignore[union-attr]


# --- Two requests for the same session and skill, answered at once (S2) ---------------------------

SAME_KEY_ROUNDS = 20


def answer_in_thread(
    request: ApprovalRequest, username: str, button: Answer, start: threading.Barrier | None, results: dict
) -> threading.Thread:
    def run() -> None:
        try:
            user = User.objects.get(username=username)
            if start is not None:
                start.wait(timeout=30)
            results[username] = request_answer(request=request, user=user, answer=button)
        except Exception as exc:  # reported by the caller, never swallowed
            results[username] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def settled_events() -> int:
    return AuditEvent.objects.filter(action=AuditAction.SKILL_ANSWER_SETTLED).count()


def check_same_key_round(
    first: ApprovalRequest, second: ApprovalRequest, results: dict, *, deny: bool, settled_before: int
) -> None:
    """Both requests settled, never an SQL message, one grant in force for the key (a DENY if
    either answer was one: S2); with two ALLOWs, one wrote the grant and the other is
    answered by it."""
    for name, result in results.items():
        assert isinstance(result, AnswerOutcome), (name, result)
        assert not result.failed, (name, result.failed)
        assert [i.skill for i in result.written] == ["deploy"]
    for request in (first, second):
        assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.ANSWERED
    [grant] = Grant.objects.filter(session=first.session, skill="deploy", revoked_at=None)
    assert grant.decision == ("DENY" if deny else "ALLOW")
    items = {i.request_id: i for i in ApprovalItem.objects.filter(request__in=[first, second])}
    if deny:  # alice denied the second: it reads DENY, whichever committed first
        assert items[second.pk].decision == "DENY"
    else:
        assert {items[first.pk].grant_id, items[second.pk].grant_id} == {grant.pk}
        assert settled_events() == settled_before + 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deny", [False, True], ids=["both-allow", "allow-and-deny"])
def test_two_requests_for_the_same_key_answered_at_once_both_settle_on_postgresql(
    runtime: AgentRuntime, contenders: None, deny: bool
) -> None:  # S2, S7: never "duplicate key value violates unique constraint", never stuck
    for number in range(SAME_KEY_ROUNDS):
        data = RequestInput(runtime=runtime, skills=["deploy"], session_id=f"k-{number}", principal="alice")
        first, _ = request_create(data)
        second, _ = request_create(data)
        settled_before = settled_events()
        start = threading.Barrier(2)
        results: dict = {}
        second_button = Answer.DENY if deny else Answer.ALLOW_SESSION
        threads = [
            answer_in_thread(first, "olivia", Answer.ALLOW_SESSION, start, results),
            answer_in_thread(second, "alice", second_button, start, results),
        ]
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads), "an answer hung"
        check_same_key_round(first, second, results, deny=deny, settled_before=settled_before)
    assert audit_verify_chain()[1] is None


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_answer_whose_grant_insert_meets_a_concurrent_one_settles_on_it_deterministically(
    runtime: AgentRuntime, contenders: None
) -> None:  # S2, S7: the exact interleaving of the fault run, forced
    data = RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1", principal="alice")
    first, _ = request_create(data)
    second, _ = request_create(data)
    inserted, commit = threading.Event(), threading.Event()

    def first_answer_in_flight() -> None:
        # The first answer's transaction: its grant inserted, not yet committed.
        try:
            with transaction.atomic():
                Grant.objects.create(
                    runtime=runtime,
                    scope="SESSION",
                    decision="ALLOW",
                    skill="deploy",
                    session=first.session,
                    origin="ANSWER",
                    granted_by=User.objects.get(username="olivia"),
                    request=first,
                )
                inserted.set()
                assert commit.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=first_answer_in_flight)
    holder.start()
    assert inserted.wait(timeout=30)
    results: dict = {}
    # The second answer inserts (the key is held by nothing committed yet) and waits on the
    # unique index until the first commits; then its insert does nothing and it reads the key.
    answering = answer_in_thread(second, "alice", Answer.ALLOW_SESSION, None, results)
    for _ in range(300):
        if _waiting_on_a_lock():
            break
        time.sleep(0.02)
    else:
        pytest.fail("the second answer never waited on the first's grant")
    commit.set()
    holder.join(timeout=30)
    answering.join(timeout=30)

    outcome = results["alice"]
    assert isinstance(outcome, AnswerOutcome), outcome
    assert not outcome.failed
    assert outcome.notes == [
        SETTLED_SAME_MESSAGE.format(skill="deploy", who="olivia", how="Allow for this session")
    ]
    [grant] = Grant.objects.filter(skill="deploy", revoked_at=None)
    assert grant.request_id == first.pk
    item = ApprovalItem.objects.get(request=second)
    assert (item.decision, item.grant_id) == ("ALLOW", grant.pk)
    assert ApprovalRequest.objects.get(pk=second.pk).status == RequestStatus.ANSWERED
