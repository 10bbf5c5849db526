"""The two-person rule in the browser (P3): the rules forms, the inbox card and the request
page ("1 of 2 approvals", who and when), and the answers through the views."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules, selectors
from aimon_admin.approvals.choices import RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, Grant, SkillRule, ToolRule
from aimon_admin.approvals.views import ALLOW_RECORDED_MESSAGE
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request, open_tool_request
from tests.conftest import TEST_ACTOR
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def named_subjects() -> None:
    """The tools these rules name have subject arguments (U1: a pattern rule on a tool with
    none is refused, as it could never match)."""
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server="git", tool="git_push", argument="remote", actor=TEST_ACTOR)


HTMX = {"HX-Request": "true"}


@pytest.fixture
def people(make_user: Callable[..., User]) -> dict[str, User]:
    return {
        "paula": make_user("paula", Role.OPERATOR),
        "olivia": make_user("olivia", Role.OPERATOR),
        "oscar": make_user("oscar", Role.OPERATOR),
    }


def two_person_request(runtime: AgentRuntime, principal: str = "paula") -> ApprovalRequest:
    rules.rule_create(pattern="deploy", action=RuleAction.ASK, approvers=2, actor=TEST_ACTOR)
    return open_skill_request(runtime, "deploy", session_id="s-1", principal=principal)


def allow(client: Client, request: ApprovalRequest, **headers: str) -> str:
    response = client.post(
        f"/approvals/requests/{request.pk}/answer/",
        {"skill": "deploy", "answer": "ALLOW_SESSION"},
        headers=headers,
        follow=not headers,
    )
    return response.content.decode()


def status(request: ApprovalRequest) -> str:
    return ApprovalRequest.objects.values_list("status", flat=True).get(pk=request.pk)


# --- The rules forms --------------------------------------------------------------------------------


def test_the_skill_rule_form_sets_people_who_must_allow(runtime: AgentRuntime, operator: User) -> None:  # P3
    client = logged_in(operator)
    page = client.get("/approvals/rules/skills/add/").content.decode()
    assert "People who must allow" in page
    response = client.post(
        "/approvals/rules/new/",
        {"pattern": "deploy-*", "action": "ASK", "widest_scope": "AGENT", "approvers": "2"},
    )
    assert response.status_code == 302
    assert SkillRule.objects.get().approvers == 2
    assert AuditEvent.objects.get(action=AuditAction.RULE_CREATED).details["approvers"] == 2
    assert "2 people must allow" in client.get("/approvals/rules/").content.decode()


def test_a_bad_count_is_refused_naming_the_field_and_kept_as_typed(operator: User) -> None:  # P3
    assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        "/approvals/rules/new/",
        {"pattern": "deploy-*", "action": "ASK", "widest_scope": "AGENT", "approvers": "7"},
        page="/approvals/rules/skills/add/",
        shows=["Select a valid choice", 'value="deploy-*"'],
    )
    assert not SkillRule.objects.exists()


def test_the_tool_rule_form_sets_people_who_must_allow(operator: User) -> None:  # P3
    client = logged_in(operator)
    response = client.post(
        "/approvals/rules/tools/new/",
        {"tool-text": "Bash(git push:*)", "tool-action": "ASK", "tool-approvers": "3"},
    )
    assert response.status_code in (302, 303)
    assert ToolRule.objects.get().approvers == 3
    assert AuditEvent.objects.get(action=AuditAction.TOOL_RULE_CREATED).details["approvers"] == 3


# --- The card and the answers -----------------------------------------------------------------------


def test_the_card_shows_one_of_two_and_who_then_the_second_completes_it(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3: "1 of 2"; the grant with the Nth allow
    request = two_person_request(runtime)
    olivia, oscar = logged_in(people["olivia"]), logged_in(people["oscar"])
    assert "0 of 2 approvals" in olivia.get(f"/approvals/requests/{request.pk}/").content.decode()

    page = allow(olivia, request)
    assert ALLOW_RECORDED_MESSAGE.format(skill="deploy", given=1, needed=2) in page
    assert status(request) == RequestStatus.PENDING
    mine = olivia.get(f"/approvals/requests/{request.pk}/").content.decode()
    assert "1 of 2 approvals" in mine
    assert "olivia allowed" in mine
    assert "It is waiting for another person." in mine
    assert 'data-answer="ALLOW_SESSION"' not in mine  # only the denials are left to her
    assert 'data-answer="DENY"' in mine
    assert "olivia allowed deploy: Allow for this session, 1 of 2 approvals." in mine  # the timeline

    theirs = oscar.get("/approvals/").content.decode()
    assert "1 of 2 approvals" in theirs
    assert "olivia allowed it as <em>Allow for this session</em>" in theirs
    assert 'data-answer="ALLOW_SESSION"' in theirs
    assert 'data-answer="ALLOW_AGENT"' not in theirs  # not how the first person allowed

    card = allow(oscar, request, **HTMX)
    assert "Answered: deploy." in card
    assert status(request) == RequestStatus.ANSWERED
    assert Grant.objects.get(request=request).granted_by == people["oscar"]


def test_the_principal_is_told_their_allow_does_not_count(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3: the request's own principal is never one of them
    request = two_person_request(runtime)
    paula = logged_in(people["paula"])
    page = paula.get(f"/approvals/requests/{request.pk}/").content.decode()
    assert "This request is yours, so your allow does not count: 2 other people must allow it." in page
    assert 'data-answer="ALLOW_SESSION"' not in page
    # A forged POST is refused with the reason, nothing recorded.
    response = paula.post(
        f"/approvals/requests/{request.pk}/answer/", {"skill": "deploy", "answer": "ALLOW_SESSION"}
    )
    assert response.status_code == 403
    assert "other than you" in response.content.decode()
    assert not AuditEvent.objects.filter(action=AuditAction.APPROVAL_ALLOW_RECORDED).exists()


def test_a_second_click_of_the_same_person_says_they_already_allowed(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3
    request = two_person_request(runtime)
    olivia = logged_in(people["olivia"])
    allow(olivia, request)
    card = allow(olivia, request, **HTMX)
    assert "You already allowed deploy. It is waiting for another person: 1 of 2 approvals." in card
    assert AuditEvent.objects.filter(action=AuditAction.APPROVAL_ALLOW_RECORDED).count() == 1


def test_one_deny_through_the_page_denies(runtime: AgentRuntime, people: dict[str, User]) -> None:  # P3
    request = two_person_request(runtime)
    allow(logged_in(people["olivia"]), request)
    logged_in(people["oscar"]).post(
        f"/approvals/requests/{request.pk}/answer/", {"skill": "deploy", "answer": "DENY"}
    )
    assert status(request) == RequestStatus.ANSWERED
    assert Grant.objects.get(request=request).decision == "DENY"
    assert AuditEvent.objects.filter(action=AuditAction.APPROVAL_ALLOW_RECORDED).count() == 1


def test_the_inbox_poll_brings_a_recorded_allow_to_other_people(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3: "1 of 2" reaches the other approvers' open inboxes
    request = two_person_request(runtime)
    oscar = logged_in(people["oscar"])
    shown = selectors.inbox_version([ApprovalRequest.objects.prefetch_related("items").get(pk=request.pk)])
    assert oscar.get(f"/approvals/poll/?v={shown}", headers=HTMX).status_code == 204
    allow(logged_in(people["olivia"]), request)
    polled = oscar.get(f"/approvals/poll/?v={shown}", headers=HTMX)
    assert polled.status_code == 200
    assert "1 of 2 approvals" in polled.content.decode()


def test_a_tool_request_card_shows_the_count_and_the_first_allow(
    runtime: AgentRuntime, people: dict[str, User]
) -> None:  # P3 on a tool request: Allow this call by two people
    local_tools_replace(runtime=runtime, tools=[{"name": "Bash"}], actor=TEST_ACTOR)
    rules.tool_rule_create(text="Bash(git push:*)", action=RuleAction.ASK, approvers=2, actor=TEST_ACTOR)
    request = open_tool_request(
        runtime, "Bash", {"command": "git push origin main"}, session_id="s-1", principal="paula"
    )
    answer = {"skill": "Bash", "answer": "ALLOW_CALL"}
    logged_in(people["olivia"]).post(f"/approvals/requests/{request.pk}/answer/", answer)
    page = logged_in(people["oscar"]).get(f"/approvals/requests/{request.pk}/").content.decode()
    assert "1 of 2 approvals" in page
    assert "olivia allowed it as <em>Allow this call</em>" in page
    logged_in(people["oscar"]).post(f"/approvals/requests/{request.pk}/answer/", answer)
    assert status(request) == RequestStatus.ANSWERED

    # A session allow's pattern: the second person's choice starts at the first person's.
    request = open_tool_request(
        runtime, "Bash", {"command": "git push origin main"}, session_id="s-1", principal="paula"
    )
    session = {"skill": "Bash", "answer": "ALLOW_SESSION", "pattern": "git push:*"}
    logged_in(people["olivia"]).post(f"/approvals/requests/{request.pk}/answer/", session)
    page = logged_in(people["oscar"]).get(f"/approvals/requests/{request.pk}/").content.decode()
    assert 'value="git push:*" checked' in page
    assert page.count(" checked") == 1


def test_the_api_says_pending_until_the_last_allow(
    runtime: AgentRuntime, people: dict[str, User], api: Client
) -> None:  # P3: the runtime keeps waiting until the Nth allow
    request = two_person_request(runtime)
    allow(logged_in(people["olivia"]), request)
    body = api.get(f"/api/v1/approval-requests/{request.pk}?wait=0").json()
    assert body["status"] == "PENDING"
    assert body["items"][0]["decision"] is None
    allow(logged_in(people["oscar"]), request)
    body = api.get(f"/api/v1/approval-requests/{request.pk}?wait=0").json()
    assert (body["status"], body["items"][0]["decision"]) == ("ANSWERED", "ALLOW")
