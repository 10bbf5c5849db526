"""Undo of an answer (S14): the person who gave an allow takes it back, just after, as the
revoke of that one grant, audited as such; nobody else, never a deny, never once the time
has passed."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy
from aimon_admin.approvals.choices import Answer, GrantDecision, GrantScope, RevokeReason
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.services import NotAllowedError, grant_undo, request_answer
from aimon_admin.approvals.services.errors import (
    UNDO_DENY_MESSAGE,
    UNDO_NOT_THEIRS_MESSAGE,
    UNDO_TOO_LATE_MESSAGE,
)
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import open_skill_request, skill_decisions

pytestmark = pytest.mark.django_db
MINUTE = dt.timedelta(minutes=1)


def answered(request: ApprovalRequest, user: User, answer: Answer) -> dict[str, Grant]:
    """Answer every skill of `request` as `user`; the grants it wrote, by skill."""
    request_answer(request=request, user=user, answer=answer)
    return {grant.skill: grant for grant in Grant.objects.filter(request=request)}


def revokes() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=AuditAction.GRANT_REVOKED).order_by("seq"))


def aged(grant: Grant, age: dt.timedelta) -> Grant:
    Grant.objects.filter(pk=grant.pk).update(created_at=timezone.now() - age)
    grant.refresh_from_db()
    return grant


@pytest.mark.parametrize(
    ("decision", "given_by_them", "from_answer", "age", "refusal"),
    [
        (GrantDecision.ALLOW, True, True, MINUTE, None),
        (GrantDecision.ALLOW, True, True, policy.JUST_ANSWERED_FOR, None),
        (GrantDecision.ALLOW, True, True, policy.JUST_ANSWERED_FOR + MINUTE, policy.UndoRefusal.TOO_LATE),
        (GrantDecision.ALLOW, False, True, MINUTE, policy.UndoRefusal.NOT_THEIRS),
        (GrantDecision.ALLOW, True, False, MINUTE, policy.UndoRefusal.NOT_THEIRS),
        (GrantDecision.DENY, True, True, MINUTE, policy.UndoRefusal.DENY),
        # Someone else's deny: saying it is a deny would tell them of an answer not theirs.
        (GrantDecision.DENY, False, True, MINUTE, policy.UndoRefusal.NOT_THEIRS),
    ],
)
def test_undo_refusal_table(
    decision: GrantDecision, given_by_them: bool, from_answer: bool, age: dt.timedelta, refusal: object
) -> None:  # S14
    assert (
        policy.undo_refusal(decision=decision, given_by_them=given_by_them, from_answer=from_answer, age=age)
        == refusal
    )


def test_undo_revokes_exactly_the_grant_that_answer_wrote_and_audits_the_revoke(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S14
    grants = answered(open_skill_request(runtime, "deploy", "publish"), approver, Answer.ALLOW_SESSION)
    elsewhere = answered(
        open_skill_request(runtime, "deploy", session_id="s-2"), approver, Answer.ALLOW_SESSION
    )
    agent_wide = answered(open_skill_request(runtime, "lint"), operator, Answer.ALLOW_AGENT)

    assert grant_undo(grant=grants["deploy"], user=approver)

    undone = Grant.objects.get(pk=grants["deploy"].pk)
    assert (undone.revoked_by, undone.revoke_reason) == (approver, RevokeReason.SINGLE)
    still = [grants["publish"], elsewhere["deploy"], agent_wide["lint"]]
    assert list(Grant.objects.active().order_by("pk")) == sorted(still, key=lambda g: g.pk)
    assert skill_decisions(runtime, "deploy", "publish", "lint") == {
        "deploy": ("ASK", "DEFAULT"),
        "publish": ("ALLOW", "SESSION"),
        "lint": ("ALLOW", "AGENT"),
    }
    [event] = revokes()
    assert (event.actor, event.level, event.subject, event.session_key) == (
        approver,
        AuditLevel.INFO,
        "deploy",
        "s-1",
    )
    assert event.details == {
        "grant_id": undone.pk,
        "scope": GrantScope.SESSION,
        "decision": GrantDecision.ALLOW,
        "undo": True,
        "request_id": str(undone.request_id),
    }


def test_undo_of_an_agent_wide_allow_takes_back_that_one_from_every_session(
    runtime: AgentRuntime, operator: User
) -> None:  # S14
    grants = answered(
        open_skill_request(runtime, "deploy", "lint", principal=None), operator, Answer.ALLOW_AGENT
    )
    assert grant_undo(grant=grants["deploy"], user=operator)
    assert skill_decisions(runtime, "deploy", "lint", session_id="s-9") == {
        "deploy": ("ASK", "DEFAULT"),
        "lint": ("ALLOW", "AGENT"),
    }


def test_only_the_person_who_answered_may_undo(
    runtime: AgentRuntime, approver: User, other_approver: User, operator: User
) -> None:  # S14
    grant = answered(open_skill_request(runtime, "deploy"), approver, Answer.ALLOW_SESSION)["deploy"]
    for someone_else in (other_approver, operator):
        with pytest.raises(NotAllowedError) as refused:
            grant_undo(grant=grant, user=someone_else)
        assert str(refused.value) == UNDO_NOT_THEIRS_MESSAGE
    assert Grant.objects.get(pk=grant.pk).revoked_at is None
    assert revokes() == []


def test_no_undo_once_the_time_has_passed(runtime: AgentRuntime, approver: User) -> None:  # S14
    grants = answered(open_skill_request(runtime, "deploy", "publish"), approver, Answer.ALLOW_SESSION)
    late = aged(grants["deploy"], policy.JUST_ANSWERED_FOR + dt.timedelta(seconds=1))
    with pytest.raises(NotAllowedError) as refused:
        grant_undo(grant=late, user=approver)
    assert str(refused.value) == UNDO_TOO_LATE_MESSAGE.format(minutes=10)
    assert Grant.objects.get(pk=late.pk).revoked_at is None
    assert revokes() == []

    just_in_time = aged(grants["publish"], policy.JUST_ANSWERED_FOR - dt.timedelta(seconds=5))
    assert grant_undo(grant=just_in_time, user=approver)


def test_a_deny_is_not_undone(runtime: AgentRuntime, approver: User) -> None:  # S14
    grant = answered(open_skill_request(runtime, "deploy"), approver, Answer.DENY)["deploy"]
    with pytest.raises(NotAllowedError) as refused:
        grant_undo(grant=grant, user=approver)
    assert str(refused.value) == UNDO_DENY_MESSAGE
    assert skill_decisions(runtime, "deploy") == {"deploy": ("DENY", "SESSION")}


def test_an_undo_of_an_allow_no_longer_in_force_revokes_nothing_more(
    runtime: AgentRuntime, approver: User
) -> None:  # S14
    grant = answered(open_skill_request(runtime, "deploy"), approver, Answer.ALLOW_SESSION)["deploy"]
    assert grant_undo(grant=grant, user=approver)
    assert not grant_undo(grant=grant, user=approver)
    assert len(revokes()) == 1
