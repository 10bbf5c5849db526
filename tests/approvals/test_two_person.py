"""The two-person rule (P3): a rule may need 2 or 3 distinct people to allow.

The request shows how many have allowed; the request's own principal never counts; one
Deny denies; the grant is written, audited, with the last allow needed; each allow is
audited as it comes. Service-level; the pages are in test_two_person_views.py, the race
on PostgreSQL in test_two_person_race.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, GrantDecision, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalAllow, ApprovalItem, ApprovalRequest, Grant, SkillRule
from aimon_admin.approvals.services import (
    NotAllowedError,
    ToolCall,
    request_answer,
    skills_decide,
    tool_call_decide,
)
from aimon_admin.approvals.services.errors import (
    ALLOW_MUST_MATCH_MESSAGE,
    ALREADY_ALLOWED_MESSAGE,
    OWN_REQUEST_ALLOW_MESSAGE,
)
from aimon_admin.approvals.services.sessions import session_touch
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import open_skill_request, open_tool_request
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db
PUSH = {"command": "git push origin main"}


@pytest.fixture(autouse=True)
def named_subjects() -> None:
    """The tools these rules name have subject arguments (U1: a pattern rule on a tool with
    none is refused, as it could never match)."""
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server="git", tool="git_push", argument="remote", actor=TEST_ACTOR)


@pytest.fixture
def operators(make_user: Callable[..., User]) -> tuple[User, User, User]:
    return (
        make_user("olivia", Role.OPERATOR),
        make_user("oscar", Role.OPERATOR),
        make_user("otto", Role.OPERATOR),
    )


def skill_rule(approvers: int, pattern: str = "deploy") -> SkillRule:
    return rules.rule_create(pattern=pattern, action=RuleAction.ASK, actor=TEST_ACTOR, approvers=approvers)


def item_of(request: ApprovalRequest, skill: str = "deploy") -> ApprovalItem:
    return ApprovalItem.objects.get(request=request, skill=skill)


def status(request: ApprovalRequest) -> str:
    return ApprovalRequest.objects.values_list("status", flat=True).get(pk=request.pk)


def allow_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=AuditAction.APPROVAL_ALLOW_RECORDED).order_by("seq"))


def test_the_rule_count_is_stored_on_the_item_when_the_request_opens(runtime: AgentRuntime) -> None:  # P3
    rule = skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    assert item_of(request).approvers == 2
    # A later rule for it leaves the open request as it was opened.
    rules.rule_delete(rule=rule, actor=TEST_ACTOR)
    skill_rule(3)
    assert item_of(request).approvers == 2
    assert item_of(open_skill_request(runtime, "deploy")).approvers == 3


def test_a_skill_with_no_rule_needs_one_person(runtime: AgentRuntime) -> None:  # P3
    skill_rule(2, pattern="deploy")
    request = open_skill_request(runtime, "deploy", "lint")
    assert (item_of(request).approvers, item_of(request, "lint").approvers) == (2, 1)


def test_first_allow_is_recorded_and_audited_and_the_request_stays_pending(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: "1 of 2"; each allow audited as it comes
    skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    outcome = request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    assert outcome.written == []
    assert outcome.allows_recorded == [("deploy", 1, 2)]
    assert not outcome.request_answered
    assert status(request) == RequestStatus.PENDING
    item = item_of(request)
    assert (item.decision, item.allows_given) == ("", 1)
    assert Grant.objects.filter(request=request).count() == 0
    (event,) = allow_events()
    assert event.details["given"] == 1
    assert event.details["needed"] == 2
    assert event.details["allowed_by"] == ["olivia"]
    assert event.details["answer"] == "ALLOW_SESSION"
    assert event.actor_label.endswith("olivia") or "olivia" in event.actor_label


def test_the_second_allow_writes_the_grant_in_the_same_transaction(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: the grant is written, audited, when the Nth allow arrives
    skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    outcome = request_answer(request=request, user=operators[1], answer=Answer.ALLOW_SESSION)
    assert [i.skill for i in outcome.written] == ["deploy"]
    assert outcome.request_answered
    assert status(request) == RequestStatus.ANSWERED
    (grant,) = Grant.objects.filter(request=request)
    assert (grant.decision, grant.scope, grant.granted_by) == (GrantDecision.ALLOW, "SESSION", operators[1])
    item = item_of(request)
    assert (item.decision, item.allows_given, item.answered_by) == ("ALLOW", 2, operators[1])
    events = allow_events()
    assert [(e.details["given"], e.details["allowed_by"]) for e in events] == [
        (1, ["olivia"]),
        (2, ["olivia", "oscar"]),
    ]
    granted = AuditEvent.objects.get(action=AuditAction.SKILL_GRANTED)
    assert granted.seq > events[-1].seq
    assert granted.details["grant_id"] == grant.pk


def test_three_people_needed_for_three(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3
    skill_rule(3)
    request = open_skill_request(runtime, "deploy")
    for user in operators[:2]:
        request_answer(request=request, user=user, answer=Answer.ALLOW_AGENT)
    assert status(request) == RequestStatus.PENDING
    assert not Grant.objects.filter(request=request).exists()
    request_answer(request=request, user=operators[2], answer=Answer.ALLOW_AGENT)
    assert status(request) == RequestStatus.ANSWERED
    assert Grant.objects.filter(request=request, scope="AGENT").count() == 1


def test_the_requests_own_principal_never_counts(
    runtime: AgentRuntime, make_user: Callable[..., User], operators: tuple[User, User, User]
) -> None:  # P3: the request's own principal is never one of them
    principal = make_user("paula", Role.OPERATOR)
    skill_rule(2)
    request = open_skill_request(runtime, "deploy", principal="paula")
    with pytest.raises(NotAllowedError) as refused:
        request_answer(request=request, user=principal, answer=Answer.ALLOW_SESSION)
    assert str(refused.value) == OWN_REQUEST_ALLOW_MESSAGE.format(skill="deploy", needed=2)
    assert not ApprovalAllow.objects.exists()
    assert item_of(request).allows_given == 0


def test_the_sessions_principal_never_counts_either(
    runtime: AgentRuntime, make_user: Callable[..., User], operators: tuple[User, User, User]
) -> None:  # P3, S13: the request's principal, else its session's
    paula = make_user("paula", Role.OPERATOR)
    open_skill_request(runtime, "deploy", principal="paula")  # fixes s-1's principal
    skill_rule(2)
    request = open_skill_request(runtime, "deploy", principal=None)
    ApprovalRequest.objects.filter(pk=request.pk).update(principal="")  # as if opened with none
    request.refresh_from_db()
    with pytest.raises(NotAllowedError, match="people other than you"):
        request_answer(request=request, user=paula, answer=Answer.ALLOW_SESSION)


def test_the_principal_may_still_deny(runtime: AgentRuntime, make_user: Callable[..., User]) -> None:  # P3
    principal = make_user("paula", Role.OPERATOR)
    skill_rule(2)
    request = open_skill_request(runtime, "deploy", principal="paula")
    request_answer(request=request, user=principal, answer=Answer.DENY)
    assert item_of(request).decision == GrantDecision.DENY
    assert status(request) == RequestStatus.ANSWERED


def test_the_same_person_cannot_allow_twice(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3
    skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    with pytest.raises(NotAllowedError) as refused:
        request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    assert str(refused.value) == ALREADY_ALLOWED_MESSAGE.format(skill="deploy", given=1, needed=2)
    assert item_of(request).allows_given == 1
    assert len(allow_events()) == 1


def test_one_allow_per_person_is_held_by_the_database(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: distinct people, whatever writes around the service
    skill_rule(2)
    item = item_of(open_skill_request(runtime, "deploy"))
    ApprovalAllow.objects.create(item=item, user=operators[0], answer=Answer.ALLOW_SESSION)
    with pytest.raises(IntegrityError), transaction.atomic():
        ApprovalAllow.objects.create(item=item, user=operators[0], answer=Answer.ALLOW_SESSION)


def test_a_later_allow_must_match_the_first(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3
    skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    with pytest.raises(NotAllowedError) as refused:
        request_answer(request=request, user=operators[1], answer=Answer.ALLOW_AGENT)
    assert str(refused.value) == ALLOW_MUST_MATCH_MESSAGE.format(
        skill="deploy", who="olivia", first="Allow for this session", needed=2
    )
    assert "Deny" in str(refused.value)
    assert item_of(request).allows_given == 1
    assert not Grant.objects.filter(request=request).exists()


def test_one_deny_denies_and_the_partial_allows_stay_in_the_audit(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: one Deny denies
    skill_rule(3)
    request = open_skill_request(runtime, "deploy")
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    request_answer(request=request, user=operators[1], answer=Answer.ALLOW_SESSION)
    outcome = request_answer(request=request, user=operators[2], answer=Answer.DENY)
    assert outcome.request_answered
    assert status(request) == RequestStatus.ANSWERED
    (grant,) = Grant.objects.filter(request=request)
    assert grant.decision == GrantDecision.DENY
    assert [e.details["given"] for e in allow_events()] == [1, 2]
    assert ApprovalAllow.objects.filter(item__request=request).count() == 2


def test_a_deny_by_someone_who_already_allowed_denies(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: anyone who may answer denies at once
    skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    request_answer(request=request, user=operators[0], answer=Answer.DENY)
    assert item_of(request).decision == GrantDecision.DENY


def test_an_allow_after_the_request_closed_is_refused(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: nothing counted on a closed request
    skill_rule(2)
    request = open_skill_request(runtime, "deploy")
    request_answer(request=request, user=operators[0], answer=Answer.DENY)
    with pytest.raises(Exception, match="already answered"):
        request_answer(request=request, user=operators[1], answer=Answer.ALLOW_SESSION)
    assert not ApprovalAllow.objects.exists()


def test_answer_all_counts_the_several_and_answers_the_single(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3: an item of one person is answered at once, the other waits
    skill_rule(2)
    request = open_skill_request(runtime, "deploy", "lint")
    outcome = request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    assert [i.skill for i in outcome.written] == ["lint"]
    assert outcome.allows_recorded == [("deploy", 1, 2)]
    assert status(request) == RequestStatus.PENDING
    outcome = request_answer(request=request, user=operators[1], answer=Answer.ALLOW_SESSION)
    assert [i.skill for i in outcome.written] == ["deploy"]
    assert outcome.already_answered[0].skill == "lint"
    assert status(request) == RequestStatus.ANSWERED


def test_approvers_outside_one_to_three_are_refused(runtime: AgentRuntime) -> None:  # P3
    for bad in (0, 4):
        with pytest.raises(ValidationError, match="People who must allow"):
            skill_rule(bad)
    skill_rule(2)
    created = AuditEvent.objects.get(action=AuditAction.RULE_CREATED)
    assert created.details["approvers"] == 2


def test_the_database_refuses_a_count_outside_one_to_three(runtime: AgentRuntime) -> None:  # P3
    rule = skill_rule(1)
    with pytest.raises(IntegrityError), transaction.atomic():
        SkillRule.objects.filter(pk=rule.pk).update(approvers=4)


# --- Tool requests ------------------------------------------------------------------------------


@pytest.fixture
def bash(runtime: AgentRuntime) -> None:
    local_tools_replace(runtime=runtime, tools=[{"name": "Bash"}], actor=TEST_ACTOR)


@pytest.mark.usefixtures("bash")
def test_a_tool_rule_needing_two_people(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3
    rule = rules.tool_rule_create(
        text="Bash(git push:*)", action=RuleAction.ASK, actor=TEST_ACTOR, approvers=2
    )
    assert AuditEvent.objects.get(action=AuditAction.TOOL_RULE_CREATED).details["approvers"] == 2
    request = open_tool_request(runtime, "Bash", PUSH)
    assert item_of(request, "Bash").approvers == 2
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION, pattern="git push:*")
    with pytest.raises(NotAllowedError, match="must be the same"):
        request_answer(request=request, user=operators[1], answer=Answer.ALLOW_CALL)
    assert status(request) == RequestStatus.PENDING
    request_answer(request=request, user=operators[1], answer=Answer.ALLOW_SESSION, pattern="git push:*")
    assert status(request) == RequestStatus.ANSWERED
    (grant,) = Grant.objects.filter(request=request)
    assert (grant.pattern, grant.decision) == ("git push:*", GrantDecision.ALLOW)
    (first, second) = allow_events()
    assert first.subject == "Bash(git push:*)"
    assert second.details["given"] == 2
    rules.rule_delete(rule=rule, actor=TEST_ACTOR)
    rules.tool_rule_create(text="Bash(git push:*)", action=RuleAction.ASK, actor=TEST_ACTOR)
    assert (
        item_of(open_tool_request(runtime, "Bash", {"command": "git push origin dev"}), "Bash").approvers == 1
    )


@pytest.mark.usefixtures("bash")
def test_allow_this_call_by_two_people(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3
    rules.tool_rule_create(text="Bash(git push:*)", action=RuleAction.ASK, actor=TEST_ACTOR, approvers=2)
    request = open_tool_request(runtime, "Bash", PUSH)
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_CALL)
    assert status(request) == RequestStatus.PENDING
    request_answer(request=request, user=operators[1], answer=Answer.ALLOW_CALL)
    item = item_of(request, "Bash")
    assert (item.decision, item.scope, status(request)) == ("ALLOW", "CALL", RequestStatus.ANSWERED)


def test_an_allow_rule_needing_two_people_asks_them_rather_than_allowing(
    runtime: AgentRuntime, operators: tuple[User, User, User]
) -> None:  # P3, fail closed: an ALLOW that needs two people is never an answer by itself
    rules.rule_create(pattern="deploy", action=RuleAction.ALLOW, actor=TEST_ACTOR, approvers=2)
    session = session_touch(runtime=runtime, session_id="s-1", principal="alice")
    [verdict] = skills_decide(
        runtime=runtime, skills=["deploy"], session=session, invoking_session=None, turn_id=None
    )
    assert verdict.decision == "ASK"
    request = open_skill_request(runtime, "deploy")
    assert item_of(request).approvers == 2
    request_answer(request=request, user=operators[0], answer=Answer.ALLOW_SESSION)
    assert status(request) == RequestStatus.PENDING
    request_answer(request=request, user=operators[1], answer=Answer.ALLOW_SESSION)
    assert status(request) == RequestStatus.ANSWERED


@pytest.mark.usefixtures("bash")
def test_a_tool_allow_rule_needing_two_people_asks_attended_and_denies_unattended(
    runtime: AgentRuntime,
) -> None:  # P3, U5: nothing but people turns it into an ALLOW; unattended nobody is there to ask
    for unattended in (False, True):
        rules.tool_rule_create(
            text="Bash(git push:*)",
            action=RuleAction.ALLOW,
            actor=TEST_ACTOR,
            approvers=2,
            runtime=runtime if unattended else None,
            unattended=unattended,
        )
    call = {"command": "git push origin main"}
    attended = tool_call_decide(
        runtime, ToolCall(tool="Bash", session_id="s-1", principal="alice", arguments=call)
    )
    assert attended.verdict.decision == "ASK"
    unattended_call = tool_call_decide(runtime, ToolCall(tool="Bash", arguments=call))
    assert unattended_call.verdict.decision == "DENY"
    assert item_of(open_tool_request(runtime, "Bash", PUSH), "Bash").approvers == 2
