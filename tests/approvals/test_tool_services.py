"""Tool calls that ask, at the service layer (U1-U7): the tool chain with its sessions, rules,
grants and call approvals; tool requests opened, answered, aborted; their audit."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules, services
from aimon_admin.approvals.choices import (
    Answer,
    GrantDecision,
    GrantKind,
    GrantOrigin,
    GrantScope,
    ItemScope,
    RequestKind,
    RequestStatus,
    RuleAction,
)
from aimon_admin.approvals.models import ApprovalRequest, Grant, Session, ToolRule
from aimon_admin.approvals.services.tool_decisions import APPROVAL_NOT_USED_NOTE, REPLAY_NOT_IDEMPOTENT_NOTE
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import decide_tool_call, open_skill_request, open_tool_request
from tests.conftest import TEST_ACTOR

BASH = {"name": "Bash"}  # every axis undeclared: MUTATING, DESTRUCTIVE, NON_IDEMPOTENT
EDIT = {
    "name": "Edit",
    "side_effect_level": "MUTATING",
    "destructive_behavior": "NON_DESTRUCTIVE",
    "idempotency_behavior": "IDEMPOTENT",
}
READ = {"name": "Read", "side_effect_level": "READ_ONLY"}
PUSH = {"command": "git push origin main"}


@pytest.fixture
def tools(runtime: AgentRuntime, other_runtime: AgentRuntime) -> None:
    for each in (runtime, other_runtime):
        local_tools_replace(runtime=each, tools=[BASH, EDIT, READ], actor=TEST_ACTOR)
    ToolSubject.objects.create(server="", tool="Bash", argument="command")
    ToolSubject.objects.create(server="", tool="Edit", argument="path")


def tool_rule(text_tool: str, pattern: str, action: str, **fields: Any) -> ToolRule:
    rule = ToolRule.objects.create(tool=text_tool, pattern=pattern, action=action, **fields)
    rules.rule_index_reset()  # made around the services: the cached index is forgotten by hand
    return rule


def answer(
    request: ApprovalRequest, user: User, how: Answer, pattern: str | None = None
) -> services.AnswerOutcome:
    return services.request_answer(request=request, user=user, answer=how, pattern=pattern)


def what(decided: services.ToolCallDecision) -> tuple[str, str, str]:
    verdict = decided.verdict
    return verdict.decision.value, verdict.reason.value, verdict.source.value


pytestmark = pytest.mark.usefixtures("tools")


# --- The chain (U, U1) ---------------------------------------------------------------------------


def test_without_rules_or_grants_the_gate_answers_as_before(runtime: AgentRuntime) -> None:  # T7, T8
    assert what(decide_tool_call(runtime, "Bash", PUSH)) == ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", "GATE")
    assert what(decide_tool_call(runtime, "Bash", session_id=None)) == (
        "DENY",
        "UNATTENDED_NO_CHANNEL",
        "GATE",
    )
    assert what(decide_tool_call(runtime, "Read")) == ("ALLOW", "READ_ONLY_EXEMPT", "GATE")


def test_a_deny_rule_on_the_subject_denies_and_says_which(runtime: AgentRuntime) -> None:  # U1
    rule = tool_rule("Bash", "rm:*", RuleAction.DENY)

    decided = decide_tool_call(runtime, "Bash", {"command": "rm -rf /"})

    assert what(decided) == ("DENY", "DENIED_BY_RULE", "RULE")
    assert decided.verdict.rule is not None
    assert decided.verdict.rule.id == rule.pk
    assert what(decide_tool_call(runtime, "Bash", PUSH)) == ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", "GATE")


def test_an_allow_rule_answers_its_pattern_only(runtime: AgentRuntime) -> None:  # U1
    tool_rule("Bash", "git status:*", RuleAction.ALLOW)

    assert what(decide_tool_call(runtime, "Bash", {"command": "git status --short"})) == (
        "ALLOW",
        "ALLOWED_BY_RULE",
        "RULE",
    )
    # An ALLOW's wildcard never stands for a command chained on.
    assert what(decide_tool_call(runtime, "Bash", {"command": "git status; rm -rf /"}))[0] == "ASK"


def test_a_subject_absent_or_not_text_matches_no_pattern_and_says_so(runtime: AgentRuntime) -> None:  # U1
    tool_rule("Bash", "git status:*", RuleAction.ALLOW)

    absent = decide_tool_call(runtime, "Bash", {"cmd": "git status"})
    not_text = decide_tool_call(runtime, "Bash", {"command": ["git", "status"]})

    assert what(absent)[0] == "ASK"
    assert "'command' is absent" in absent.note
    assert what(not_text)[0] == "ASK"
    assert "'command' is not a string" in not_text.note
    # A tool with no subject argument named says nothing of it.
    assert decide_tool_call(runtime, "Read").note == ""


def test_an_operator_deny_cannot_be_granted_away(runtime: AgentRuntime, approver: User) -> None:  # U1
    request = open_tool_request(runtime, "Bash", {"command": "rm -rf /tmp/x"})
    answer(request, approver, Answer.ALLOW_SESSION, "rm -rf /tmp/x")
    assert what(decide_tool_call(runtime, "Bash", {"command": "rm -rf /tmp/x"}))[0] == "ALLOW"

    tool_rule("Bash", "rm:*", RuleAction.DENY)

    assert what(decide_tool_call(runtime, "Bash", {"command": "rm -rf /tmp/x"})) == (
        "DENY",
        "DENIED_BY_RULE",
        "RULE",
    )


def test_the_ceiling_comes_before_everything(runtime: AgentRuntime, approver: User) -> None:  # U, T6
    request = open_tool_request(runtime, "Edit", {"path": "a.txt"})
    answer(request, approver, Answer.ALLOW_SESSION, "")
    runtime.ceiling = "READ_ONLY"
    runtime.save()

    assert what(decide_tool_call(runtime, "Edit", {"path": "a.txt"})) == ("DENY", "ABOVE_CEILING", "CEILING")


def test_an_unknown_invoking_session_is_refused(runtime: AgentRuntime) -> None:  # S3
    with pytest.raises(services.UnknownInvokingSessionError):
        decide_tool_call(runtime, "Bash", session_id=None, invoking_session_id="never-seen")


def test_a_sessions_principal_is_fixed(runtime: AgentRuntime) -> None:  # S12
    decide_tool_call(runtime, "Bash", principal="alice")
    with pytest.raises(services.PrincipalConflictError):
        decide_tool_call(runtime, "Bash", principal="bob")


# --- Requests (U2) -------------------------------------------------------------------------------


def test_a_tool_request_stores_the_call(runtime: AgentRuntime) -> None:  # U2, U4
    request = open_tool_request(runtime, "Bash", {"command": "git push origin main", "timeout": 30})

    assert request.kind == RequestKind.TOOL
    assert request.status == RequestStatus.PENDING
    assert (request.tool, request.server, request.subject_argument) == ("Bash", "", "command")
    assert request.subject == "git push origin main"
    assert request.arguments == {"command": "git push origin main", "timeout": 30}
    assert request.arguments_digest == (
        "sha256:"
        + __import__("hashlib").sha256(b'{"command":"git push origin main","timeout":30}').hexdigest()
    )
    (item,) = request.items.all()
    assert (item.skill, item.decision) == ("Bash", "")


def test_an_unattended_call_opens_no_request(runtime: AgentRuntime) -> None:  # U2, T8
    with pytest.raises(services.BadToolCallError) as refused:
        open_tool_request(runtime, "Bash", PUSH, session_id=None)
    assert refused.value.field == "session_id"
    assert not ApprovalRequest.objects.exists()


def test_a_call_the_chain_decides_is_answered_from_the_start(runtime: AgentRuntime) -> None:  # U2
    tool_rule("Bash", "rm:*", RuleAction.DENY)

    denied = open_tool_request(runtime, "Bash", {"command": "rm -rf /"})
    read = open_tool_request(runtime, "Read", {"path": "x"})

    assert denied.status == RequestStatus.ANSWERED
    assert [(i.decision, i.source, i.scope) for i in denied.items.all()] == [("DENY", "RULE", "")]
    assert read.status == RequestStatus.ANSWERED
    assert [(i.decision, i.source) for i in read.items.all()] == [("ALLOW", "GATE")]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"command": "a\x00b"}, "arguments"),
        ({"n": float("nan")}, "arguments"),
        ({"n": float("inf")}, "arguments"),
        ({"text": "\ud800"}, "arguments"),
    ],
)
def test_arguments_that_cannot_be_stored_or_digested_are_refused(
    runtime: AgentRuntime, arguments: dict, field: str
) -> None:  # bad input
    with pytest.raises(services.BadToolCallError) as refused:
        open_tool_request(runtime, "Bash", arguments)
    assert refused.value.field == field


# --- Answers (U3) ---------------------------------------------------------------------------------


def test_allow_for_this_session_holds_for_the_pattern_picked(
    runtime: AgentRuntime, approver: User
) -> None:  # U3
    request = open_tool_request(runtime, "Bash", PUSH)

    outcome = answer(request, approver, Answer.ALLOW_SESSION, "git push:*")

    assert outcome.request_answered
    grant = Grant.objects.get(kind=GrantKind.TOOL)
    assert (grant.skill, grant.server, grant.pattern, grant.scope, grant.decision) == (
        "Bash",
        "",
        "git push:*",
        GrantScope.SESSION,
        GrantDecision.ALLOW,
    )
    assert what(decide_tool_call(runtime, "Bash", {"command": "git push origin dev"})) == (
        "ALLOW",
        "GRANTED",
        "SESSION",
    )
    assert what(decide_tool_call(runtime, "Bash", {"command": "rm -rf /"}))[0] == "ASK"
    assert (
        what(decide_tool_call(runtime, "Bash", {"command": "git push origin dev"}, session_id="s-2"))[0]
        == "ASK"
    )
    request.refresh_from_db()
    (item,) = request.items.all()
    assert (item.decision, item.scope, item.pattern) == ("ALLOW", "SESSION", "git push:*")


def test_a_destructive_tool_is_never_granted_wholesale(runtime: AgentRuntime, operator: User) -> None:  # U3
    request = open_tool_request(runtime, "Bash", PUSH)

    with pytest.raises(services.NotAllowedError, match="not one of the patterns offered"):
        answer(request, operator, Answer.ALLOW_AGENT, "")
    with pytest.raises(services.NotAllowedError):
        answer(request, operator, Answer.ALLOW_SESSION, "*")
    assert not Grant.objects.exists()


def test_a_non_destructive_tool_may_be_granted_whole(runtime: AgentRuntime, approver: User) -> None:  # U3
    request = open_tool_request(runtime, "Edit", {"path": "notes/a.txt"})

    answer(request, approver, Answer.ALLOW_SESSION, "")

    assert what(decide_tool_call(runtime, "Edit", {"path": "elsewhere.txt"})) == (
        "ALLOW",
        "GRANTED",
        "SESSION",
    )


def test_no_pattern_given_takes_the_narrowest(runtime: AgentRuntime, approver: User) -> None:  # U3
    answer(open_tool_request(runtime, "Bash", PUSH), approver, Answer.ALLOW_SESSION)

    assert Grant.objects.get().pattern == "git push origin main"


def test_always_allow_for_this_agent_reaches_every_session_and_only_operators_give_it(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # U3, S13
    request = open_tool_request(runtime, "Bash", PUSH)
    with pytest.raises(services.NotAllowedError):
        answer(request, approver, Answer.ALLOW_AGENT, "git push:*")

    answer(request, operator, Answer.ALLOW_AGENT, "git push:*")

    assert what(decide_tool_call(runtime, "Bash", {"command": "git push x"}, session_id="s-9")) == (
        "ALLOW",
        "GRANTED",
        "AGENT",
    )


def test_deny_is_a_session_deny_of_the_pattern(runtime: AgentRuntime, approver: User) -> None:  # U3
    request = open_tool_request(runtime, "Bash", PUSH)

    answer(request, approver, Answer.DENY, "git push:*")

    grant = Grant.objects.get()
    assert (grant.decision, grant.scope, grant.pattern) == ("DENY", "SESSION", "git push:*")
    assert what(decide_tool_call(runtime, "Bash", {"command": "git push origin dev"})) == (
        "DENY",
        "DENIED",
        "SESSION",
    )
    assert what(decide_tool_call(runtime, "Bash", {"command": "git status"}))[0] == "ASK"


def test_deny_may_take_the_whole_of_a_destructive_tool(runtime: AgentRuntime, approver: User) -> None:  # U3
    answer(open_tool_request(runtime, "Bash", PUSH), approver, Answer.DENY, "")

    assert what(decide_tool_call(runtime, "Bash", {"command": "ls"})) == ("DENY", "DENIED", "SESSION")


def test_a_session_grant_from_a_fork_lands_on_the_invoking_session(
    runtime: AgentRuntime, approver: User
) -> None:  # U3, S3, S4
    decide_tool_call(runtime, "Bash", session_id="s-parent", principal="alice")
    request = open_tool_request(runtime, "Bash", PUSH, session_id=None, invoking_session_id="s-parent")

    answer(request, approver, Answer.ALLOW_SESSION, "git push:*")

    assert Grant.objects.get().session.session_id == "s-parent"
    forked = decide_tool_call(
        runtime, "Bash", {"command": "git push a"}, session_id=None, invoking_session_id="s-parent"
    )
    assert what(forked) == ("ALLOW", "GRANTED", "INVOKING_SESSION")
    assert what(
        decide_tool_call(runtime, "Bash", PUSH, session_id="s-child", invoking_session_id="s-parent")
    )[2] == ("INVOKING_SESSION")


def test_tool_and_skill_grants_never_answer_for_each_other(
    runtime: AgentRuntime, approver: User
) -> None:  # U3: a tool named like a skill
    skill_request = open_skill_request(runtime, "Bash", session_id="s-1", principal="alice")
    services.request_answer(request=skill_request, user=approver, answer=Answer.ALLOW_SESSION)
    assert what(decide_tool_call(runtime, "Bash", PUSH))[0] == "ASK"

    tool_request = open_tool_request(runtime, "Bash", PUSH, session_id="s-2")
    answer(tool_request, approver, Answer.ALLOW_SESSION, "git push:*")
    (verdict,) = services.decide_skills(
        runtime,
        services.SkillCall(
            skills=["Bash"], session_id="s-2", invoking_session_id=None, principal=None, turn_id=None
        ),
    )
    assert verdict.decision == "ASK"


def test_an_answer_writes_its_tool_grant_once_however_often_it_is_given(
    runtime: AgentRuntime, approver: User
) -> None:  # U3, S7: a second request for the same key is settled by the first's grant
    first, second = open_tool_request(runtime, "Bash", PUSH), open_tool_request(runtime, "Bash", PUSH)
    answer(first, approver, Answer.ALLOW_SESSION, "git push:*")

    outcome = answer(second, approver, Answer.ALLOW_SESSION, "git push:*")

    assert Grant.objects.active().count() == 1
    assert outcome.notes
    assert "same answer" in outcome.notes[0]
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_ANSWER_SETTLED).count() == 1


# --- Allow this call (U4) -------------------------------------------------------------------------


@pytest.fixture
def call_approved(runtime: AgentRuntime, approver: User) -> ApprovalRequest:
    request = open_tool_request(runtime, "Bash", {"command": "git push origin main", "force": False})
    outcome = answer(request, approver, Answer.ALLOW_CALL)
    assert outcome.request_answered
    return request


def test_allow_this_call_writes_no_grant_and_answers_that_call_once(
    runtime: AgentRuntime, call_approved: ApprovalRequest
) -> None:  # U4
    arguments = {"command": "git push origin main", "force": False}
    (item,) = call_approved.items.all()
    assert (item.decision, item.scope) == ("ALLOW", ItemScope.CALL)
    assert not Grant.objects.exists()

    first = decide_tool_call(runtime, "Bash", arguments, approval_id=call_approved.pk)
    second = decide_tool_call(runtime, "Bash", arguments, approval_id=call_approved.pk)

    assert what(first) == ("ALLOW", "GRANTED", "CALL")
    assert what(second)[0] == "ASK"
    assert second.note == APPROVAL_NOT_USED_NOTE
    assert what(decide_tool_call(runtime, "Bash", arguments))[0] == "ASK"  # without the id it asks


def test_reordered_keys_are_the_same_call(
    runtime: AgentRuntime, call_approved: ApprovalRequest
) -> None:  # U4
    assert what(
        decide_tool_call(
            runtime, "Bash", {"force": False, "command": "git push origin main"}, approval_id=call_approved.pk
        )
    )[0] == ("ALLOW")


@pytest.mark.parametrize(
    ("arguments", "call"),
    [
        ({"command": "git push origin  main", "force": False}, {}),  # changed whitespace in a value
        ({"command": "git push origin main", "force": True}, {}),  # another value
        ({"command": "git push origin main"}, {}),  # a key fewer
        ({"command": "git push origin main", "force": False}, {"session_id": "s-2"}),  # another session
        ({"command": "git push origin main", "force": False}, {"tool": "Edit"}),  # another tool
    ],
)
def test_anything_but_the_same_call_in_the_same_session_asks(
    runtime: AgentRuntime, call_approved: ApprovalRequest, arguments: dict, call: dict
) -> None:  # U4
    decided = decide_tool_call(
        runtime, arguments=arguments, approval_id=call_approved.pk, **{"tool": "Bash", **call}
    )

    assert what(decided)[0] == "ASK"
    call_approved.refresh_from_db()
    assert call_approved.call_used_at is None


def test_another_runtime_cannot_use_the_approval(
    other_runtime: AgentRuntime, call_approved: ApprovalRequest
) -> None:  # U4
    decided = decide_tool_call(
        other_runtime,
        "Bash",
        {"command": "git push origin main", "force": False},
        approval_id=call_approved.pk,
    )

    assert what(decided)[0] == "ASK"


def test_a_deny_rule_beats_the_call_approval_and_leaves_it_unused(
    runtime: AgentRuntime, call_approved: ApprovalRequest
) -> None:  # U, U4
    tool_rule("Bash", "git push:*", RuleAction.DENY)

    decided = decide_tool_call(
        runtime, "Bash", {"command": "git push origin main", "force": False}, approval_id=call_approved.pk
    )

    assert what(decided) == ("DENY", "DENIED_BY_RULE", "RULE")
    call_approved.refresh_from_db()
    assert call_approved.call_used_at is None


def test_a_pending_request_approves_nothing(runtime: AgentRuntime) -> None:  # U4
    pending = open_tool_request(runtime, "Bash", PUSH)

    assert what(decide_tool_call(runtime, "Bash", PUSH, approval_id=pending.pk))[0] == "ASK"


def test_the_use_is_audited_with_the_digest(
    runtime: AgentRuntime, call_approved: ApprovalRequest
) -> None:  # U7
    decide_tool_call(
        runtime, "Bash", {"command": "git push origin main", "force": False}, approval_id=call_approved.pk
    )

    approved = AuditEvent.objects.get(action=AuditAction.TOOL_CALL_APPROVED)
    used = AuditEvent.objects.get(action=AuditAction.TOOL_CALL_APPROVAL_USED)
    assert approved.details["arguments_digest"] == call_approved.arguments_digest
    assert used.details["arguments_digest"] == call_approved.arguments_digest
    assert used.details["request_id"] == str(call_approved.pk)
    assert used.actor_label == f"runtime:{runtime.name}"


# --- Replay (U6) -------------------------------------------------------------------------------------


def test_a_replay_of_a_non_idempotent_tool_asks_again(
    runtime: AgentRuntime, call_approved: ApprovalRequest
) -> None:  # U6
    arguments = {"command": "git push origin main", "force": False}

    decided = decide_tool_call(runtime, "Bash", arguments, approval_id=call_approved.pk, replay=True)

    assert what(decided)[0] == "ASK"
    assert decided.note == REPLAY_NOT_IDEMPOTENT_NOTE
    call_approved.refresh_from_db()
    assert call_approved.call_used_at is None


def test_a_replay_of_an_idempotent_tool_may_reuse_the_approval(
    runtime: AgentRuntime, approver: User
) -> None:  # U6
    request = open_tool_request(runtime, "Edit", {"path": "a.txt"})
    answer(request, approver, Answer.ALLOW_CALL)
    call = {"arguments": {"path": "a.txt"}, "approval_id": request.pk}

    assert what(decide_tool_call(runtime, "Edit", **call))[0] == "ALLOW"
    assert what(decide_tool_call(runtime, "Edit", **call))[0] != "ALLOW"  # not a replay: used once
    assert what(decide_tool_call(runtime, "Edit", replay=True, **call)) == ("ALLOW", "GRANTED", "CALL")


# --- Pre-approvals (U5) --------------------------------------------------------------------------------


def test_a_pre_approval_answers_only_its_runtimes_unattended_calls(
    runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:  # U5
    tool_rule("Bash", "git fetch:*", RuleAction.ALLOW, runtime=runtime, unattended=True)
    fetch = {"command": "git fetch origin"}

    assert what(decide_tool_call(runtime, "Bash", fetch, session_id=None)) == (
        "ALLOW",
        "PRE_APPROVED",
        "RULE",
    )
    assert what(decide_tool_call(other_runtime, "Bash", fetch, session_id=None))[0] == "DENY"
    assert what(decide_tool_call(runtime, "Bash", {"command": "git push"}, session_id=None)) == (
        "DENY",
        "UNATTENDED_NO_CHANNEL",
        "GATE",
    )
    # Attended calls are asked as before: a pre-approval is for nobody-to-ask only.
    assert what(decide_tool_call(runtime, "Bash", fetch))[0] == "ASK"


def test_an_unattended_call_is_never_allowed_by_a_session_answer(
    runtime: AgentRuntime, approver: User
) -> None:  # U5, T8
    answer(open_tool_request(runtime, "Bash", PUSH), approver, Answer.ALLOW_SESSION, "git push:*")

    assert what(decide_tool_call(runtime, "Bash", PUSH, session_id=None)) == (
        "DENY",
        "UNATTENDED_NO_CHANNEL",
        "GATE",
    )


# --- Abort (S9 for tools) -------------------------------------------------------------------------------


def test_a_cancelled_tool_request_denies_its_exact_subject_for_the_session(
    runtime: AgentRuntime,
) -> None:  # S9, U3
    request = open_tool_request(runtime, "Bash", PUSH)

    services.request_cancel(request=request, actor=TEST_ACTOR)

    grant = Grant.objects.get()
    assert (grant.kind, grant.decision, grant.scope, grant.pattern, grant.origin) == (
        GrantKind.TOOL,
        "DENY",
        "SESSION",
        "git push origin main",
        GrantOrigin.ABORT,
    )
    assert what(decide_tool_call(runtime, "Bash", PUSH)) == ("DENY", "DENIED", "SESSION")
    assert what(decide_tool_call(runtime, "Bash", {"command": "git status"}))[0] == "ASK"
    event = AuditEvent.objects.get(action=AuditAction.TOOL_ABORT_DENIED)
    assert event.subject == "Bash(git push origin main)"
    assert event.details["pattern"] == "git push origin main"


def test_an_aborted_call_with_no_subject_denies_the_whole_tool(runtime: AgentRuntime) -> None:  # S9, U3
    request = open_tool_request(runtime, "Bash", {"cmd": "ls"})

    services.request_cancel(request=request, actor=TEST_ACTOR)

    assert Grant.objects.get().pattern == ""
    assert what(decide_tool_call(runtime, "Bash", {"command": "anything"}))[0] == "DENY"


# --- Clear and revoke (S10) ------------------------------------------------------------------------


def test_clear_and_revoke_take_tool_grants_too(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S10
    answer(open_tool_request(runtime, "Bash", PUSH), approver, Answer.ALLOW_SESSION, "git push:*")
    answer(
        open_tool_request(runtime, "Bash", PUSH, session_id="s-2"), operator, Answer.ALLOW_AGENT, "git push:*"
    )

    assert services.session_clear(runtime=runtime, session_id="s-1", actor=TEST_ACTOR) == 1
    assert services.agent_grants_revoke(runtime=runtime, actor=TEST_ACTOR) == 1
    assert what(decide_tool_call(runtime, "Bash", PUSH))[0] == "ASK"


# --- Audit (U7) -------------------------------------------------------------------------------------------


def test_a_tool_grant_is_audited_with_its_pattern(runtime: AgentRuntime, approver: User) -> None:  # U7
    request = open_tool_request(runtime, "Bash", PUSH)
    answer(request, approver, Answer.ALLOW_SESSION, "git push:*")

    event = AuditEvent.objects.get(action=AuditAction.TOOL_GRANTED)
    assert event.subject_type == "tool"
    assert event.subject == "Bash(git push:*)"
    assert event.details["pattern"] == "git push:*"
    assert event.details["arguments_digest"] == request.arguments_digest
    assert event.session_key == "s-1"
    assert event.actor_label == "alice"


def test_a_single_revoke_names_the_tool_grant_with_its_pattern(
    runtime: AgentRuntime, approver: User
) -> None:  # U7
    answer(open_tool_request(runtime, "Bash", PUSH), approver, Answer.ALLOW_SESSION, "git push:*")

    assert services.grant_revoke(grant=Grant.objects.get(), actor=TEST_ACTOR)

    event = AuditEvent.objects.get(action=AuditAction.GRANT_REVOKED)
    assert (event.subject_type, event.subject, event.details["pattern"]) == (
        "tool",
        "Bash(git push:*)",
        "git push:*",
    )
    assert what(decide_tool_call(runtime, "Bash", PUSH))[0] == "ASK"


def test_an_expired_tool_request_denies_its_subject_for_the_session(runtime: AgentRuntime) -> None:  # S9
    request = open_tool_request(runtime, "Bash", PUSH, timeout_seconds=60)
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))

    assert services.requests_expire_due() == 1

    request.refresh_from_db()
    assert request.status == RequestStatus.EXPIRED
    assert (Grant.objects.get().decision, Grant.objects.get().pattern) == ("DENY", "git push origin main")
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_ABORT_DENIED).count() == 1


def test_a_session_idle_past_its_ttl_holds_no_tool_grant(
    runtime: AgentRuntime, approver: User, settings: Any
) -> None:  # S12, U3
    answer(open_tool_request(runtime, "Bash", PUSH), approver, Answer.ALLOW_SESSION, "git push:*")
    long_ago = timezone.now() - dt.timedelta(seconds=settings.AIMON_SESSION_IDLE_TTL_SECONDS + 60)
    Session.objects.filter(session_id="s-1").update(last_seen_at=long_ago)

    # Forked from the idle session: its grants are not inherited (read without touching it).
    forked = decide_tool_call(runtime, "Bash", PUSH, session_id=None, invoking_session_id="s-1")
    assert what(forked) == ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", "GATE")
    # The session itself, seen again: its grants expire first (audited), then it asks.
    assert what(decide_tool_call(runtime, "Bash", PUSH))[0] == "ASK"
    assert Grant.objects.get().revoke_reason == "EXPIRED"
