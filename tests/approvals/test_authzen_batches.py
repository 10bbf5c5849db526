"""AuthZEN batches and refusals (docs/api.md "AuthZEN"), driven by the independent client of
`authzen_client`: top-level defaults, the three evaluations semantics, an evaluation that
cannot be made; 401, and 400 naming the member for bad bodies, with nothing decided."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals import services
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest, Session
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import token_issue
from tests.approvals.authzen_client import (  # noqa: F401 - fixtures
    ALICE,
    CALL,
    PUSH,
    REQUEST_ID,
    Pep,
    pep_fixture,
    request,
    tool,
    tools_fixture,
)
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db


# --- Batches: defaults and the three semantics ------------------------------------------------------

# Three calls in the shape of the specification's examples: one subject, action and context as
# top-level defaults, each evaluation naming its resource.
READ = {"resource": tool("Read", arguments={"path": "a"})}
BASH = {"resource": tool("Bash", arguments=PUSH)}


def batch(*evaluations: dict[str, Any], semantic: str | None = None, **defaults: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"subject": ALICE, "action": CALL, "context": {"session_id": "s-1"}, **defaults}
    if semantic is not None:
        body["options"] = {"evaluations_semantic": semantic}
    body["evaluations"] = list(evaluations)
    return body


ASKS = {"decision": False, "context": {"ask": True, "reason": "DESTRUCTIVE_ALWAYS_ASKS", "source": "GATE"}}
ALLOWED = {"decision": True}


@pytest.mark.parametrize("semantic", [None, "execute_all"])
def test_execute_all_answers_every_evaluation_in_order(pep: Pep, semantic: str | None) -> None:
    assert pep.evaluations(batch(READ, BASH, READ, semantic=semantic)) == [ALLOWED, ASKS, ALLOWED]


def test_deny_on_first_deny_stops_after_the_first_false(pep: Pep) -> None:
    assert pep.evaluations(batch(READ, BASH, READ, semantic="deny_on_first_deny")) == [ALLOWED, ASKS]
    assert pep.evaluations(batch(READ, READ, semantic="deny_on_first_deny")) == [ALLOWED, ALLOWED]


def test_permit_on_first_permit_stops_after_the_first_true(pep: Pep) -> None:
    assert pep.evaluations(batch(BASH, READ, BASH, semantic="permit_on_first_permit")) == [ASKS, ALLOWED]
    assert pep.evaluations(batch(BASH, BASH, semantic="permit_on_first_permit")) == [ASKS, ASKS]


def test_an_evaluations_own_member_replaces_the_default_whole(pep: Pep) -> None:
    # The default context names a session (attended: ASK); one evaluation's own context names
    # only a turn, which replaces it, so that call is unattended (a DENY), never merged.
    own_context = {**BASH, "context": {"turn_id": "t-1"}}
    own_subject = {**READ, "subject": {"type": "user", "id": "alice"}}

    answers = pep.evaluations(batch(BASH, own_context, own_subject))

    assert answers == [
        ASKS,
        {"decision": False, "context": {"ask": False, "reason": "UNATTENDED_NO_CHANNEL", "source": "GATE"}},
        ALLOWED,
    ]


def test_evaluations_without_defaults_stand_alone(pep: Pep) -> None:
    body = {"evaluations": [request(tool("Read")), request(tool("Bash", arguments=PUSH), session_id="s-2")]}

    assert pep.evaluations(body) == [ALLOWED, ASKS]


@pytest.mark.parametrize("evaluations", [None, []])
def test_a_batch_without_evaluations_is_one_evaluation(pep: Pep, evaluations: list | None) -> None:
    # Backwards compatible with the single Access Evaluation request: one Decision.
    body = request(tool("Bash", arguments=PUSH), session_id="s-1")
    if evaluations is not None:
        body["evaluations"] = evaluations
    response = pep.post("access_evaluations_endpoint", "/access/v1/evaluations", body, REQUEST_ID)

    assert response.status_code == 200
    assert json.loads(response.content) == ASKS


def test_an_evaluation_that_cannot_be_made_is_false_in_place(pep: Pep) -> None:  # S12
    pep.evaluate(request(tool("Read"), session_id="s-1"))  # s-1 is alice's now
    bob = {**READ, "subject": {"type": "user", "id": "bob"}}

    answers = pep.evaluations(batch(READ, bob, READ))
    stopped = pep.evaluations(batch(READ, bob, READ, semantic="deny_on_first_deny"))

    assert answers[0] == answers[2] == ALLOWED
    assert answers[1]["decision"] is False
    assert answers[1]["context"]["error"]["status"] == 409
    assert "alice" in answers[1]["context"]["error"]["message"]
    assert stopped == answers[:2]


def test_one_approval_allows_one_evaluation_of_a_batch(pep: Pep, api: Any, approver: User) -> None:  # U4
    opened = api.post(
        "/api/v1/tool-approval-requests",
        {"tool": "Bash", "session_id": "s-1", "principal": "alice", "arguments": PUSH},
        format="json",
    ).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]), user=approver, answer=Answer.ALLOW_CALL
    )
    context = {"session_id": "s-1", "approval_id": opened["id"]}

    answers = pep.evaluations(batch(BASH, BASH, context=context))

    assert [each["decision"] for each in answers] == [True, False]


# --- Refusals: 401, 400 naming the member, nothing decided ------------------------------------------


@pytest.mark.parametrize("path", ["/access/v1/evaluation", "/access/v1/evaluations"])
@pytest.mark.parametrize("token", [None, "aimon_not-a-real-token"])
def test_no_token_or_a_bad_one_is_401(path: str, token: str | None) -> None:
    pep = Pep(token)
    body = request(tool("Read"), session_id="s-1")

    answer = pep.refused(path, body, 401)

    assert answer["error"] == "not_authenticated"
    response = pep.post("access_evaluation_endpoint", path, body)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Session.objects.exists()


def test_another_runtimes_token_decides_for_that_runtime(other_runtime: AgentRuntime) -> None:
    # The token names the runtime: agent-two has no Read of its own, so it is unregistered there.
    token = token_issue(runtime=other_runtime, actor=TEST_ACTOR, label="t")[1]
    other = Pep(token)

    decision = other.evaluate(request(tool("Read"), session_id="s-1"))

    assert decision["decision"] is False
    assert Session.objects.get().runtime == other_runtime


GOOD = request(tool("Bash", arguments=PUSH), session_id="s-1")


def _with(path: str, value: Any, body: dict[str, Any] = GOOD) -> dict[str, Any]:
    """`body` with the member at dotted `path` set to `value` (`...` removes it)."""
    body = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    target = body
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return body


BAD_EVALUATIONS = [
    (_with("subject", ...), "subject"),
    (_with("resource", ...), "resource"),
    (_with("action", ...), "action"),
    (_with("subject", "alice"), "subject"),
    (_with("subject", None), "subject"),
    (_with("subject.id", 7), "subject.id"),
    (_with("subject.id", ""), "subject.id"),
    (_with("subject.type", "group"), "subject.type"),
    (_with("subject.properties", {"department": "Sales"}), "subject.properties"),
    (_with("resource.type", "document"), "resource.type"),
    (_with("resource.id", ["Bash"]), "resource.id"),
    (_with("resource.id", "a\nb"), "resource.id"),
    (_with("resource.properties", "git"), "resource.properties"),
    (_with("resource.properties.server", 3), "resource.properties.server"),
    (_with("resource.properties.arguments", ["git", "push"]), "resource.properties.arguments"),
    (_with("resource.properties.arguments", "git push"), "resource.properties.arguments"),
    (_with("resource.properties.input", {}), "resource.properties.input"),
    (_with("action.name", "can_read"), "action.name"),
    (_with("action.name", "CALL"), "action.name"),
    (_with("action.properties", {"method": "GET"}), "action.properties"),
    (_with("context.sesion_id", "s-1"), "context.sesion_id"),
    (_with("context.session_id", ""), "context.session_id"),
    (_with("context.turn_id", 7), "context.turn_id"),
    (_with("context.approval_id", "not-a-uuid"), "context.approval_id"),
    (_with("context.replay", "yes"), "context.replay"),
    (_with("context", "s-1"), "context"),
    (_with("evaluations", [GOOD]), "evaluations"),  # a batch member on the single endpoint
    (_with("decision", True), "decision"),  # S11: nothing carries an answer in
]


@pytest.mark.parametrize(("body", "field"), BAD_EVALUATIONS, ids=[f for _, f in BAD_EVALUATIONS])
def test_a_bad_evaluation_is_400_naming_the_member(pep: Pep, body: dict[str, Any], field: str) -> None:
    answer = pep.refused("/access/v1/evaluation", body, 400)

    assert list(answer["fields"]) == [field], answer
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"n": 1e999}', "Numbers must be finite"),
        ('{"text": "\\ud800"}', "Text must be valid Unicode"),
        (json.dumps({"big": "x" * (64 * 1024)}), "At most 65536 bytes as canonical JSON"),
        ('{"a":' * 40 + "1" + "}" * 40, "Nested deeper than"),
    ],
)
def test_bad_arguments_are_400_naming_the_problem(pep: Pep, raw: str, message: str) -> None:
    # Bad input: the tool decision's own checks, under the member's path.
    resource = '{"type": "tool", "id": "Bash", "properties": {"arguments": ' + raw + "}}"
    body = (
        '{"subject": {"type": "user", "id": "alice"}, "action": {"name": "call"}, "resource": '
        + resource
        + "}"
    )

    for path in ("/access/v1/evaluation", "/access/v1/evaluations"):
        answer = pep.refused(path, body, 400)
        assert list(answer["fields"]) == ["resource.properties.arguments"], path
        assert answer["fields"]["resource.properties.arguments"][0].startswith(message)


def test_nan_does_not_even_parse(pep: Pep) -> None:
    body = json.dumps(request(tool("Bash", arguments={"n": math.nan})))  # Python writes NaN
    assert "NaN" in body

    answer = pep.refused("/access/v1/evaluation", body, 400)

    assert answer["detail"].startswith("JSON parse error")


@pytest.mark.parametrize("body", [json.dumps([GOOD]), '"call"', "7", "null"])
def test_a_body_that_is_not_an_object_is_400(pep: Pep, body: str) -> None:
    for path in ("/access/v1/evaluation", "/access/v1/evaluations"):
        assert list(pep.refused(path, body, 400)["fields"]) == ["non_field_errors"]


BAD_BATCHES = [
    ({"evaluations": [READ]}, "evaluations[0].subject"),  # no default for it either
    ({"subject": ALICE, "evaluations": [READ]}, "evaluations[0].action"),
    (batch(READ, {"resource": tool("Bash") | {"type": "file"}}), "evaluations[1].resource.type"),
    (batch(READ, {**READ, "context": {"sesion_id": "s-1"}}), "evaluations[1].context.sesion_id"),
    (batch(READ, {**READ, "decision": True}), "evaluations[1].decision"),
    (batch(READ, "Read"), "evaluations[1]"),
    (batch(READ, semantic="all"), "options.evaluations_semantic"),
    (batch(READ) | {"options": {"another_option": "value"}}, "options.another_option"),
    (batch(READ) | {"evaluations": {"0": READ}}, "evaluations"),
    (batch(*[READ] * 101), "evaluations"),
    (batch(READ) | {"subject": {"type": "user"}}, "subject.id"),
    ({"subject": ALICE, "action": CALL, "evaluations": []}, "resource"),
    (batch(READ) | {"contxt": {}}, "contxt"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BATCHES, ids=[f for _, f in BAD_BATCHES])
def test_a_bad_batch_is_400_naming_the_member_and_decides_nothing(
    pep: Pep, body: dict[str, Any], field: str
) -> None:
    # The whole payload is checked first: the valid evaluations beside it open no session.
    answer = pep.refused("/access/v1/evaluations", body, 400)

    assert field in answer["fields"], answer
    assert not Session.objects.exists()
