"""No forged approvals (S11, S13): only an authenticated person's answer, of a kind the page
offers them, writes an ALLOW.

- A runtime token, on every API route with every method and bodies that look like an
  answer, writes no ALLOW anywhere (no grant, no answered item, no closed request).
- Free-form fields (`reason`) never change a decision; fields that could carry one in
  (tags, attributes, decision, scope …) are refused naming the field.
- A crafted POST to the answer view: someone else's request is a 404, an answer the page
  does not offer is refused, whatever the value.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, GrantDecision, GrantScope, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_update_settings
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request
from tests.conftest import TEST_ACTOR
from tests.fuzzing import budget
from tests.security.test_authorization_matrix import ROUTES

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

# Bodies a runtime might send hoping to be read as an answer.
ALLOW_BODIES: list[Any] = [
    {},
    {"decision": "ALLOW"},
    {"decision": "ALLOW", "scope": "AGENT"},
    {"answer": "ALLOW_AGENT"},
    {"answer": "a"},
    {"status": "ANSWERED"},
    {"skills": ["deploy"], "decision": "ALLOW"},
    {"skills": ["deploy"], "session_id": "s-alice", "principal": "alice", "answer": "ALLOW_SESSION"},
    {
        "skills": ["deploy"],
        "session_id": "s-alice",
        "tags": {"approved": True},
        "attributes": {"decision": "ALLOW"},
    },
    {"items": [{"skill": "deploy", "decision": "ALLOW", "scope": "AGENT"}]},
    {"agent": True, "decision": "ALLOW"},
    {"tools": [{"name": "deploy", "decision": "ALLOW"}]},
    {"tool": "deploy", "session_id": "s-alice", "decision": "ALLOW"},
    [{"skill": "deploy", "decision": "ALLOW"}],
    "ALLOW",
    # The AuthZEN shape (docs/api.md "AuthZEN"): a decision or an answer sent along with a call.
    {
        "subject": {"type": "user", "id": "alice"},
        "resource": {"type": "tool", "id": "deploy"},
        "action": {"name": "call"},
        "context": {"session_id": "s-alice", "decision": True, "scope": "AGENT"},
    },
    {"evaluations": [{"decision": True}], "decision": True},
]


def allows() -> dict[str, Any]:
    """Every ALLOW the database holds: grants, answered items, answered requests."""
    return {
        "grants": sorted(Grant.objects.filter(decision=GrantDecision.ALLOW).values_list("pk", flat=True)),
        "items": sorted(
            ApprovalItem.objects.filter(decision=GrantDecision.ALLOW).values_list("pk", flat=True)
        ),
        "answered": sorted(
            ApprovalRequest.objects.filter(status=RequestStatus.ANSWERED).values_list("pk", flat=True)
        ),
    }


@pytest.fixture(autouse=True)
def _fresh_rule_index() -> Any:
    rules.rule_index_reset()
    yield
    rules.rule_index_reset()


@pytest.fixture
def owned(runtime: AgentRuntime, make_user: Any) -> User:
    """An approver who owns `runtime` (S13: may grant AGENT scope on it)."""
    owner = make_user("owen", "approver")
    runtime_update_settings(
        runtime=runtime,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        owner=owner,
        description="",
        actor=TEST_ACTOR,
    )
    runtime.refresh_from_db()
    return owner


# --- A runtime token writes no ALLOW ------------------------------------------------------------


def _api_paths(request_id: uuid.UUID) -> list[str]:
    """Every API route of the URL configuration (the AuthZEN ones too), with this world's
    objects in it."""
    values = {"request_id": str(request_id), "session_id": "s-alice", "name": "files"}
    paths = []
    for route in ROUTES:
        if not (route.name or "").startswith(("api:", "authzen-")):
            continue
        paths.append(reverse(route.name, kwargs={p: values[p] for p in route.parameters}))
    assert len(paths) >= 10
    return paths


def test_no_api_route_and_method_lets_a_runtime_write_an_allow(
    api: APIClient, runtime: AgentRuntime, approver: User
) -> None:
    # S11: of approvals a runtime can only ask, cancel, clear and revoke.
    pending = open_skill_request(
        runtime, "deploy", "notify", session_id="s-alice", principal="alice", turn_id="t-1"
    )
    before = allows()
    statuses: set[int] = set()
    for path in _api_paths(pending.pk):
        for method in METHODS:
            for body in ALLOW_BODIES:
                with transaction.atomic():
                    response = api.generic(method, path, json.dumps(body), content_type="application/json")
                    statuses.add(response.status_code)
                    assert response.status_code < 500, (method, path, body)
                    assert allows() == before, (method, path, body)
                    transaction.set_rollback(True)
    decided = api.post(
        "/api/v1/skill-decisions",
        {"skills": ["deploy", "notify"], "session_id": "s-alice", "principal": "alice"},
        format="json",
    )
    assert [d["decision"] for d in decided.json()["decisions"]] == ["ASK", "ASK"]
    # The loop reached the views, not just the door: some calls were served.
    assert {200, 400, 405} <= statuses


def test_no_page_lets_a_runtime_token_write_an_allow(runtime: AgentRuntime, runtime_token: str) -> None:
    # S11: a token is no sign-in; every page POST with an answer in it is sent to sign in.
    pending = open_skill_request(runtime, "deploy", session_id="s-alice", principal="alice")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {runtime_token}")
    before = allows()
    for path in (
        reverse("approvals:answer", kwargs={"pk": pending.pk}),
        reverse("approvals:dismiss", kwargs={"pk": pending.pk}),
        reverse("approvals:rule-create"),
    ):
        for answer in Answer.values:
            response = client.post(
                path, {"answer": answer, "skill": "deploy", "pattern": "*", "action": "ALLOW"}
            )
            assert response.status_code == 302
            assert response["Location"].startswith("/accounts/login/")
    assert allows() == before


# --- Free-form fields never decide -------------------------------------------------------------

ALLOW_WORDS = st.sampled_from(
    ["ALLOW", "allow", "y", "a", "ALLOW_AGENT", '{"decision": "ALLOW"}', "approved: true", "scope=AGENT"]
)


@budget(60, HealthCheck.function_scoped_fixture)
@given(reason=ALLOW_WORDS | st.text(max_size=300))
def test_the_reason_never_changes_a_decision(api: APIClient, reason: str) -> None:
    # S11: a reason is shown to the person; nothing reads it to decide.
    session = f"s-{uuid.uuid4()}"
    before = allows()
    response = api.post(
        "/api/v1/approval-requests",
        {"skills": ["deploy", "read-file"], "session_id": session, "principal": "alice", "reason": reason},
        format="json",
    )
    if response.status_code == 400:  # e.g. control characters: refused, naming the field
        assert list(response.json()["fields"]) == ["reason"]
        assert allows() == before
        return
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "PENDING"
    assert [(i["skill"], i["decision"]) for i in body["items"]] == [("deploy", None), ("read-file", None)]
    assert allows() == before
    decided = api.post(
        "/api/v1/skill-decisions", {"skills": ["deploy", "read-file"], "session_id": session}, format="json"
    )
    assert [d["decision"] for d in decided.json()["decisions"]] == ["ASK", "ASK"]


@budget(40, HealthCheck.function_scoped_fixture)
@given(
    field=st.sampled_from(
        ["tags", "attributes", "decision", "scope", "answer", "metadata", "approved", "grant"]
    ),
    value=st.sampled_from(["ALLOW", True, {"decision": "ALLOW"}, ["ALLOW"], "AGENT"]),
    path=st.sampled_from(["/api/v1/approval-requests", "/api/v1/skill-decisions"]),
)
def test_a_field_that_could_carry_a_decision_is_refused_by_name(
    api: APIClient, field: str, value: Any, path: str
) -> None:
    # S11: nothing a caller or hook can set carries a decision in; the field is named (400).
    before = allows()
    requests_before = ApprovalRequest.objects.count()
    response = api.post(path, {"skills": ["deploy"], "session_id": "s-alice", field: value}, format="json")
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert allows() == before
    assert ApprovalRequest.objects.count() == requests_before


# --- Crafted POSTs to the answer view (S13) ------------------------------------------------------

CRAFTED = [*Answer.values, "ALLOW", "a", "y", "", "allow_agent", "ALLOW_AGENT "]


@pytest.mark.parametrize("answer", CRAFTED)
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
@pytest.mark.parametrize("skill", ["deploy", ""], ids=["one-skill", "all-skills"])
def test_nobody_answers_a_request_that_is_not_theirs(
    runtime: AgentRuntime,
    approver: User,
    other_approver: User,
    owned: User,
    answer: str,
    htmx: bool,
    skill: str,
) -> None:
    # S13: Alice's request is Bob's 404, and Owen's (the runtime's owner) too: it has a principal.
    pending = open_skill_request(
        runtime, "deploy", "notify", session_id="s-alice", principal="alice", turn_id="t-1"
    )
    intruders = [logged_in(other_approver), logged_in(owned)]  # signing in is audited: first
    before = allows()
    events = AuditEvent.objects.count()
    for intruder in intruders:
        response = intruder.post(
            reverse("approvals:answer", kwargs={"pk": pending.pk}),
            {"answer": answer, "skill": skill},
            headers=HTMX if htmx else {},
        )
        assert response.status_code == 404
    assert allows() == before
    assert AuditEvent.objects.count() == events
    assert not Grant.objects.exists()


def test_an_auditor_answers_nothing_whatever_the_value(runtime: AgentRuntime, auditor: User) -> None:
    # S13: auditors answer nothing.
    pending = open_skill_request(runtime, "deploy", session_id="s-1", principal=None)
    for answer in CRAFTED:
        response = logged_in(auditor).post(
            reverse("approvals:answer", kwargs={"pk": pending.pk}), {"answer": answer, "skill": "deploy"}
        )
        assert response.status_code == 403
    assert not Grant.objects.exists()


def _offered(html: str) -> set[tuple[str, str]]:
    """The (skill, answer) buttons a request page shows; skill "" for the answer-all row."""
    one = re.findall(
        r'name="skill" value="([^"]*)"><input type="hidden" name="answer" value="([A-Z_]+)"', html
    )
    every = re.findall(
        r'name="csrfmiddlewaretoken" value="[^"]*"><input type="hidden" name="answer" value="([A-Z_]+)"', html
    )
    return set(one) | {("", a) for a in every}


def _scenarios(runtime: AgentRuntime) -> dict[str, ApprovalRequest]:
    rules.rule_create(
        pattern="prod-*", action=RuleAction.ASK, widest_scope=GrantScope.SESSION, actor=TEST_ACTOR
    )
    return {
        # A session with a turn: once, session, (agent for operators and the owner), deny.
        "turn": open_skill_request(
            runtime, "deploy", "notify", session_id="s-alice", principal="alice", turn_id="t-1"
        ),
        # No turn: no Allow once.
        "no-turn": open_skill_request(runtime, "deploy", session_id="s-alice-2", principal="alice"),
        # No session at all: a session answer would be agent-wide (S6), so only those who
        # may grant AGENT scope get it.
        "escalates": open_skill_request(runtime, "deploy", principal="alice", session_id=None),
        # A rule caps the skill at SESSION: nobody gets Always allow.
        "capped": open_skill_request(runtime, "prod-db", session_id="s-alice-3", principal="alice"),
        # A fork: its session answer lands on the invoking session.
        "fork": open_skill_request(
            runtime, "deploy", invoking_session_id="s-alice", principal="alice", session_id=None
        ),
    }


@pytest.mark.parametrize("who", ["alice", "owner", "operator"])
def test_the_server_refuses_every_answer_the_page_does_not_offer(
    runtime: AgentRuntime, approver: User, owned: User, operator: User, who: str
) -> None:
    # S13 S5 S6: the buttons are the whole offer; a crafted POST of anything else is refused
    # and writes nothing, and each offered answer is accepted.
    user = {"alice": approver, "owner": owned, "operator": operator}[who]
    scenarios = _scenarios(runtime)
    if who == "owner":
        # Owen owns the runtime but Alice is each request's principal: he sees none of them.
        for pending in scenarios.values():
            assert (
                logged_in(user).get(reverse("approvals:request", kwargs={"pk": pending.pk})).status_code
                == 404
            )
        scenarios = {
            "no-principal": open_skill_request(runtime, "deploy", "notify", session_id=None, principal=None),
            "no-principal-turn": open_skill_request(
                runtime, "deploy", session_id="s-x", turn_id="t", principal=None
            ),
        }
    client = logged_in(user)
    checked = 0
    for name, pending in scenarios.items():
        page = client.get(reverse("approvals:request", kwargs={"pk": pending.pk}))
        assert page.status_code == 200, name
        offered = _offered(page.content.decode())
        assert offered, name
        skills = [item.skill for item in pending.items.all()]
        for skill in [*skills, ""]:
            for answer in Answer.values:
                expected = (skill, answer) in offered
                if skill == "" and len(skills) == 1:
                    expected = (skills[0], answer) in offered  # one skill: no answer-all row
                with transaction.atomic():
                    before = allows()
                    grants_before = Grant.objects.count()
                    response = client.post(
                        reverse("approvals:answer", kwargs={"pk": pending.pk}),
                        {"answer": answer, "skill": skill},
                        headers=HTMX,
                    )
                    assert response.status_code == 200
                    written = Grant.objects.count() - grants_before
                    if expected:
                        # S13: Deny this request answers the request and stores nothing.
                        stored = 0 if answer == Answer.DENY_REQUEST else 1
                        assert written == (len(skills) if skill == "" else 1) * stored, (name, skill, answer)
                    else:
                        assert written == 0, (name, skill, answer)
                        assert allows() == before
                        assert (
                            "is not offered" in response.content.decode()
                            or "not yours" in response.content.decode()
                        )
                    checked += 1
                    transaction.set_rollback(True)
    assert checked >= 20


def test_an_approver_cannot_grant_agent_scope_by_crafting_a_post(
    runtime: AgentRuntime, approver: User
) -> None:
    # S13: "Always allow for this agent" is absent for Alice and the server refuses it; a
    # session answer where there is no session (it would become agent-wide, S6) too.
    with_session = open_skill_request(runtime, "deploy", session_id="s-alice", principal="alice")
    without = open_skill_request(runtime, "deploy", principal="alice", session_id=None)
    client = logged_in(approver)
    for pending, answer in (
        (with_session, Answer.ALLOW_AGENT),
        (without, Answer.ALLOW_AGENT),
        (without, Answer.ALLOW_SESSION),
    ):
        page = client.get(reverse("approvals:request", kwargs={"pk": pending.pk})).content.decode()
        assert f'data-answer="{answer}"' not in page
        response = client.post(
            reverse("approvals:answer", kwargs={"pk": pending.pk}), {"answer": answer, "skill": "deploy"}
        )
        assert response.status_code == 403
    assert not Grant.objects.filter(scope=GrantScope.AGENT).exists()
    assert not Grant.objects.exists()
    assert set(ApprovalItem.objects.values_list("decision", flat=True)) == {""}


@pytest.mark.parametrize(
    "reason", ["ALLOW_AGENT", "answer: a", '{"decision": "ALLOW", "scope": "AGENT"}', "y"]
)
def test_the_reason_never_changes_what_the_page_offers(
    runtime: AgentRuntime, approver: User, reason: str
) -> None:
    # S11 S13: the buttons come from who is asking and the request's shape, never its text.
    plain = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    worded = open_skill_request(runtime, "deploy", session_id="s-2", principal="alice", reason=reason)
    client = logged_in(approver)
    pages = [
        client.get(reverse("approvals:request", kwargs={"pk": r.pk})).content.decode()
        for r in (plain, worded)
    ]
    assert escape(reason) in pages[1]  # shown to the person, as written
    assert (
        _offered(pages[0])
        == _offered(pages[1])
        == {
            ("deploy", Answer.ALLOW_SESSION),
            ("deploy", Answer.DENY),
        }
    )


def test_someone_elses_grant_cannot_be_revoked_or_seen(
    runtime: AgentRuntime, approver: User, other_approver: User, owned: User, operator: User
) -> None:
    # S13: Alice's session grant is Bob's 404; an agent-wide grant is the owner's and the
    # operators' to revoke, anyone else's 404. A refused revoke leaves the grant in force.
    from aimon_admin.approvals.services import request_answer

    session_grant_request = open_skill_request(runtime, "deploy", session_id="s-alice", principal="alice")
    request_answer(request=session_grant_request, user=approver, answer=Answer.ALLOW_SESSION)
    agent_grant_request = open_skill_request(runtime, "notify", session_id="s-alice", principal="alice")
    request_answer(request=agent_grant_request, user=operator, answer=Answer.ALLOW_AGENT)
    session_grant = Grant.objects.get(scope=GrantScope.SESSION)
    agent_grant = Grant.objects.get(scope=GrantScope.AGENT)
    cases = [
        (other_approver, session_grant, 404),
        (owned, session_grant, 404),
        (approver, agent_grant, 404),
        (other_approver, agent_grant, 404),
    ]
    for user, grant, status in cases:
        client = logged_in(user)
        path = reverse("approvals:grant-revoke", kwargs={"pk": grant.pk})
        assert client.get(path).status_code == status
        assert client.post(path).status_code == status
    assert Grant.objects.active().count() == 2
    assert (
        logged_in(owned).post(reverse("approvals:grant-revoke", kwargs={"pk": agent_grant.pk})).status_code
        == 302
    )
    assert (
        logged_in(approver)
        .post(reverse("approvals:grant-revoke", kwargs={"pk": session_grant.pk}))
        .status_code
        == 302
    )
    assert Grant.objects.active().count() == 0
