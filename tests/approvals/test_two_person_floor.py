"""A rule needing N people is a floor (P3): what it covers is allowed only by an answer N
people gave, never by a grant fewer people gave elsewhere — a wider pattern, another
request, agent-wide, an *Allow this call* given before the rule, an operator's ALLOW rule —
and the patterns offered to fewer people never reach into it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules, selectors, tool_rules
from aimon_admin.approvals.choices import Answer, GrantDecision, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, Grant, ToolRule
from aimon_admin.approvals.services import (
    NotAllowedError,
    ToolCall,
    request_answer,
    skills_decide,
    tool_call_decide,
)
from aimon_admin.approvals.services.sessions import session_touch
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import (
    api_decide_tool_call,
    api_open_tool_request,
    decide_tool_call,
    open_skill_request,
    open_tool_request,
)
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

STATUS = "git status"
PUSH = "git push origin main"
FORCE = "git push --force origin main"


@pytest.fixture(autouse=True)
def shell(runtime: AgentRuntime) -> None:
    """A shell tool that is not destructive, so one-word prefixes (git:*) and the whole tool
    are offered where nothing needs more people."""
    local_tools_replace(
        runtime=runtime,
        tools=[
            {
                "name": "Bash",
                "side_effect_level": "MUTATING",
                "destructive_behavior": "NON_DESTRUCTIVE",
                "idempotency_behavior": "NON_IDEMPOTENT",
            }
        ],
        actor=TEST_ACTOR,
    )
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)


@pytest.fixture
def people(make_user: Callable[..., User]) -> dict[str, User]:
    return {
        "alice": make_user("alice", Role.APPROVER),
        "olivia": make_user("olivia", Role.OPERATOR),
        "oscar": make_user("oscar", Role.OPERATOR),
        "otto": make_user("otto", Role.OPERATOR),
    }


def push_floor(approvers: int = 2, text: str = "Bash(git push:*)") -> None:
    rules.tool_rule_create(text=text, action=RuleAction.ALLOW, actor=TEST_ACTOR, approvers=approvers)


def open_call(runtime: AgentRuntime, command: str, session: str = "sA1") -> ApprovalRequest:
    return open_tool_request(runtime, "Bash", {"command": command}, session_id=session)


def decide(runtime: AgentRuntime, command: str, session: str = "sA1", **extra: Any) -> tuple[str, str]:
    decided = decide_tool_call(
        runtime, "Bash", {"command": command}, session_id=session, principal="alice", **extra
    )
    return decided.verdict.decision, decided.verdict.source


def offered(request: ApprovalRequest) -> list[str]:
    return selectors.tool_call_patterns(request=request).allow


def test_alice_cannot_reach_git_push_from_git_status(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3
    push_floor()
    request = open_call(runtime, STATUS)
    # What one person may answer never reaches into what the rule needs two people for.
    assert offered(request) == [STATUS]
    with pytest.raises(NotAllowedError, match="not one of the patterns offered"):
        request_answer(request=request, user=people["alice"], answer=Answer.ALLOW_SESSION, pattern="git:*")
    with pytest.raises(NotAllowedError, match="not one of the patterns offered"):
        request_answer(request=request, user=people["alice"], answer=Answer.ALLOW_SESSION, pattern="")
    request_answer(request=request, user=people["alice"], answer=Answer.ALLOW_SESSION, pattern=STATUS)
    assert decide(runtime, STATUS) == ("ALLOW", "SESSION")
    assert decide(runtime, PUSH) == ("ASK", "RULE")
    assert decide(runtime, FORCE) == ("ASK", "RULE")


def test_a_wider_grant_one_person_gave_does_not_allow_what_the_rule_covers(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3: grants written before the rule, in the session and agent-wide
    session = open_call(runtime, STATUS)
    request_answer(request=session, user=people["alice"], answer=Answer.ALLOW_SESSION, pattern="git:*")
    agent = open_call(runtime, STATUS, session="sB1")
    request_answer(request=agent, user=people["olivia"], answer=Answer.ALLOW_AGENT, pattern="git:*")
    assert decide(runtime, PUSH) == ("ALLOW", "SESSION")
    assert decide(runtime, PUSH, session="sC1") == ("ALLOW", "AGENT")
    push_floor()
    for where in ("sA1", "sC1"):
        assert decide(runtime, PUSH, session=where) == ("ASK", "RULE")
        assert decide(runtime, FORCE, session=where) == ("ASK", "RULE")
    # What the rule does not cover, the grants still answer.
    assert decide(runtime, STATUS) == ("ALLOW", "SESSION")
    assert decide(runtime, STATUS, session="sC1") == ("ALLOW", "AGENT")
    # A one-person DENY still denies: one Deny denies.
    deny = open_call(runtime, "git push origin dev", session="sD1")
    request_answer(request=deny, user=people["olivia"], answer=Answer.DENY, pattern="git push:*")
    assert decide(runtime, PUSH, session="sD1") == ("DENY", "SESSION")


def test_two_people_answering_under_the_rule_allow_for_the_session(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3
    session = open_call(runtime, STATUS)
    request_answer(request=session, user=people["alice"], answer=Answer.ALLOW_SESSION, pattern="git:*")
    push_floor()
    request = open_call(runtime, PUSH)
    assert request.items.get().approvers == 2
    assert offered(request) == [PUSH, "git push origin:*", "git push:*", "git:*", ""]
    for who in ("olivia", "oscar"):
        request_answer(request=request, user=people[who], answer=Answer.ALLOW_SESSION, pattern="git push:*")
    grant = Grant.objects.get(request=request)
    assert (grant.decision, grant.pattern, grant.approvers) == (GrantDecision.ALLOW, "git push:*", 2)
    assert decide(runtime, PUSH) == ("ALLOW", "SESSION")
    assert decide(runtime, FORCE) == ("ALLOW", "SESSION")
    # Raised to three (the rule written again), the two-person grant no longer reaches.
    rules.rule_delete(rule=ToolRule.objects.get(), actor=TEST_ACTOR)
    push_floor(3)
    assert decide(runtime, PUSH) == ("ASK", "RULE")


def test_a_two_person_answer_replaces_a_one_person_grant_of_the_same_pattern(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3: the new answer is not settled by the older, lesser grant
    before = open_call(runtime, PUSH)
    request_answer(request=before, user=people["alice"], answer=Answer.ALLOW_SESSION, pattern="git push:*")
    push_floor()
    assert decide(runtime, PUSH) == ("ASK", "RULE")
    request = open_call(runtime, PUSH)
    for who in ("olivia", "oscar"):
        request_answer(request=request, user=people[who], answer=Answer.ALLOW_SESSION, pattern="git push:*")
    assert ApprovalRequest.objects.get(pk=request.pk).status == RequestStatus.ANSWERED
    (held,) = Grant.objects.filter(revoked_at__isnull=True, pattern="git push:*")
    assert (held.request_id, held.approvers) == (request.pk, 2)
    assert decide(runtime, PUSH) == ("ALLOW", "SESSION")


def test_a_stricter_rule_inside_bounds_what_fewer_people_are_offered(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3: the pattern choices never reach past what this answer's people may allow
    push_floor(2)
    push_floor(3, "Bash(git push --force:*)")
    request = open_call(runtime, PUSH)
    assert request.items.get().approvers == 2
    assert offered(request) == [PUSH, "git push origin:*"]
    force = open_call(runtime, FORCE)
    assert force.items.get().approvers == 3
    assert offered(force) == [FORCE, "git push --force:*", "git push:*", "git:*", ""]
    for who in ("olivia", "oscar"):
        request_answer(
            request=request, user=people[who], answer=Answer.ALLOW_SESSION, pattern="git push origin:*"
        )
    assert decide(runtime, "git push origin dev") == ("ALLOW", "SESSION")
    assert decide(runtime, FORCE) == ("ASK", "RULE")


def test_an_allow_this_call_given_before_the_rule_is_not_used_under_it(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3, U4
    request = open_call(runtime, PUSH)
    request_answer(request=request, user=people["alice"], answer=Answer.ALLOW_CALL)
    push_floor()
    decision, _ = decide(runtime, PUSH, approval_id=request.pk)
    assert decision == "ASK"
    assert ApprovalRequest.objects.get(pk=request.pk).call_used_at is None
    two = open_call(runtime, PUSH)
    for who in ("olivia", "oscar"):
        request_answer(request=two, user=people[who], answer=Answer.ALLOW_CALL)
    assert decide(runtime, PUSH, approval_id=two.pk) == ("ALLOW", "CALL")


def test_an_operators_allow_rule_does_not_answer_under_the_floor(runtime: AgentRuntime) -> None:  # P3
    rules.tool_rule_create(text="Bash(git push origin dev:*)", action=RuleAction.ALLOW, actor=TEST_ACTOR)
    assert decide(runtime, "git push origin dev") == ("ALLOW", "RULE")
    push_floor()
    assert decide(runtime, "git push origin dev") == ("ASK", "RULE")
    unattended = tool_call_decide(
        runtime, ToolCall(tool="Bash", arguments={"command": "git push origin dev"})
    )
    assert unattended.verdict.decision == "DENY"


def test_a_command_that_cannot_be_read_is_under_every_floor_of_its_tool(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3, U1 fail closed: `$(echo git) push` runs git push whatever it reads as
    push_floor()
    sneaky = "$(echo git) push origin main"
    request = open_call(runtime, sneaky)
    assert request.items.get().approvers == 2
    with pytest.raises(NotAllowedError, match="this request is yours"):
        request_answer(request=request, user=people["alice"], answer=Answer.ALLOW_CALL)


def test_a_skill_grant_fewer_people_gave_does_not_allow_under_a_skill_rule(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3, for skills
    skills_request = open_skill_request(runtime, "deploy-prod", session_id="sA1")
    request_answer(request=skills_request, user=people["alice"], answer=Answer.ALLOW_SESSION)
    agent_request = open_skill_request(runtime, "deploy-prod", session_id="sB1")
    request_answer(request=agent_request, user=people["olivia"], answer=Answer.ALLOW_AGENT)
    session = session_touch(runtime=runtime, session_id="sA1", principal="alice")

    def verdict() -> tuple[str, str]:
        [found] = skills_decide(
            runtime=runtime, skills=["deploy-prod"], session=session, invoking_session=None, turn_id=None
        )
        return found.decision, found.source

    assert verdict() == ("ALLOW", "SESSION")
    rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, actor=TEST_ACTOR, approvers=2)
    assert verdict() == ("ASK", "RULE")
    request = open_skill_request(runtime, "deploy-prod", session_id="sA1")
    for who in ("olivia", "oscar"):
        request_answer(request=request, user=people[who], answer=Answer.ALLOW_SESSION)
    assert Grant.objects.get(request=request).approvers == 2
    assert verdict() == ("ALLOW", "SESSION")


def test_through_the_api_the_runtime_is_told_ask(
    runtime: AgentRuntime, api: APIClient, people: dict[str, User]
) -> None:  # P3: alice and git push end to end, as a runtime sees it
    push_floor()
    opened = api_open_tool_request(
        api, tool="Bash", session_id="sA1", principal="alice", arguments={"command": STATUS}
    )
    assert opened.status_code == 201, opened.content
    request = ApprovalRequest.objects.get(pk=opened.json()["id"])
    request_answer(request=request, user=people["alice"], answer=Answer.ALLOW_SESSION)
    for command in (PUSH, FORCE):
        answered = api_decide_tool_call(
            api, tool="Bash", session_id="sA1", principal="alice", arguments={"command": command}
        )
        assert answered.status_code == 200, answered.content
        assert answered.json()["decision"] == "ASK"


def test_the_request_page_says_why_a_wider_pattern_is_deny_only(
    runtime: AgentRuntime, people: dict[str, User], client: Client
) -> None:  # P3: the approver sees the rule that keeps a wider allow from them
    push_floor()
    request = open_call(runtime, STATUS)
    client.force_login(people["alice"])
    html = client.get(f"/approvals/requests/{request.pk}/").content.decode()
    assert "Deny only: Bash(git push:*) needs 2 people to allow what this reaches" in html
    assert 'value="git:*"' in html  # still offered to Deny


def test_the_unattended_forecast_counts_no_pre_approval_under_the_floor(
    runtime: AgentRuntime,
) -> None:  # P3, U5
    rules.tool_rule_create(
        text="Bash(git push origin dev:*)",
        action=RuleAction.ALLOW,
        actor=TEST_ACTOR,
        runtime=runtime,
        unattended=True,
    )
    rules.tool_rule_create(text="Bash(git status:*)", action=RuleAction.ALLOW, actor=TEST_ACTOR)
    texts = lambda: [rule.text for rule in tool_rules.unattended_allow_rules(runtime)[("", "Bash")]]  # noqa: E731
    assert texts() == ["Bash(git push origin dev:*)", "Bash(git status:*)"]
    push_floor()
    assert texts() == ["Bash(git status:*)"]
    decided = tool_call_decide(runtime, ToolCall(tool="Bash", arguments={"command": "git push origin dev"}))
    assert decided.verdict.decision == "DENY"  # as the forecast now says: nothing answers it unattended
