"""Skill approval services: each write checked as the row *and* its audit event (S1-S13, A1, A3)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import (
    Answer,
    DecisionSource,
    GrantDecision,
    GrantOrigin,
    GrantScope,
    ItemScope,
    RequestStatus,
    RevokeReason,
    RuleAction,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, RuleSetVersion, Session
from aimon_admin.approvals.services import (
    ApprovalError,
    NotAllowedError,
    PrincipalConflictError,
    RequestClosedError,
    RequestInput,
    SkillCall,
    UnknownInvokingSessionError,
    agent_grants_revoke,
    decide_skills,
    grant_revoke,
    request_answer,
    request_cancel,
    request_create,
    request_expire_if_due,
    requests_expire_due,
    session_clear,
    session_revoke,
    skills_decide,
)
from aimon_admin.approvals.services.answers import answers_for
from aimon_admin.approvals.services.errors import (
    AGENT_WIDE_ENDS,
    ANSWER_NOT_OFFERED_MESSAGE,
    CAPPED_ANSWER_MESSAGE,
    DENY_REPLACED_MESSAGE,
    ESCALATION_REACH,
    NOT_YOURS_MESSAGE,
    REQUEST_DENY_REACH,
    SETTLED_DENY_STANDS_MESSAGE,
    SETTLED_SAME_MESSAGE,
    STANDING_ANSWER_REFUSED_MESSAGE,
)
from aimon_admin.approvals.services.item_answers import item_answer
from aimon_admin.approvals.services.requests import request_shape
from aimon_admin.approvals.services.sessions import session_touch
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core import rawsql
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.approvals.factories import open_skill_request, skill_decisions
from tests.conftest import TEST_ACTOR

ONCE, FOR_SESSION, ALWAYS, NO = Answer.ALLOW_ONCE, Answer.ALLOW_SESSION, Answer.ALLOW_AGENT, Answer.DENY
ALLOW, DENY, ASK = "ALLOW", "DENY", "ASK"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_rule_index() -> Iterator[None]:
    """The rule index is cached per process, and that outlives each test's rollback: start
    and end every test with none cached, so no test reads an index another one built."""
    forget_rule_index()
    yield
    forget_rule_index()


def forget_rule_index() -> None:
    key = getattr(rules, "VERSION_CACHE_KEY", None)
    if key:
        cache.delete(key)
    rules.rule_index_reset()


@pytest.fixture
def owner(make_user: Callable[..., User]) -> User:
    return make_user("owen", Role.APPROVER)


@pytest.fixture
def owned_runtime(owner: User) -> AgentRuntime:
    return runtime_create(name="agent-owned", owner=owner, actor=TEST_ACTOR)


def events(action: AuditAction) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


def item(request: ApprovalRequest, skill: str = "deploy") -> ApprovalItem:
    return ApprovalItem.objects.get(request=request, skill=skill)


def status(request: ApprovalRequest) -> str:
    return ApprovalRequest.objects.values_list("status", flat=True).get(pk=request.pk)


def active(runtime: AgentRuntime, **filters: object) -> list[Grant]:
    return list(Grant.objects.active().filter(runtime=runtime, **filters))


@contextmanager
def failing_insert(table: str, column: str, value: str) -> Iterator[None]:
    """A database trigger that refuses to INSERT a row of `table` whose `column` is `value`:
    a failing write injected below the project's code, with nothing of it mocked."""
    name = f"aimon_test_refuse_{table}"
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                f"CREATE TEMP TRIGGER {name} BEFORE INSERT ON {table} "
                f"WHEN NEW.{column} = '{value}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
            )
        else:
            cursor.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.{column} = '{value}' THEN RAISE EXCEPTION 'injected failure'; END IF; "
                "RETURN NEW; END $$;"
            )
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {name}();"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute(f"DROP TRIGGER IF EXISTS {name};")
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table};")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}();")


# --- Sessions (S1, S12) ---------------------------------------------------------------------------


def test_the_same_session_id_on_two_runtimes_is_two_sessions(
    runtime: AgentRuntime, other_runtime: AgentRuntime, approver: User, other_approver: User
) -> None:  # S1, S12
    mine = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    # no principal conflict
    theirs = open_skill_request(other_runtime, "deploy", session_id="s-1", principal="bob")

    assert mine.session_id != theirs.session_id
    assert Session.objects.filter(session_id="s-1").count() == 2
    request_answer(request=mine, user=approver, answer=FOR_SESSION)

    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}
    assert skill_decisions(other_runtime, "deploy", session_id="s-1") == {"deploy": (ASK, "DEFAULT")}
    with pytest.raises(NotAllowedError):  # bob's session on the other runtime is bob's
        request_answer(request=theirs, user=approver, answer=FOR_SESSION)


def test_a_sessions_principal_is_fixed_when_first_seen(runtime: AgentRuntime) -> None:  # S12
    session = session_touch(runtime=runtime, session_id="s-1", principal="alice")
    assert session is not None
    assert session.principal == "alice"

    with pytest.raises(PrincipalConflictError, match="belongs to principal 'alice'"):
        session_touch(runtime=runtime, session_id="s-1", principal="bob")
    with pytest.raises(PrincipalConflictError):
        open_skill_request(runtime, "deploy", session_id="s-1", principal="bob")

    assert not ApprovalRequest.objects.exists()
    assert session_touch(runtime=runtime, session_id="s-1", principal=None) == session  # naming none is fine
    assert Session.objects.get(pk=session.pk).principal == "alice"


def test_a_session_first_seen_without_a_principal_keeps_the_first_one_named(
    runtime: AgentRuntime,
) -> None:  # S12
    session_touch(runtime=runtime, session_id="s-1", principal=None)
    session_touch(runtime=runtime, session_id="s-1", principal="alice")

    with pytest.raises(PrincipalConflictError):
        session_touch(runtime=runtime, session_id="s-1", principal="bob")
    assert Session.objects.get(runtime=runtime, session_id="s-1").principal == "alice"


def test_a_fork_naming_another_principal_than_its_invoking_session_is_refused(
    runtime: AgentRuntime, other_approver: User
) -> None:  # S12, S13: a fork's answers land on the invoking session, whose principal is fixed
    open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")

    with pytest.raises(PrincipalConflictError):
        open_skill_request(runtime, "deploy", session_id=None, invoking_session_id="s-1", principal="bob")

    assert ApprovalRequest.objects.count() == 1


def test_a_fork_without_a_principal_belongs_to_its_invoking_sessions(runtime: AgentRuntime) -> None:  # S13
    open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    fork = open_skill_request(runtime, "deploy", session_id=None, invoking_session_id="s-1", principal=None)
    same = open_skill_request(
        runtime, "deploy", session_id=None, invoking_session_id="s-1", principal="alice"
    )

    assert fork.principal == "alice"
    assert same.principal == "alice"


def test_a_request_with_no_principal_in_a_session_belongs_to_the_sessions(
    runtime: AgentRuntime,
) -> None:  # S13
    open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    assert open_skill_request(runtime, "deploy", session_id="s-1", principal=None).principal == "alice"
    assert open_skill_request(runtime, "deploy", session_id=None, principal=None).principal == ""


def _decide(
    runtime: AgentRuntime, session_id: str | None, invoking: str | None, principal: str | None
) -> None:
    decide_skills(
        runtime,
        SkillCall(
            skills=["deploy"],
            session_id=session_id,
            invoking_session_id=invoking,
            principal=principal,
            turn_id=None,
        ),
    )


def test_a_decision_touches_its_session_and_only_reads_the_invoking_one(
    runtime: AgentRuntime, settings: object
) -> None:  # S1, S12
    # S3: an invoking session never seen is refused before anything is written.
    with pytest.raises(UnknownInvokingSessionError, match="'s-0'"):
        _decide(runtime, "s-1", "s-0", "alice")
    assert not Session.objects.exists()  # neither created
    _decide(runtime, "s-1", None, "alice")
    session = Session.objects.get(runtime=runtime, session_id="s-1")
    assert session.principal == "alice"
    assert not Session.objects.filter(session_id="s-0").exists()  # a decision never creates it

    session_touch(runtime=runtime, session_id="s-0", principal="bob")
    _decide(runtime, "s-1", "s-0", None)
    assert Session.objects.get(session_id="s-0").principal == "bob"
    with pytest.raises(PrincipalConflictError):
        _decide(runtime, "s-1", None, "bob")

    # Idle past the TTL: the decision's touch expires the session's grants (S12).
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 600  # type: ignore[attr-defined]
    Grant.objects.create(
        runtime=runtime, scope="SESSION", decision="ALLOW", skill="deploy", session=session, origin="ANSWER"
    )
    Session.objects.filter(pk=session.pk).update(last_seen_at=timezone.now() - dt.timedelta(hours=1))
    _decide(runtime, "s-1", None, None)
    touched = Session.objects.get(pk=session.pk)
    assert timezone.now() - touched.last_seen_at < dt.timedelta(seconds=60)
    assert Grant.objects.get(session=session).revoke_reason == RevokeReason.EXPIRED
    assert [e.session_key for e in events(AuditAction.SESSION_EXPIRED)] == ["s-1"]


def test_a_decision_for_a_new_session_reads_its_session_row_once(
    runtime: AgentRuntime, approver: User
) -> None:  # S12: created at first sight, from the one read that found it absent
    request_answer(
        request=open_skill_request(runtime, "deploy", session_id="s-0", principal="alice"),
        user=approver,
        answer=FOR_SESSION,
    )
    with CaptureQueriesContext(connection) as queries:
        verdicts = decide_skills(
            runtime,
            SkillCall(
                skills=["deploy"],
                session_id="s-new",
                invoking_session_id="s-0",
                principal="alice",
                turn_id=None,
            ),
        )
    # Beside the insert (and its savepoint), one statement: the decision's read of the
    # sessions, the grants and the rule set's version. (On PostgreSQL it is a prepared
    # statement, logged without its text.)
    writes = ("INSERT", "SAVEPOINT", "RELEASE")
    reads = [
        q["sql"] for q in queries.captured_queries if not (q["sql"] or "").lstrip().upper().startswith(writes)
    ]
    assert len(reads) == 1, reads
    assert [(v.decision, v.source) for v in verdicts] == [
        (GrantDecision.ALLOW, DecisionSource.INVOKING_SESSION)
    ]
    assert Session.objects.get(runtime=runtime, session_id="s-new").principal == "alice"


def test_the_same_idempotency_key_returns_the_same_request(
    runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:
    first = open_skill_request(runtime, "deploy", idempotency_key="k-1")
    again, created = request_create(RequestInput(runtime=runtime, skills=["other"], idempotency_key="k-1"))
    elsewhere, created_elsewhere = request_create(
        RequestInput(runtime=other_runtime, skills=["deploy"], idempotency_key="k-1")
    )

    assert (again.pk, created) == (first.pk, False)
    assert created_elsewhere
    assert elsewhere.pk != first.pk
    assert ApprovalRequest.objects.count() == 2


def test_deciding_no_skills_gives_no_verdicts(runtime: AgentRuntime, operator: User) -> None:  # S2
    # A session seen only through decisions has no skills to show (its page asks for none).
    request_answer(
        request=open_skill_request(runtime, "wipe", session_id=None, principal=None),
        user=operator,
        answer=ALWAYS,
    )
    session = session_touch(runtime=runtime, session_id="s-9", principal=None)

    assert (
        skills_decide(runtime=runtime, skills=[], session=session, invoking_session=None, turn_id=None) == []
    )


# --- Answers (S4) ---------------------------------------------------------------------------------


def test_allow_for_this_session_writes_a_session_allow_and_its_event(
    runtime: AgentRuntime, approver: User
) -> None:  # S4, A1
    request = open_skill_request(runtime, "deploy", session_id="s-1")

    outcome = request_answer(request=request, user=approver, answer=FOR_SESSION)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.decision, grant.skill) == (GrantScope.SESSION, GrantDecision.ALLOW, "deploy")
    assert (grant.session.session_id, grant.turn_id, grant.origin) == ("s-1", "", GrantOrigin.ANSWER)
    assert (grant.granted_by, grant.request_id, grant.runtime) == (approver, request.pk, runtime)
    assert grant.revoked_at is None
    answered = item(request)
    assert (answered.decision, answered.scope, answered.answered_by, answered.grant) == (
        ALLOW,
        GrantScope.SESSION,
        approver,
        grant,
    )
    assert [i.pk for i in outcome.written] == [answered.pk]
    assert outcome.request_answered
    assert status(request) == RequestStatus.ANSWERED
    assert ApprovalRequest.objects.get(pk=request.pk).answered_by == approver
    [event] = events(AuditAction.SKILL_GRANTED)
    assert (event.level, event.actor, event.actor_label, event.runtime) == (
        AuditLevel.INFO,
        approver,
        "alice",
        runtime,
    )
    assert (event.session_key, event.subject_type, event.subject) == ("s-1", "skill", "deploy")
    assert event.details == {
        "decision": "ALLOW",
        "scope": "SESSION",
        "request_id": str(request.pk),
        "grant_id": grant.pk,
        "answered_by": "alice",
    }
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}
    # that session only
    assert skill_decisions(runtime, "deploy", session_id="s-2") == {"deploy": (ASK, "DEFAULT")}


def test_deny_writes_a_session_deny(runtime: AgentRuntime, approver: User) -> None:  # S4
    request = open_skill_request(runtime, "deploy", session_id="s-1")

    request_answer(request=request, user=approver, answer=NO)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.decision, grant.session.session_id) == (GrantScope.SESSION, DENY, "s-1")
    assert events(AuditAction.SKILL_GRANTED)[0].details["decision"] == "DENY"
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (DENY, "SESSION")}


def test_allow_once_writes_a_turn_allow_that_answers_only_that_turn(
    runtime: AgentRuntime, approver: User
) -> None:  # S4
    request = open_skill_request(runtime, "deploy", session_id="s-1", turn_id="t-1")

    request_answer(request=request, user=approver, answer=ONCE)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.decision, grant.session.session_id, grant.turn_id) == (
        GrantScope.TURN,
        ALLOW,
        "s-1",
        "t-1",
    )
    assert events(AuditAction.SKILL_GRANTED)[0].details["scope"] == "TURN"
    assert skill_decisions(runtime, "deploy", session_id="s-1", turn_id="t-1") == {"deploy": (ALLOW, "TURN")}
    assert skill_decisions(runtime, "deploy", session_id="s-1", turn_id="t-2") == {"deploy": (ASK, "DEFAULT")}
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ASK, "DEFAULT")}


def test_always_allow_writes_an_agent_allow_that_every_session_sees(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User
) -> None:  # S4
    request = open_skill_request(runtime, "deploy", session_id="s-1")

    request_answer(request=request, user=operator, answer=ALWAYS)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.decision, grant.session, grant.turn_id) == (GrantScope.AGENT, ALLOW, None, "")
    assert (grant.origin, grant.expires_at) == (GrantOrigin.ANSWER, None)
    [event] = events(AuditAction.SKILL_GRANTED)
    assert event.details["scope"] == "AGENT"
    assert not events(AuditAction.SKILL_GRANT_ESCALATED)  # answered as agent-wide: no escalation
    for session_id in ("s-1", "s-2", None):
        assert skill_decisions(runtime, "deploy", session_id=session_id) == {"deploy": (ALLOW, "AGENT")}
    assert skill_decisions(other_runtime, "deploy", session_id="s-1") == {"deploy": (ASK, "DEFAULT")}


def test_a_forks_session_answer_lands_on_the_invoking_session(
    runtime: AgentRuntime, approver: User
) -> None:  # S3, S4
    open_skill_request(runtime, "other", session_id="s-1", principal="alice")
    fork = open_skill_request(runtime, "deploy", session_id=None, invoking_session_id="s-1", principal=None)

    request_answer(request=fork, user=approver, answer=FOR_SESSION)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.session.session_id) == (GrantScope.SESSION, "s-1")
    [event] = events(AuditAction.SKILL_GRANTED)
    assert event.session_key == "s-1"
    assert event.details["lands_on_invoking_session"] == "s-1"
    # the invoking session
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}
    # forks
    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-1") == {
        "deploy": (ALLOW, "INVOKING_SESSION")
    }


def test_a_forks_allow_once_lands_on_the_invoking_sessions_turn(
    runtime: AgentRuntime, approver: User
) -> None:  # S4
    open_skill_request(runtime, "other", session_id="s-1", principal="alice")
    fork = open_skill_request(
        runtime, "deploy", session_id=None, invoking_session_id="s-1", turn_id="t-1", principal=None
    )

    request_answer(request=fork, user=approver, answer=ONCE)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.session.session_id, grant.turn_id) == (GrantScope.TURN, "s-1", "t-1")
    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-1", turn_id="t-1") == {
        "deploy": (ALLOW, "TURN")
    }
    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-1", turn_id="t-2") == {
        "deploy": (ASK, "DEFAULT")
    }


def test_a_fork_inherits_its_invoking_sessions_denial(runtime: AgentRuntime, operator: User) -> None:  # S3
    earlier = open_skill_request(runtime, "deploy", session_id="s-1")
    request_answer(request=earlier, user=operator, answer=NO)

    fork = open_skill_request(runtime, "deploy", session_id=None, invoking_session_id="s-1", principal=None)

    assert (fork.status, item(fork).decision, item(fork).source) == (
        RequestStatus.ANSWERED,
        DENY,
        DecisionSource.INVOKING_SESSION,
    )
    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-1") == {
        "deploy": (DENY, "INVOKING_SESSION")
    }


# --- Escalation (S6) ------------------------------------------------------------------------------


def test_a_session_answer_with_no_session_escalates_to_agent_wide_with_a_warning(
    runtime: AgentRuntime, operator: User
) -> None:  # S6
    request = open_skill_request(runtime, "deploy", session_id=None, invoking_session_id=None, principal=None)

    request_answer(request=request, user=operator, answer=FOR_SESSION)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.decision, grant.session, grant.origin) == (
        GrantScope.AGENT,
        ALLOW,
        None,
        GrantOrigin.ESCALATION,
    )
    assert (item(request).scope, item(request).decision) == (GrantScope.AGENT, ALLOW)
    assert not events(AuditAction.SKILL_GRANTED)
    [event] = events(AuditAction.SKILL_GRANT_ESCALATED)
    assert (event.level, event.actor, event.runtime, event.subject) == (
        AuditLevel.WARNING,
        operator,
        runtime,
        "deploy",
    )
    assert event.details == {
        "decision": "ALLOW",
        "scope": "AGENT",
        "request_id": str(request.pk),
        "grant_id": grant.pk,
        "answered_by": "olivia",
        "reach": ESCALATION_REACH,
        "all_sessions": True,
        "expires": False,
        "survives_clear": True,
        "removed_by": "Revoke (this approval on its own), or Revoke agent-wide",
    }
    for phrase in ("all sessions", "no expiry", "survives clear", AGENT_WIDE_ENDS):
        assert phrase in ESCALATION_REACH
    # Never "only by Revoke agent-wide" while one can be revoked on its own.
    assert "only" not in ESCALATION_REACH
    assert AGENT_WIDE_ENDS == "until it is revoked, on its own or with Revoke agent-wide"

    # What the event promises holds: every session sees it, clear and session revoke leave it,
    # the agent-wide revoke removes it.
    assert skill_decisions(runtime, "deploy", session_id="s-9") == {"deploy": (ALLOW, "AGENT")}
    session_touch(runtime=runtime, session_id="s-9", principal=None)
    assert session_clear(runtime=runtime, session_id="s-9", actor=TEST_ACTOR) == 0
    assert session_revoke(runtime=runtime, session_id="s-9", agent=False, actor=TEST_ACTOR) == (0, 0)
    assert skill_decisions(runtime, "deploy", session_id="s-9") == {"deploy": (ALLOW, "AGENT")}
    assert agent_grants_revoke(runtime=runtime, actor=Actor.for_user(operator)) == 1
    assert skill_decisions(runtime, "deploy", session_id="s-9") == {"deploy": (ASK, "DEFAULT")}


def test_an_escalated_grant_can_be_revoked_on_its_own_as_its_reach_says(
    runtime: AgentRuntime, operator: User
) -> None:  # S5, S6: the words and the behaviour agree
    request_answer(
        request=open_skill_request(runtime, "deploy", session_id=None, principal=None),
        user=operator,
        answer=FOR_SESSION,
    )
    [grant] = Grant.objects.all()
    [event] = events(AuditAction.SKILL_GRANT_ESCALATED)
    assert "on its own" in event.details["reach"]

    assert grant_revoke(grant=grant, actor=Actor.for_user(operator))

    assert skill_decisions(runtime, "deploy", session_id="s-9") == {"deploy": (ASK, "DEFAULT")}


@pytest.mark.parametrize("who", ["olivia", "owen"])
def test_a_deny_with_no_session_escalates_for_operators_and_the_owner(
    owned_runtime: AgentRuntime, operator: User, owner: User, who: str
) -> None:  # S6, S13
    request = open_skill_request(owned_runtime, "deploy", session_id=None, principal="alice")
    user = {"olivia": operator, "owen": owner}[who]

    request_answer(request=request, user=user, answer=NO)

    [grant] = Grant.objects.all()
    assert (grant.scope, grant.decision, grant.origin) == (GrantScope.AGENT, DENY, GrantOrigin.ESCALATION)
    [event] = events(AuditAction.SKILL_GRANT_ESCALATED)
    assert (event.level, event.details["decision"], event.details["answered_by"]) == (
        AuditLevel.WARNING,
        "DENY",
        who,
    )


def test_an_approver_may_only_deny_a_sessionless_request_for_that_request(
    owned_runtime: AgentRuntime, approver: User
) -> None:  # S13 (alice's Deny once wrote an AGENT-scope DENY)
    request = open_skill_request(owned_runtime, "deploy", session_id=None, principal="alice")
    assert answers_for(approver, request, item(request)) == [Answer.DENY_REQUEST]

    with pytest.raises(NotAllowedError) as refused:  # a forged Deny: refused, nothing written
        request_answer(request=request, user=approver, answer=NO)
    assert str(refused.value) == STANDING_ANSWER_REFUSED_MESSAGE.format(
        answer="Deny", skill="deploy", runtime="agent-owned"
    )
    assert "Deny this request" in str(refused.value)
    assert not Grant.objects.exists()
    assert status(request) == RequestStatus.PENDING

    outcome = request_answer(request=request, user=approver, answer=Answer.DENY_REQUEST)

    assert outcome.request_answered
    assert not Grant.objects.exists()  # nothing stored in any grant store
    row = item(request)
    assert (row.decision, row.scope, row.answered_by, row.grant) == (DENY, ItemScope.REQUEST, approver, None)
    assert status(request) == RequestStatus.ANSWERED
    [event] = events(AuditAction.SKILL_REQUEST_DENIED)
    assert (event.level, event.actor, event.subject) == (AuditLevel.INFO, approver, "deploy")
    assert event.details == {
        "decision": "DENY",
        "scope": "REQUEST",
        "request_id": str(request.pk),
        "answered_by": "alice",
        "stored": False,
        "reach": REQUEST_DENY_REACH,
    }
    assert not events(AuditAction.SKILL_GRANT_ESCALATED)
    # The next session, and the next sessionless run, are asked again.
    assert skill_decisions(owned_runtime, "deploy", session_id="s-9") == {"deploy": (ASK, "DEFAULT")}
    assert skill_decisions(owned_runtime, "deploy", session_id=None) == {"deploy": (ASK, "DEFAULT")}


def test_a_rule_cap_binds_deny_too(runtime: AgentRuntime, operator: User) -> None:  # S13
    rules.rule_create(
        pattern="deploy", action="ASK", widest_scope=GrantScope.TURN, actor=TEST_ACTOR, runtime=None
    )
    request = open_skill_request(runtime, "deploy", session_id=None, principal=None)
    assert answers_for(operator, request, item(request)) == [Answer.DENY_REQUEST]

    with pytest.raises(NotAllowedError) as refused:
        request_answer(request=request, user=operator, answer=NO)
    assert str(refused.value) == CAPPED_ANSWER_MESSAGE.format(
        answer="Deny", skill="deploy", widest="this turn"
    )
    assert not Grant.objects.exists()

    request_answer(request=request, user=operator, answer=Answer.DENY_REQUEST)
    assert (item(request).decision, item(request).scope) == (DENY, ItemScope.REQUEST)
    assert not Grant.objects.exists()


def test_someone_who_may_not_grant_agent_scope_cannot_escalate(
    runtime: AgentRuntime, approver: User
) -> None:  # S6, S13
    request = open_skill_request(runtime, "deploy", session_id=None, principal="alice")

    assert answers_for(approver, request, item(request)) == [Answer.DENY_REQUEST]
    for answer in (FOR_SESSION, ALWAYS, ONCE, NO):
        with pytest.raises(NotAllowedError):
            request_answer(request=request, user=approver, answer=answer)

    assert not Grant.objects.exists()
    assert status(request) == RequestStatus.PENDING


# --- Channel contract (S7) ------------------------------------------------------------------------


def test_a_request_is_answered_only_once_every_skill_has_a_grant(
    runtime: AgentRuntime, approver: User
) -> None:  # S7
    request = open_skill_request(runtime, "deploy", "notify")

    first = request_answer(request=request, user=approver, answer=FOR_SESSION, skills=["deploy"])
    assert not first.request_answered
    assert status(request) == RequestStatus.PENDING
    assert ApprovalRequest.objects.get(pk=request.pk).answered_at is None

    second = request_answer(request=request, user=approver, answer=NO, skills=["notify"])

    assert second.request_answered
    assert status(request) == RequestStatus.ANSWERED
    for answered in ApprovalItem.objects.filter(request=request):
        assert answered.grant is not None
        assert answered.grant.revoked_at is None
        assert answered.grant.decision == answered.decision
    assert skill_decisions(runtime, "deploy", "notify", session_id="s-1") == {
        "deploy": (ALLOW, "SESSION"),
        "notify": (DENY, "SESSION"),
    }


def test_skills_the_chain_already_decides_are_filled_in_at_creation(
    runtime: AgentRuntime, approver: User
) -> None:  # S7, API "Items the chain already decides"
    request_answer(request=open_skill_request(runtime, "deploy"), user=approver, answer=FOR_SESSION)

    mixed = open_skill_request(runtime, "deploy", "notify")
    decided = open_skill_request(runtime, "deploy")

    assert status(mixed) == RequestStatus.PENDING
    assert (item(mixed).decision, item(mixed).source, item(mixed).scope, item(mixed).grant) == (
        ALLOW,
        DecisionSource.SESSION,
        "",
        None,
    )
    assert item(mixed, "notify").decision == ""
    assert status(decided) == RequestStatus.ANSWERED
    assert ApprovalRequest.objects.get(pk=decided.pk).answered_by is None  # the chain, not a person

    request_answer(request=mixed, user=approver, answer=NO, skills=["notify"])
    assert status(mixed) == RequestStatus.ANSWERED


def test_an_item_already_answered_is_reported_with_who_answered_and_how(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S7, exactly once
    request = open_skill_request(runtime, "deploy", "notify")
    request_answer(request=request, user=approver, answer=FOR_SESSION, skills=["deploy"])

    outcome = request_answer(request=request, user=operator, answer=NO)

    [seen] = outcome.already_answered
    assert (seen.skill, seen.answered_by, seen.decision, seen.scope) == (
        "deploy",
        approver,
        ALLOW,
        GrantScope.SESSION,
    )
    assert [i.skill for i in outcome.written] == ["notify"]
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}
    assert len(events(AuditAction.SKILL_GRANTED)) == 2
    assert len(active(runtime)) == 2


@pytest.mark.django_db(transaction=True)
def test_the_request_names_a_person_who_answered_whoever_closes_it(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S7: the runtime is told who answered
    request = open_skill_request(runtime, "deploy")
    # Alice's answer commits, and her call dies before it closes the request: her item's
    # transaction, written by the service's own step, without the close that follows it.
    [pending] = request.items.all()
    with transaction.atomic():
        item_answer(
            request=request,
            item=pending,
            answer=FOR_SESSION,
            shape=request_shape(request),
            user=approver,
            notes=[],
        )
    assert item(request).answered_by == approver
    assert status(request) == RequestStatus.PENDING

    # The operator's click finds it answered: it closes the request, but answered nothing.
    outcome = request_answer(request=request, user=operator, answer=NO)

    assert [i.answered_by for i in outcome.already_answered] == [approver]
    assert not outcome.written
    closed = ApprovalRequest.objects.get(pk=request.pk)
    assert closed.status == RequestStatus.ANSWERED
    assert closed.answered_by == approver


# --- Isolated writes (S8, A3) ---------------------------------------------------------------------


def test_one_failed_write_leaves_that_skill_ask_and_the_rest_are_written(
    runtime: AgentRuntime, approver: User
) -> None:  # S8
    request = open_skill_request(runtime, "deploy", "boom", "notify")

    with failing_insert("approvals_grant", "skill", "boom"):
        outcome = request_answer(request=request, user=approver, answer=FOR_SESSION)

    assert sorted(i.skill for i in outcome.written) == ["deploy", "notify"]
    assert [skill for skill, _ in outcome.failed] == ["boom"]
    assert "injected failure" in outcome.failed[0][1]
    assert not outcome.request_answered
    assert status(request) == RequestStatus.PENDING
    assert (item(request, "boom").decision, item(request, "boom").answered_by) == ("", None)
    assert skill_decisions(runtime, "deploy", "boom", "notify", session_id="s-1") == {
        "deploy": (ALLOW, "SESSION"),
        "boom": (ASK, "DEFAULT"),  # fail-closed: refused at execution
        "notify": (ALLOW, "SESSION"),
    }
    assert sorted(e.subject for e in events(AuditAction.SKILL_GRANTED)) == ["deploy", "notify"]

    # With the fault gone, the skill can be answered and the request completes.
    retry = request_answer(request=request, user=approver, answer=FOR_SESSION, skills=["boom"])
    assert retry.request_answered
    assert status(request) == RequestStatus.ANSWERED


def test_a_grant_whose_event_cannot_be_written_is_not_written(
    runtime: AgentRuntime, approver: User
) -> None:  # A3, S8
    request = open_skill_request(runtime, "deploy", "boom")

    with failing_insert("audit_auditevent", "subject", "boom"):
        outcome = request_answer(request=request, user=approver, answer=NO)

    assert [skill for skill, _ in outcome.failed] == ["boom"]
    assert [g.skill for g in Grant.objects.all()] == ["deploy"]
    assert item(request, "boom").decision == ""
    assert skill_decisions(runtime, "boom", session_id="s-1") == {"boom": (ASK, "DEFAULT")}


# --- Aborts (S9) ----------------------------------------------------------------------------------


def test_cancel_denies_each_unanswered_skill_for_the_session_never_agent_wide(
    runtime: AgentRuntime, approver: User
) -> None:  # S9
    request = open_skill_request(runtime, "deploy", "notify")
    request_answer(request=request, user=approver, answer=FOR_SESSION, skills=["deploy"])
    runtime_actor = Actor.for_runtime(runtime)

    request_cancel(request=request, actor=runtime_actor)

    assert status(request) == RequestStatus.CANCELLED
    assert ApprovalRequest.objects.get(pk=request.pk).closed_at is not None
    denial = Grant.objects.get(skill="notify")
    assert (denial.scope, denial.decision, denial.origin, denial.granted_by) == (
        GrantScope.SESSION,
        DENY,
        GrantOrigin.ABORT,
        None,
    )
    assert denial.session.session_id == "s-1"
    assert not Grant.objects.filter(scope=GrantScope.AGENT).exists()
    assert (item(request, "notify").decision, item(request, "notify").grant) == (DENY, denial)
    assert item(request, "deploy").decision == ALLOW  # the answered skill keeps its answer
    [event] = events(AuditAction.SKILL_ABORT_DENIED)
    assert (event.subject, event.session_key, event.actor_label, event.runtime) == (
        "notify",
        "s-1",
        "runtime:agent-one",
        runtime,
    )
    assert event.details == {
        "request_id": str(request.pk),
        "why": "cancelled by the runtime",
        "written": True,
        "grant_id": denial.pk,
    }
    assert skill_decisions(runtime, "deploy", "notify", session_id="s-1") == {
        "deploy": (ALLOW, "SESSION"),
        "notify": (DENY, "SESSION"),
    }


def test_cancelling_a_fork_denies_on_the_invoking_session(runtime: AgentRuntime) -> None:  # S9, S3
    open_skill_request(runtime, "other", session_id="s-1")
    fork = open_skill_request(runtime, "deploy", session_id=None, invoking_session_id="s-1", principal=None)

    request_cancel(request=fork, actor=TEST_ACTOR)

    [denial] = Grant.objects.all()
    assert (denial.scope, denial.decision, denial.session.session_id) == (GrantScope.SESSION, DENY, "s-1")
    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-1") == {
        "deploy": (DENY, "INVOKING_SESSION")
    }


def test_cancelling_a_request_with_no_session_writes_nothing_and_the_skill_stays_ask(
    runtime: AgentRuntime,
) -> None:  # S9
    request = open_skill_request(runtime, "deploy", "notify", session_id=None, principal=None)

    request_cancel(request=request, actor=TEST_ACTOR)

    assert status(request) == RequestStatus.CANCELLED
    assert not Grant.objects.exists()
    assert item(request).decision == ""
    assert skill_decisions(runtime, "deploy", session_id=None) == {"deploy": (ASK, "DEFAULT")}
    aborted = events(AuditAction.SKILL_ABORT_DENIED)
    assert [e.subject for e in aborted] == ["deploy", "notify"]
    assert all(e.details["written"] is False for e in aborted)


def test_cancelling_a_closed_request_raises(runtime: AgentRuntime, approver: User) -> None:  # S9
    answered = open_skill_request(runtime, "deploy")
    request_answer(request=answered, user=approver, answer=FOR_SESSION)
    cancelled = open_skill_request(runtime, "notify")
    request_cancel(request=cancelled, actor=TEST_ACTOR)
    before = Grant.objects.count()

    with pytest.raises(RequestClosedError, match="already answered"):
        request_cancel(request=answered, actor=TEST_ACTOR)
    with pytest.raises(RequestClosedError, match="already cancelled"):
        request_cancel(request=cancelled, actor=TEST_ACTOR)
    with pytest.raises(RequestClosedError, match="already cancelled"):
        request_answer(request=cancelled, user=approver, answer=FOR_SESSION)

    assert Grant.objects.count() == before
    assert status(answered) == RequestStatus.ANSWERED
    assert len(events(AuditAction.SKILL_ABORT_DENIED)) == 1


def past_due(request: ApprovalRequest) -> None:
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    request.refresh_from_db()


def test_a_request_past_its_deadline_is_aborted_when_read(
    runtime: AgentRuntime, approver: User
) -> None:  # S9
    request = open_skill_request(runtime, "deploy")
    assert not request_expire_if_due(request)  # not due yet
    past_due(request)

    assert request_expire_if_due(request)

    assert request.status == RequestStatus.EXPIRED
    [denial] = Grant.objects.all()
    assert (denial.scope, denial.decision, denial.origin) == (GrantScope.SESSION, DENY, GrantOrigin.ABORT)
    [event] = events(AuditAction.SKILL_ABORT_DENIED)
    assert (event.actor_label, event.details["why"]) == ("request-expiry", "timed out")
    assert not request_expire_if_due(request)  # once only
    with pytest.raises(RequestClosedError, match="already expired"):
        request_answer(request=request, user=approver, answer=FOR_SESSION)


def test_answering_a_request_past_its_deadline_expires_it_instead(
    runtime: AgentRuntime, approver: User
) -> None:  # S9
    request = open_skill_request(runtime, "deploy")
    past_due(request)

    with pytest.raises(RequestClosedError, match="already expired"):
        request_answer(request=request, user=approver, answer=FOR_SESSION)

    assert status(request) == RequestStatus.EXPIRED
    assert [g.decision for g in Grant.objects.all()] == [DENY]
    assert not events(AuditAction.SKILL_GRANTED)


def test_the_sweep_expires_only_requests_past_their_deadline(runtime: AgentRuntime) -> None:  # S9
    due = open_skill_request(runtime, "deploy")
    not_due = open_skill_request(runtime, "notify")
    no_session = open_skill_request(runtime, "wipe", session_id=None, principal=None)
    past_due(due)
    past_due(no_session)

    assert requests_expire_due() == 2
    assert requests_expire_due() == 0

    assert (status(due), status(not_due), status(no_session)) == (
        RequestStatus.EXPIRED,
        RequestStatus.PENDING,
        RequestStatus.EXPIRED,
    )
    assert [(g.skill, g.scope, g.decision) for g in Grant.objects.all()] == [("deploy", "SESSION", DENY)]


# --- Clear and revoke (S10) -----------------------------------------------------------------------


@pytest.fixture
def granted(runtime: AgentRuntime, approver: User, operator: User) -> dict[str, Grant]:
    """In s-1: a turn ALLOW (read), a session ALLOW (deploy), a session DENY (notify); agent ALLOW (wipe).
    In s-2: a session ALLOW (deploy)."""
    request_answer(request=open_skill_request(runtime, "read", turn_id="t-1"), user=approver, answer=ONCE)
    request_answer(request=open_skill_request(runtime, "deploy"), user=approver, answer=FOR_SESSION)
    request_answer(request=open_skill_request(runtime, "notify"), user=approver, answer=NO)
    request_answer(request=open_skill_request(runtime, "wipe"), user=operator, answer=ALWAYS)
    request_answer(
        request=open_skill_request(runtime, "deploy", session_id="s-2"), user=approver, answer=FOR_SESSION
    )
    return {
        "turn": Grant.objects.get(scope=GrantScope.TURN),
        "session_allow": Grant.objects.get(
            scope=GrantScope.SESSION, skill="deploy", session__session_id="s-1"
        ),
        "session_deny": Grant.objects.get(scope=GrantScope.SESSION, skill="notify"),
        "agent": Grant.objects.get(scope=GrantScope.AGENT),
        "other_session": Grant.objects.get(session__session_id="s-2"),
    }


def test_clear_drops_the_sessions_turn_and_session_grants_and_keeps_the_rest(
    runtime: AgentRuntime, granted: dict[str, Grant], approver: User
) -> None:  # S10
    rows = Grant.objects.count()

    removed = session_clear(runtime=runtime, session_id="s-1", actor=Actor.for_user(approver))

    assert removed == 3
    assert Grant.objects.count() == rows  # never deleted
    for key in ("turn", "session_allow", "session_deny"):
        grant = Grant.objects.get(pk=granted[key].pk)
        assert grant.revoked_at is not None
        assert (grant.revoked_by, grant.revoke_reason) == (approver, RevokeReason.CLEAR)
    for key in ("agent", "other_session"):
        assert Grant.objects.get(pk=granted[key].pk).revoked_at is None
    [event] = events(AuditAction.SESSION_CLEARED)
    assert (event.level, event.session_key, event.details, event.actor) == (
        AuditLevel.INFO,
        "s-1",
        {"removed": 3},
        approver,
    )
    assert skill_decisions(runtime, "read", "deploy", "notify", "wipe", session_id="s-1", turn_id="t-1") == {
        "read": (ASK, "DEFAULT"),
        "deploy": (ASK, "DEFAULT"),
        "notify": (ASK, "DEFAULT"),
        "wipe": (ALLOW, "AGENT"),
    }
    assert session_clear(runtime=runtime, session_id="s-1", actor=TEST_ACTOR) == 0
    assert events(AuditAction.SESSION_CLEARED)[-1].details == {"removed": 0}


def test_clearing_an_unknown_session_removes_nothing_and_is_audited(runtime: AgentRuntime) -> None:  # S10
    assert session_clear(runtime=runtime, session_id="nobody", actor=TEST_ACTOR) == 0
    [event] = events(AuditAction.SESSION_CLEARED)
    assert (event.session_key, event.details) == ("nobody", {"removed": 0})


def test_revoke_session_keeps_agent_grants_unless_asked(
    runtime: AgentRuntime, granted: dict[str, Grant]
) -> None:  # S10
    assert session_revoke(runtime=runtime, session_id="s-1", agent=False, actor=TEST_ACTOR) == (3, 0)
    [event] = events(AuditAction.SESSION_REVOKED)
    assert (event.level, event.session_key) == (AuditLevel.INFO, "s-1")
    assert event.details == {"removed_session": 3, "removed_agent": 0, "agent": False}
    assert Grant.objects.get(pk=granted["session_allow"].pk).revoke_reason == RevokeReason.REVOKE
    assert Grant.objects.get(pk=granted["agent"].pk).revoked_at is None

    assert session_revoke(runtime=runtime, session_id="s-2", agent=True, actor=TEST_ACTOR) == (1, 1)
    event = events(AuditAction.SESSION_REVOKED)[-1]
    assert event.level == AuditLevel.WARNING
    assert event.details == {"removed_session": 1, "removed_agent": 1, "agent": True}
    assert Grant.objects.get(pk=granted["agent"].pk).revoke_reason == RevokeReason.REVOKE_AGENT
    assert not active(runtime)


def test_revoke_agent_wide_removes_only_this_runtimes_agent_grants(
    runtime: AgentRuntime, other_runtime: AgentRuntime, granted: dict[str, Grant], operator: User
) -> None:  # S10
    theirs = open_skill_request(other_runtime, "wipe", principal=None)
    request_answer(request=theirs, user=operator, answer=ALWAYS)

    assert agent_grants_revoke(runtime=runtime, actor=Actor.for_user(operator)) == 1

    revoked = Grant.objects.get(pk=granted["agent"].pk)
    assert (revoked.revoked_by, revoked.revoke_reason) == (operator, RevokeReason.REVOKE_AGENT)
    assert len(active(runtime)) == 4  # the session and turn grants stay
    assert len(active(other_runtime, scope=GrantScope.AGENT)) == 1
    [event] = events(AuditAction.AGENT_GRANTS_REVOKED)
    assert (event.level, event.runtime, event.details) == (AuditLevel.WARNING, runtime, {"removed_agent": 1})
    assert agent_grants_revoke(runtime=runtime, actor=TEST_ACTOR) == 0


def test_revoking_one_grant(runtime: AgentRuntime, granted: dict[str, Grant], approver: User) -> None:  # S10
    grant = granted["session_deny"]

    assert grant_revoke(grant=grant, actor=Actor.for_user(approver))
    assert not grant_revoke(grant=grant, actor=Actor.for_user(approver))  # no longer in force

    grant.refresh_from_db()
    assert (grant.revoked_by, grant.revoke_reason) == (approver, RevokeReason.SINGLE)
    [event] = events(AuditAction.GRANT_REVOKED)
    assert (event.subject, event.session_key, event.details) == (
        "notify",
        "s-1",
        {"grant_id": grant.pk, "scope": "SESSION", "decision": "DENY"},
    )
    assert skill_decisions(runtime, "notify", "deploy", session_id="s-1") == {
        "notify": (ASK, "DEFAULT"),
        "deploy": (ALLOW, "SESSION"),
    }


def test_session_deny_beats_older_agent_allow(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S2
    pending = open_skill_request(runtime, "deploy", session_id="s-2")
    request_answer(request=open_skill_request(runtime, "deploy"), user=operator, answer=ALWAYS)
    assert skill_decisions(runtime, "deploy", session_id="s-2") == {"deploy": (ALLOW, "AGENT")}

    request_answer(request=pending, user=approver, answer=NO)

    agent = Grant.objects.get(scope=GrantScope.AGENT)
    deny = Grant.objects.get(scope=GrantScope.SESSION)
    assert agent.created_at <= deny.created_at
    assert agent.revoked_at is None
    assert skill_decisions(runtime, "deploy", session_id="s-2") == {"deploy": (DENY, "SESSION")}
    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-2") == {
        "deploy": (DENY, "INVOKING_SESSION")
    }
    assert skill_decisions(runtime, "deploy", session_id="s-3") == {"deploy": (ALLOW, "AGENT")}


@pytest.mark.parametrize("returning", [True, False], ids=["on-conflict", "savepoint"])
def test_a_grant_insert_steps_aside_for_a_held_key_only(
    runtime: AgentRuntime, approver: User, returning: bool, monkeypatch: pytest.MonkeyPatch
) -> None:  # S2, S4: one active grant per key; every other constraint still refuses
    if not returning:  # SQLite before 3.35 has no INSERT ... RETURNING: a savepoint instead
        if connection.vendor != "sqlite":
            pytest.skip("only an older SQLite inserts without RETURNING")
        monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    session = open_skill_request(runtime, "deploy").session

    def grant(**fields: object) -> Grant:
        key = {"runtime": runtime, "scope": "SESSION", "decision": ALLOW, "skill": "deploy"}
        return Grant(**{**key, "session": session, "origin": "ANSWER", "granted_by": approver, **fields})

    first = grant()
    assert rawsql.insert_unless_conflict(first)
    assert Grant.objects.get(pk=first.pk).decision == ALLOW
    assert not rawsql.insert_unless_conflict(grant(decision=DENY))  # the key is held
    assert list(Grant.objects.values_list("pk", flat=True)) == [first.pk]  # the transaction goes on
    refused = grant(scope="AGENT", skill="other")  # an AGENT grant with a session: a CHECK
    if returning:
        with pytest.raises(IntegrityError), transaction.atomic():
            rawsql.insert_unless_conflict(refused)
    else:  # a savepoint's insert cannot tell a CHECK from a conflict: refused all the same
        assert not rawsql.insert_unless_conflict(refused)
    assert Grant.objects.count() == 1


def test_a_new_answer_supersedes_the_grant_of_the_same_key(
    runtime: AgentRuntime, approver: User
) -> None:  # S4
    first = open_skill_request(runtime, "deploy")
    second = open_skill_request(runtime, "deploy")  # both asked before either was answered
    request_answer(request=first, user=approver, answer=FOR_SESSION)

    request_answer(request=second, user=approver, answer=NO)

    old = item(first).grant
    old.refresh_from_db()
    assert (old.revoke_reason, old.revoked_by) == (RevokeReason.SUPERSEDED, approver)
    assert old.revoked_at is not None
    [current] = active(runtime)
    assert (current.decision, current.request_id) == (DENY, second.pk)
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (DENY, "SESSION")}


# --- Idle TTL (S12) -------------------------------------------------------------------------------


def idle_for(runtime: AgentRuntime, session_id: str, seconds: int) -> None:
    Session.objects.filter(runtime=runtime, session_id=session_id).update(
        last_seen_at=timezone.now() - dt.timedelta(seconds=seconds)
    )


def test_session_grants_stop_counting_after_the_idle_ttl(
    runtime: AgentRuntime, approver: User, operator: User, settings: object
) -> None:  # S12
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 3600  # type: ignore[attr-defined]
    request_answer(request=open_skill_request(runtime, "deploy", turn_id="t-1"), user=approver, answer=ONCE)
    request_answer(request=open_skill_request(runtime, "notify"), user=approver, answer=FOR_SESSION)
    request_answer(request=open_skill_request(runtime, "wipe"), user=operator, answer=ALWAYS)
    skills = ("deploy", "notify", "wipe")

    idle_for(runtime, "s-1", 1800)  # within the TTL: still in force
    assert skill_decisions(runtime, *skills, session_id="s-1", turn_id="t-1") == {
        "deploy": (ALLOW, "TURN"),
        "notify": (ALLOW, "SESSION"),
        "wipe": (ALLOW, "AGENT"),
    }
    assert not events(AuditAction.SESSION_EXPIRED)

    idle_for(runtime, "s-1", 3700)  # past it: the session's grants no longer count, agent ones do
    expected = {"deploy": (ASK, "DEFAULT"), "notify": (ASK, "DEFAULT"), "wipe": (ALLOW, "AGENT")}
    assert skill_decisions(runtime, *skills, session_id="s-1", turn_id="t-1") == expected
    assert (
        skill_decisions(runtime, *skills, session_id=None, invoking_session_id="s-1", turn_id="t-1")
        == expected
    )

    # The next touch of the session revokes them for good and says so.
    session = session_touch(runtime=runtime, session_id="s-1", principal="alice")

    assert session is not None
    assert timezone.now() - session.last_seen_at < dt.timedelta(seconds=60)
    [event] = events(AuditAction.SESSION_EXPIRED)
    assert (event.session_key, event.details["removed"], event.actor_label) == ("s-1", 2, "session-ttl")
    assert sorted(g.revoke_reason for g in Grant.objects.filter(session=session)) == [
        RevokeReason.EXPIRED,
        RevokeReason.EXPIRED,
    ]
    assert skill_decisions(runtime, *skills, session_id="s-1", turn_id="t-1") == expected
    assert len(active(runtime)) == 1


def test_agent_grants_do_not_expire_with_idle_sessions(
    runtime: AgentRuntime, operator: User, settings: object
) -> None:  # S12
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 60  # type: ignore[attr-defined]
    request_answer(request=open_skill_request(runtime, "wipe"), user=operator, answer=ALWAYS)
    idle_for(runtime, "s-1", 10 * 365 * 24 * 3600)

    session_touch(runtime=runtime, session_id="s-1", principal=None)

    assert skill_decisions(runtime, "wipe", session_id="s-1") == {"wipe": (ALLOW, "AGENT")}
    assert not events(AuditAction.SESSION_EXPIRED)  # nothing of the session's to expire


# --- Who may answer (S13) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "principal", "allowed"),
    [
        ("alice", "alice", True),  # the principal
        ("bob", "alice", False),  # another approver
        ("olivia", "alice", True),  # an operator
        ("owen", "alice", False),  # the owner, for someone else's request
        ("audrey", "alice", False),  # an auditor, never
        ("owen", None, True),  # no principal: the owner...
        ("olivia", None, True),  # ... and operators
        ("bob", None, False),
        ("audrey", None, False),
        ("owen", "ghost", True),  # a principal naming nobody here: as if none
        ("bob", "ghost", False),
    ],
)
def test_who_may_answer(
    owned_runtime: AgentRuntime,
    owner: User,
    approver: User,
    other_approver: User,
    operator: User,
    auditor: User,
    who: str,
    principal: str | None,
    allowed: bool,
) -> None:  # S13
    user = User.objects.get(username=who)
    request = open_skill_request(owned_runtime, "deploy", principal=principal)

    if allowed:
        outcome = request_answer(request=request, user=user, answer=NO)
        assert [i.answered_by for i in outcome.written] == [user]
    else:
        with pytest.raises(NotAllowedError, match=NOT_YOURS_MESSAGE):
            request_answer(request=request, user=user, answer=NO)
        assert not Grant.objects.exists()
        assert not events(AuditAction.SKILL_GRANTED)
        assert status(request) == RequestStatus.PENDING


def test_a_deactivated_principal_leaves_the_request_to_operators_and_the_owner(
    owned_runtime: AgentRuntime, owner: User, approver: User
) -> None:  # S13
    request = open_skill_request(owned_runtime, "deploy", principal="alice")
    User.objects.filter(pk=approver.pk).update(is_active=False)
    approver.refresh_from_db()

    with pytest.raises(NotAllowedError):
        request_answer(request=request, user=approver, answer=NO)
    assert request_answer(request=request, user=owner, answer=NO).written


@pytest.mark.parametrize(
    ("who", "principal", "may_grant_agent"),
    [("olivia", "alice", True), ("owen", None, True), ("alice", "alice", False)],
)
def test_agent_scope_is_offered_and_accepted_only_for_operators_and_the_owner(
    owned_runtime: AgentRuntime,
    owner: User,
    approver: User,
    operator: User,
    who: str,
    principal: str | None,
    may_grant_agent: bool,
) -> None:  # S13
    user = User.objects.get(username=who)
    request = open_skill_request(owned_runtime, "deploy", principal=principal)

    assert (ALWAYS in answers_for(user, request, item(request))) is may_grant_agent
    if may_grant_agent:
        request_answer(request=request, user=user, answer=ALWAYS)
        assert Grant.objects.get().scope == GrantScope.AGENT
    else:
        message = ANSWER_NOT_OFFERED_MESSAGE.format(answer=ALWAYS.label, skill="deploy")
        with pytest.raises(NotAllowedError) as refused:
            request_answer(request=request, user=user, answer=ALWAYS)
        assert str(refused.value) == message
        assert not Grant.objects.exists()


def test_the_server_refuses_allow_once_without_a_turn(runtime: AgentRuntime, approver: User) -> None:  # S4
    request = open_skill_request(runtime, "deploy", turn_id=None)

    assert ONCE not in answers_for(approver, request, item(request))
    with pytest.raises(NotAllowedError):
        request_answer(request=request, user=approver, answer=ONCE)
    assert not Grant.objects.exists()


def test_answering_a_skill_the_request_does_not_name_is_refused(
    runtime: AgentRuntime, approver: User
) -> None:
    request = open_skill_request(runtime, "deploy")

    with pytest.raises(ApprovalError, match="Unknown skill"):
        request_answer(request=request, user=approver, answer=NO, skills=["deploy", "wipe"])
    assert not Grant.objects.exists()


# --- Rules ----------------------------------------------------------------------------------------


def version() -> int:
    return RuleSetVersion.objects.values_list("version", flat=True).first() or 0


def test_rule_changes_are_audited_and_the_chain_sees_them_at_once(
    runtime: AgentRuntime, operator: User, django_capture_on_commit_callbacks: Callable
) -> None:  # A1, S2
    actor = Actor.for_user(operator)
    # the index is now cached
    assert skill_decisions(runtime, "deploy-x", session_id=None) == {"deploy-x": (ASK, "DEFAULT")}
    seen = {version()}

    with django_capture_on_commit_callbacks(execute=True):
        rule = rules.rule_create(pattern="deploy-*", action=RuleAction.DENY, actor=actor, runtime=runtime)
    assert version() not in seen  # restamped: a stamp is never reused
    seen.add(version())
    assert skill_decisions(runtime, "deploy-x", session_id=None) == {"deploy-x": (DENY, "RULE")}
    [created] = events(AuditAction.RULE_CREATED)
    assert (created.actor, created.runtime, created.subject_type, created.subject) == (
        operator,
        runtime,
        "rule",
        "deploy-*",
    )
    assert created.details == {
        "runtime": "agent-one",
        "pattern": "deploy-*",
        "action": "DENY",
        "widest_scope": "AGENT",
        "approvers": 1,  # P3: one person, unless the rule says more
        "note": "",
    }

    stamp = version()

    with django_capture_on_commit_callbacks(execute=True):
        rules.rule_delete(rule=rule, actor=actor)
    assert version() != stamp
    assert skill_decisions(runtime, "deploy-x", session_id=None) == {"deploy-x": (ASK, "DEFAULT")}
    [deleted] = events(AuditAction.RULE_DELETED)
    assert (deleted.subject, deleted.details["before"]["action"]) == ("deploy-*", "DENY")


def test_a_duplicate_rule_is_refused_and_not_audited(runtime: AgentRuntime) -> None:
    rules.rule_create(pattern="deploy", action=RuleAction.DENY, actor=TEST_ACTOR, runtime=runtime)
    rules.rule_create(pattern="deploy", action=RuleAction.ALLOW, actor=TEST_ACTOR)  # global: a different key

    stamp = version()
    with pytest.raises(ValidationError, match="already exists for this runtime"):
        rules.rule_create(pattern="deploy", action=RuleAction.ASK, actor=TEST_ACTOR, runtime=runtime)
    with pytest.raises(ValidationError, match="already exists for every runtime"):
        rules.rule_create(pattern="deploy", action=RuleAction.ASK, actor=TEST_ACTOR)
    assert len(events(AuditAction.RULE_CREATED)) == 2
    assert version() == stamp


def test_an_allow_rule_decides_at_creation_and_a_deny_rule_too(
    runtime: AgentRuntime, django_capture_on_commit_callbacks: Callable
) -> None:  # S2, S11
    with django_capture_on_commit_callbacks(execute=True):
        rules.rule_create(pattern="read*", action=RuleAction.ALLOW, actor=TEST_ACTOR)
        rules.rule_create(pattern="wipe*", action=RuleAction.DENY, actor=TEST_ACTOR, runtime=runtime)

    request = open_skill_request(runtime, "read-file", "wipe-db", "deploy")

    assert [(i.skill, i.decision, i.source) for i in request.items.order_by("position")] == [
        ("read-file", ALLOW, DecisionSource.RULE),
        ("wipe-db", DENY, DecisionSource.RULE),
        ("deploy", "", ""),
    ]
    assert status(request) == RequestStatus.PENDING
    assert not Grant.objects.exists()  # a rule decides by itself; nothing is written


def test_a_rule_caps_the_widest_scope_an_answer_may_take(
    runtime: AgentRuntime, operator: User, django_capture_on_commit_callbacks: Callable
) -> None:  # S13 "only where no rule caps the skill"
    with django_capture_on_commit_callbacks(execute=True):
        rules.rule_create(
            pattern="deploy", action=RuleAction.ASK, widest_scope=GrantScope.SESSION, actor=TEST_ACTOR
        )
        rules.rule_create(
            pattern="wipe", action=RuleAction.ASK, widest_scope=GrantScope.TURN, actor=TEST_ACTOR
        )

    request = open_skill_request(runtime, "deploy", "wipe", "notify", turn_id="t-1")

    assert [(i.skill, i.widest_scope) for i in request.items.order_by("position")] == [
        ("deploy", GrantScope.SESSION),
        ("wipe", GrantScope.TURN),
        ("notify", GrantScope.AGENT),
    ]
    assert answers_for(operator, request, item(request, "deploy")) == [ONCE, FOR_SESSION, NO]
    assert answers_for(operator, request, item(request, "wipe")) == [ONCE, Answer.DENY_REQUEST]  # S13
    assert answers_for(operator, request, item(request, "notify")) == [ONCE, FOR_SESSION, ALWAYS, NO]
    with pytest.raises(NotAllowedError):
        request_answer(request=request, user=operator, answer=ALWAYS)  # not offered for deploy
    with pytest.raises(NotAllowedError):
        request_answer(request=request, user=operator, answer=FOR_SESSION, skills=["wipe"])
    assert not Grant.objects.exists()
    request_answer(request=request, user=operator, answer=ONCE, skills=["wipe"])
    assert Grant.objects.get().scope == GrantScope.TURN


def test_a_grant_that_replaces_another_says_which_in_its_event(
    runtime: AgentRuntime, approver: User
) -> None:  # A1, S4: nothing is replaced unsaid
    first = open_skill_request(runtime, "deploy")
    second = open_skill_request(runtime, "deploy")  # asked again before the first was answered
    request_answer(request=first, user=approver, answer=FOR_SESSION)
    allowed = item(first).grant

    request_answer(request=second, user=approver, answer=NO)

    denied = item(second).grant
    allowed.refresh_from_db()
    assert allowed.revoke_reason == RevokeReason.SUPERSEDED
    events = AuditEvent.objects.filter(action=AuditAction.SKILL_GRANTED).order_by("seq")
    assert [e.details.get("superseded_grant_ids") for e in events] == [None, [allowed.pk]]
    assert events.last().details["grant_id"] == denied.pk


def test_an_abort_deny_that_replaces_an_answer_says_which_in_its_event(
    runtime: AgentRuntime, approver: User
) -> None:  # A1, S9: the abort's DENY names the ALLOW it replaced
    first = open_skill_request(runtime, "deploy")
    second = open_skill_request(runtime, "deploy")
    request_answer(request=first, user=approver, answer=FOR_SESSION)
    allowed = item(first).grant
    ApprovalRequest.objects.filter(pk=second.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))

    assert request_expire_if_due(ApprovalRequest.objects.get(pk=second.pk))

    event = AuditEvent.objects.get(action=AuditAction.SKILL_ABORT_DENIED)
    assert event.details["superseded_grant_ids"] == [allowed.pk]


def _by_ids(runtime: AgentRuntime, **ids: str | None) -> dict[str, tuple[str, str]]:
    verdicts = decide_skills(
        runtime,
        SkillCall(
            skills=["deploy", "notify", "other"],
            session_id=ids.get("session_id"),
            invoking_session_id=ids.get("invoking_session_id"),
            principal=ids.get("principal"),
            turn_id=ids.get("turn_id"),
        ),
    )
    return {v.skill: (str(v.decision), str(v.source)) for v in verdicts}


def test_a_decision_by_ids_reads_everything_in_one_query_when_the_session_is_fresh(
    runtime: AgentRuntime, approver: User, django_assert_num_queries: Callable
) -> None:  # S2, S3: the API's decision path
    request_answer(
        request=open_skill_request(runtime, "deploy", session_id="s-0"), user=approver, answer=FOR_SESSION
    )
    request_answer(
        request=open_skill_request(runtime, "notify", session_id="s-1", turn_id="t-1"),
        user=approver,
        answer=ONCE,
    )
    _by_ids(runtime, session_id="s-1", invoking_session_id="s-0")  # warm the rule index

    with django_assert_num_queries(1):
        got = _by_ids(runtime, session_id="s-1", invoking_session_id="s-0", principal="alice", turn_id="t-1")

    assert got == {
        "deploy": ("ALLOW", "INVOKING_SESSION"),
        "notify": ("ALLOW", "TURN"),
        "other": ("ASK", "DEFAULT"),
    }
    assert _by_ids(runtime, session_id="s-1", turn_id="t-2")["notify"] == ("ASK", "DEFAULT")


def test_a_decision_by_ids_writes_what_the_session_needs_first(
    runtime: AgentRuntime, approver: User, settings: object
) -> None:  # S12: unseen, principal to fix or refuse, idle past the TTL
    assert _by_ids(runtime, session_id="s-new", principal="alice")["deploy"] == ("ASK", "DEFAULT")
    assert Session.objects.get(session_id="s-new").principal == "alice"  # created at first sight
    with pytest.raises(PrincipalConflictError):
        _by_ids(runtime, session_id="s-new", principal="bob")

    request_answer(
        request=open_skill_request(runtime, "deploy", session_id="s-1"), user=approver, answer=FOR_SESSION
    )
    assert _by_ids(runtime, session_id="s-1")["deploy"] == ("ALLOW", "SESSION")
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 600  # type: ignore[attr-defined]
    Session.objects.filter(session_id="s-1").update(last_seen_at=timezone.now() - dt.timedelta(hours=1))
    assert _by_ids(runtime, session_id="s-1")["deploy"] == ("ASK", "DEFAULT")  # its approvals expired
    assert Grant.objects.get(session__session_id="s-1").revoke_reason == RevokeReason.EXPIRED


# --- A late answer holds (S7, S12) ----------------------------------------------------------------


def test_an_answer_after_waiting_past_the_idle_ttl_is_what_the_chain_answers(
    runtime: AgentRuntime, approver: User, settings: object
) -> None:  # S7, S12: the request reported ALLOW/SESSION, the chain answered ASK
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 600  # type: ignore[attr-defined]
    request = open_skill_request(runtime, "deploy")
    idle_for(runtime, "s-1", 900)  # the request waited longer than the idle TTL

    request_answer(request=request, user=approver, answer=FOR_SESSION)

    assert (item(request).decision, item(request).scope, status(request)) == (
        ALLOW,
        GrantScope.SESSION,
        RequestStatus.ANSWERED,
    )
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}
    assert _by_ids(runtime, session_id="s-1")["deploy"] == (ALLOW, "SESSION")
    session_touch(runtime=runtime, session_id="s-1", principal=None)  # the next touch
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}
    assert not events(AuditAction.SESSION_EXPIRED)
    assert active(runtime)[0].revoked_at is None


def test_a_pending_request_keeps_its_session_from_idling(
    runtime: AgentRuntime, approver: User, settings: object
) -> None:  # S12: a session with a pending request is not idle
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 600  # type: ignore[attr-defined]
    request_answer(request=open_skill_request(runtime, "notify"), user=approver, answer=FOR_SESSION)
    pending = open_skill_request(runtime, "deploy")
    idle_for(runtime, "s-1", 900)

    session_touch(runtime=runtime, session_id="s-1", principal=None)

    assert skill_decisions(runtime, "notify", session_id="s-1") == {"notify": (ALLOW, "SESSION")}
    assert not events(AuditAction.SESSION_EXPIRED)
    # Once nothing is pending, idling past the TTL expires the session's approvals as before.
    request_cancel(request=pending, actor=TEST_ACTOR)
    idle_for(runtime, "s-1", 900)
    session_touch(runtime=runtime, session_id="s-1", principal=None)
    assert skill_decisions(runtime, "notify", "deploy", session_id="s-1") == {
        "notify": (ASK, "DEFAULT"),
        "deploy": (ASK, "DEFAULT"),
    }
    assert len(events(AuditAction.SESSION_EXPIRED)) == 1


def test_a_forks_late_answer_keeps_the_invoking_session_alive(
    runtime: AgentRuntime, approver: User, settings: object
) -> None:  # S3, S12: the answer lands on the invoking session, and counts as its activity
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 600  # type: ignore[attr-defined]
    session_touch(runtime=runtime, session_id="s-1", principal="alice")
    fork = open_skill_request(runtime, "deploy", session_id=None, invoking_session_id="s-1")
    idle_for(runtime, "s-1", 900)

    request_answer(request=fork, user=approver, answer=FOR_SESSION)

    assert skill_decisions(runtime, "deploy", session_id=None, invoking_session_id="s-1") == {
        "deploy": (ALLOW, "INVOKING_SESSION")
    }
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}


# --- Two requests for the same key (S2) -----------------------------------------------------------


def two_pending(runtime: AgentRuntime) -> tuple[ApprovalRequest, ApprovalRequest]:
    return open_skill_request(runtime, "deploy"), open_skill_request(runtime, "deploy")


def test_a_second_allow_is_answered_by_the_first_ones_grant(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S2, S7: the second answer finds the first's grant; nothing stuck, nothing duplicated
    first, second = two_pending(runtime)
    request_answer(request=first, user=operator, answer=FOR_SESSION)
    grant = item(first).grant

    outcome = request_answer(request=second, user=approver, answer=FOR_SESSION)

    assert [i.skill for i in outcome.written] == ["deploy"]
    assert not outcome.failed
    assert outcome.request_answered
    assert outcome.notes == [SETTLED_SAME_MESSAGE.format(skill="deploy", who="olivia", how=FOR_SESSION.label)]
    assert [g.pk for g in active(runtime)] == [grant.pk]  # one grant, not superseded
    row = item(second)
    assert (row.decision, row.scope, row.grant_id, row.answered_by) == (
        ALLOW,
        GrantScope.SESSION,
        grant.pk,
        approver,
    )
    assert status(second) == RequestStatus.ANSWERED
    [event] = events(AuditAction.SKILL_ANSWER_SETTLED)
    assert (event.level, event.actor, event.details["grant_id"], event.details["stored"]) == (
        AuditLevel.INFO,
        approver,
        grant.pk,
        False,
    )
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (ALLOW, "SESSION")}


def test_an_allow_meeting_a_deny_made_now_is_answered_deny_and_told_plainly(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S2: a session DENY made now beats an approval
    first, second = two_pending(runtime)
    request_answer(request=first, user=approver, answer=NO)
    deny = item(first).grant

    outcome = request_answer(request=second, user=operator, answer=FOR_SESSION)

    assert outcome.notes == [SETTLED_DENY_STANDS_MESSAGE.format(skill="deploy", who="alice")]
    assert "revoke that denial" in outcome.notes[0]  # what to do instead
    assert [g.pk for g in active(runtime)] == [deny.pk]
    assert (item(second).decision, item(second).grant_id) == (DENY, deny.pk)
    assert status(second) == RequestStatus.ANSWERED
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (DENY, "SESSION")}


def test_a_deny_replaces_an_allow_made_a_moment_before_and_says_so(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S2
    first, second = two_pending(runtime)
    request_answer(request=first, user=operator, answer=FOR_SESSION)

    outcome = request_answer(request=second, user=approver, answer=NO)

    assert outcome.notes == [DENY_REPLACED_MESSAGE.format(skill="deploy", who="olivia")]
    assert skill_decisions(runtime, "deploy", session_id="s-1") == {"deploy": (DENY, "SESSION")}


def test_deny_this_request_under_a_turn_cap_names_the_session_and_stores_nothing(
    runtime: AgentRuntime, approver: User
) -> None:  # S13: a cap at TURN leaves no session Deny; the refusal is for this request only
    rules.rule_create(
        pattern="wipe", action="ASK", widest_scope=GrantScope.TURN, actor=TEST_ACTOR, runtime=None
    )
    request = open_skill_request(runtime, "wipe", turn_id="t-1")
    assert answers_for(approver, request, item(request, "wipe")) == [ONCE, Answer.DENY_REQUEST]

    request_answer(request=request, user=approver, answer=Answer.DENY_REQUEST)

    assert not Grant.objects.exists()
    [event] = events(AuditAction.SKILL_REQUEST_DENIED)
    assert (event.session_key, event.subject, event.details["scope"]) == ("s-1", "wipe", "REQUEST")
    assert skill_decisions(runtime, "wipe", session_id="s-1", turn_id="t-1") == {"wipe": (ASK, "RULE")}
