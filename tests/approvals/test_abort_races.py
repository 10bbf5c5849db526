"""A person answering while the runtime cancels, or the request expires, at the same moment
(S7, S9): never a deadlock, exactly one outcome per item.

An answer takes, in this order, the grant's key (its insert), the item (its claim), the audit
chain's lock, the session and the request (closing it). An abort must take them in the same
order, or on PostgreSQL each can hold what the other waits for: then PostgreSQL kills one
after deadlock_timeout, and the person's answer fails or the runtime's cancel does.

The interleavings are forced: the test holds the audit chain's lock, so whoever reaches it
first waits there holding its key and item, and the other is started only once it waits.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, GrantOrigin, GrantScope, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant
from aimon_admin.approvals.services import (
    AnswerOutcome,
    RequestClosedError,
    request_answer,
    request_cancel,
    request_expire_if_due,
)
from aimon_admin.audit.chain_head import CHAIN_LOCK_KEY
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import open_skill_request

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ABORTS = ("cancel", "expire")
# Allow for this session writes the very key an abort's denial writes (the session's); Always
# allow for this agent writes another, and must never survive an abort that won (S9).
ANSWERS = (Answer.ALLOW_SESSION, Answer.ALLOW_AGENT)


@pytest.fixture
def olivia(make_user: Callable[..., User]) -> User:
    return make_user("olivia", Role.OPERATOR)


@contextmanager
def audit_chain_held() -> Iterator[None]:
    """Hold the audit chain's lock on this connection: every writer of an event waits."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [CHAIN_LOCK_KEY])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [CHAIN_LOCK_KEY])


def wait_for_waiters(count: int) -> None:
    for _ in range(500):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.02)
    pytest.fail(f"never {count} connections waiting on a lock")


def in_thread(name: str, work: Callable[[], object], results: dict) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = work()
        except Exception as exc:  # judged by the test, never swallowed
            results[name] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def answering(request: ApprovalRequest, user: User, answer: Answer, skills: list[str] | None = None):
    return lambda: request_answer(request=request, user=user, answer=answer, skills=skills)


def aborting(request: ApprovalRequest, how: str) -> Callable[[], object]:
    """The runtime's cancel, or the expiry sweep that read the request past its deadline
    (the deadline is moved in the copy the sweep holds, not in the row: the other side has
    read the request already, or must not expire it itself)."""
    if how == "cancel":
        runtime = request.runtime
        return lambda: request_cancel(request=request, actor=Actor.for_runtime(runtime))
    due = ApprovalRequest.objects.select_related("runtime", "session", "invoking_session").get(pk=request.pk)
    due.expires_at = timezone.now() - dt.timedelta(seconds=1)
    return lambda: request_expire_if_due(due)


def join(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "hung"


def abort_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=AuditAction.SKILL_ABORT_DENIED))


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("how", ABORTS)
def test_an_answer_that_reaches_the_item_first_wins_and_the_abort_finds_the_request_answered(
    runtime: AgentRuntime, olivia: User, how: str, answer: Answer
) -> None:  # S7, S9: the answer's grant stands; no deadlock, no failure on either side
    request = open_skill_request(runtime, "deploy")
    results: dict = {}
    with audit_chain_held():
        # The answer writes its grant and claims the item, then waits to audit it.
        answer_thread = in_thread("answer", answering(request, olivia, answer), results)
        wait_for_waiters(1)
        # The abort comes now, and must wait on the answer, holding nothing it needs.
        abort_thread = in_thread("abort", aborting(request, how), results)
        wait_for_waiters(2)
    join(answer_thread, abort_thread)

    outcome = results["answer"]
    assert isinstance(outcome, AnswerOutcome), outcome
    assert not outcome.failed, outcome.failed
    assert [i.skill for i in outcome.written] == ["deploy"]
    assert outcome.request_answered
    if how == "cancel":
        assert isinstance(results["abort"], RequestClosedError), results["abort"]
    else:
        assert results["abort"] is False
    assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.ANSWERED
    [grant] = Grant.objects.all()  # the answer's, in force; no denial written, none superseded
    assert (grant.origin, grant.decision, grant.revoked_at) == (GrantOrigin.ANSWER, "ALLOW", None)
    item = ApprovalItem.objects.get(request=request)
    assert (item.decision, item.answered_by_id, item.grant_id) == ("ALLOW", olivia.pk, grant.pk)
    assert abort_events() == []
    assert audit_verify_chain()[1] is None


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("how", ABORTS)
def test_an_abort_that_reaches_the_item_first_wins_and_the_answer_writes_nothing(
    runtime: AgentRuntime, olivia: User, how: str, answer: Answer
) -> None:  # S9: the session's denial stands; the answer writes nothing, above all nothing agent-wide
    request = open_skill_request(runtime, "deploy")
    results: dict = {}
    with audit_chain_held():
        abort_thread = in_thread("abort", aborting(request, how), results)
        wait_for_waiters(1)
        answer_thread = in_thread("answer", answering(request, olivia, answer), results)
        wait_for_waiters(2)
    join(answer_thread, abort_thread)

    assert results["abort"] in (None, True), results["abort"]
    outcome = results["answer"]
    if isinstance(outcome, RequestClosedError):  # it read the request closed
        pass
    else:
        assert isinstance(outcome, AnswerOutcome), outcome
        assert (outcome.written, outcome.failed, outcome.request_answered) == ([], [], False)
        assert [i.skill for i in outcome.already_answered] == ["deploy"]
    closed = RequestStatus.CANCELLED if how == "cancel" else RequestStatus.EXPIRED
    assert ApprovalRequest.objects.get(pk=request.pk).status == closed
    [grant] = Grant.objects.all()  # the abort's denial for the session, nothing agent-wide
    assert (grant.origin, grant.decision, grant.scope, grant.revoked_at) == (
        GrantOrigin.ABORT,
        "DENY",
        GrantScope.SESSION,
        None,
    )
    item = ApprovalItem.objects.get(request=request)
    assert (item.decision, item.answered_by_id, item.grant_id) == ("DENY", None, grant.pk)
    assert len(abort_events()) == 1
    assert not AuditEvent.objects.filter(
        action__in=[AuditAction.SKILL_GRANTED, AuditAction.SKILL_GRANT_ESCALATED]
    ).exists()
    assert audit_verify_chain()[1] is None


def test_an_abort_of_two_skills_leaves_the_one_answered_meanwhile(
    runtime: AgentRuntime, olivia: User
) -> None:  # S8, S9: the cancel denies the skill left open and leaves the answer's grant
    request = open_skill_request(runtime, "deploy", "notify")
    results: dict = {}
    with audit_chain_held():
        answer_thread = in_thread(
            "answer", answering(request, olivia, Answer.ALLOW_SESSION, ["notify"]), results
        )
        wait_for_waiters(1)
        abort_thread = in_thread("abort", aborting(request, "cancel"), results)
        wait_for_waiters(2)
    join(answer_thread, abort_thread)

    assert results["abort"] is None, results["abort"]
    outcome = results["answer"]
    assert isinstance(outcome, AnswerOutcome), outcome
    assert [i.skill for i in outcome.written] == ["notify"]
    assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.CANCELLED
    grants = {g.skill: g for g in Grant.objects.filter(revoked_at=None)}
    assert {skill: (g.origin, g.decision) for skill, g in grants.items()} == {
        "deploy": (GrantOrigin.ABORT, "DENY"),
        "notify": (GrantOrigin.ANSWER, "ALLOW"),
    }
    assert Grant.objects.count() == 2  # nothing superseded
    items = {i.skill: i for i in ApprovalItem.objects.filter(request=request)}
    assert (items["deploy"].decision, items["deploy"].grant_id) == ("DENY", grants["deploy"].pk)
    assert (items["notify"].decision, items["notify"].grant_id) == ("ALLOW", grants["notify"].pk)
    assert [e.subject for e in abort_events()] == ["deploy"]
    assert audit_verify_chain()[1] is None


def test_a_cancel_and_an_expiry_at_once_abort_the_request_once(runtime: AgentRuntime) -> None:
    # S9: one denial per skill, one audit event each, whichever abort comes second finds it closed
    request = open_skill_request(runtime, "deploy", "notify")
    results: dict = {}
    with audit_chain_held():
        cancel_thread = in_thread("cancel", aborting(request, "cancel"), results)
        wait_for_waiters(1)
        expire_thread = in_thread("expire", aborting(request, "expire"), results)
        wait_for_waiters(2)
    join(cancel_thread, expire_thread)

    assert (results["cancel"], results["expire"]) == (None, False), results
    assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.CANCELLED
    grants = list(Grant.objects.all())
    assert sorted((g.skill, g.origin, g.decision, g.scope, g.revoked_at) for g in grants) == [
        ("deploy", GrantOrigin.ABORT, "DENY", GrantScope.SESSION, None),
        ("notify", GrantOrigin.ABORT, "DENY", GrantScope.SESSION, None),
    ]
    assert sorted(e.subject for e in abort_events()) == ["deploy", "notify"]
    assert audit_verify_chain()[1] is None


RACE_ROUNDS = 15


def test_answers_and_cancels_racing_freely_settle_each_item_once(
    runtime: AgentRuntime, olivia: User
) -> None:  # S7, S9: whichever wins, exactly one outcome, never a failure
    won: dict[str, int] = {"answer": 0, "cancel": 0}
    for number in range(RACE_ROUNDS):
        request = open_skill_request(runtime, "deploy", session_id=f"r-{number}")
        start = threading.Barrier(2)
        results: dict = {}

        def after_start(work: Callable[[], object], start: threading.Barrier = start) -> Callable[[], object]:
            def run() -> object:
                start.wait(timeout=30)
                return work()

            return run

        threads = [
            in_thread("answer", after_start(answering(request, olivia, Answer.ALLOW_SESSION)), results),
            in_thread("cancel", after_start(aborting(request, "cancel")), results),
        ]
        join(*threads)
        status = ApprovalRequest.objects.get(pk=request.pk).status
        item = ApprovalItem.objects.get(request=request)
        [grant] = Grant.objects.filter(request=request, revoked_at=None)
        assert item.grant_id == grant.pk
        if status == RequestStatus.ANSWERED:
            won["answer"] += 1
            assert isinstance(results["cancel"], RequestClosedError), results
            assert isinstance(results["answer"], AnswerOutcome), results
            assert not results["answer"].failed, results
            assert (grant.origin, item.decision) == (GrantOrigin.ANSWER, "ALLOW")
        else:
            won["cancel"] += 1
            assert status == RequestStatus.CANCELLED
            assert results["cancel"] is None, results
            answer = results["answer"]
            assert isinstance(answer, RequestClosedError) or (
                isinstance(answer, AnswerOutcome) and not answer.written and not answer.failed
            ), results
            assert (grant.origin, item.decision) == (GrantOrigin.ABORT, "DENY")
    assert sum(won.values()) == RACE_ROUNDS
    assert audit_verify_chain()[1] is None


def test_the_last_allow_of_two_and_a_cancel_at_once(
    runtime: AgentRuntime, olivia: User, make_user: Callable[..., User]
) -> None:  # P3, S9: the allow that reached the item first writes the grant; the cancel finds it answered
    oscar = make_user("oscar", Role.OPERATOR)
    rules.rule_create(pattern="deploy", action=RuleAction.ASK, approvers=2, actor=Actor.system("test"))
    request = open_skill_request(runtime, "deploy")
    assert request_answer(request=request, user=olivia, answer=Answer.ALLOW_SESSION).allows_recorded
    results: dict = {}
    with audit_chain_held():
        # The second allow counts on the item, then waits to audit it.
        answer_thread = in_thread("answer", answering(request, oscar, Answer.ALLOW_SESSION), results)
        wait_for_waiters(1)
        abort_thread = in_thread("abort", aborting(request, "cancel"), results)
        wait_for_waiters(2)
    join(answer_thread, abort_thread)

    outcome = results["answer"]
    assert isinstance(outcome, AnswerOutcome), outcome
    assert not outcome.failed, outcome.failed
    assert [i.skill for i in outcome.written] == ["deploy"]
    assert isinstance(results["abort"], RequestClosedError), results["abort"]
    assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.ANSWERED
    [grant] = Grant.objects.all()
    assert (grant.origin, grant.decision, grant.granted_by_id) == (GrantOrigin.ANSWER, "ALLOW", oscar.pk)
    assert abort_events() == []
