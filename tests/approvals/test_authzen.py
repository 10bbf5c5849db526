"""The tool decision as an OpenID AuthZEN Authorization API 1.0 policy decision point (API.md
"AuthZEN"; DESIGN part U), driven by an independent client.

`Pep` is a policy enforcement point written from the specification's text alone: it finds the
endpoints in the discovery document (checking the identifier as the specification says),
sends JSON bodies built here as plain dicts in the shapes of the specification's examples, and
checks every answer against the specification's response shapes and HTTPS binding (200 and
application/json, a Decision object, X-Request-ID echoed). Nothing of the server's own
serializers is used: what the server promises is checked from the outside.
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.http import HttpResponse
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules, services
from aimon_admin.approvals.choices import Answer, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, Session, ToolRule
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import token_issue
from tests.conftest import TEST_ACTOR
from tests.core.test_asgi import drive

pytestmark = pytest.mark.django_db

HOST = "testserver"  # the Django test client's host
WELL_KNOWN = "/.well-known/authzen-configuration"
REQUEST_ID = "bfe9eb29-ab87-4ca3-be83-a1d5d8305716"  # the specification's own example


# --- The independent client --------------------------------------------------------------------


def check_decision(decision: Any) -> dict[str, Any]:
    """A Decision: an object with a REQUIRED boolean `decision` and an OPTIONAL object
    `context` (spec: Information Model, Decision)."""
    assert isinstance(decision, dict), decision
    assert set(decision) <= {"decision", "context"}, decision
    assert type(decision["decision"]) is bool, decision
    if "context" in decision:
        assert isinstance(decision["context"], dict), decision
    return decision


class Pep:
    """A PEP speaking the HTTPS JSON binding of AuthZEN 1.0 to the server under test."""

    def __init__(self, token: str | None, *, scheme: str = "http") -> None:
        self.http = Client()
        self.token = token
        self.identifier = f"{scheme}://{HOST}"  # the PDP identifier this PEP was configured with
        self.metadata: dict[str, Any] = {}

    def _send(self, method: str, url: str, body: str, request_id: str | None) -> HttpResponse:
        parts = urlsplit(url)
        assert parts.netloc == HOST, url
        headers = {}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if request_id is not None:
            headers["X-Request-ID"] = request_id
        response = self.http.generic(
            method,
            parts.path,
            body,
            content_type="application/json",
            secure=parts.scheme == "https",
            headers=headers,
        )
        if request_id is not None:
            # Request Identification: the same identifier comes back, on every answer.
            assert response["X-Request-ID"] == request_id
        return response

    def discover(self) -> dict[str, Any]:
        """Policy Decision Point Metadata: GET the well-known URL formed from the identifier,
        200 with an application/json object, the identifier identical to ours, the REQUIRED
        endpoint present, parameters without a value omitted rather than null."""
        response = self._send("GET", self.identifier + WELL_KNOWN, "", REQUEST_ID)
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        metadata = json.loads(response.content)
        assert isinstance(metadata, dict)
        assert metadata["policy_decision_point"] == self.identifier
        assert isinstance(metadata["access_evaluation_endpoint"], str)
        assert None not in metadata.values()
        self.metadata = metadata
        return metadata

    def url(self, parameter: str, default_path: str) -> str:
        """The endpoint's URL: the metadata's value when given, else the default path."""
        return self.metadata.get(parameter) or self.identifier + default_path

    def post(
        self, parameter: str, default_path: str, body: Any, request_id: str | None = None
    ) -> HttpResponse:
        raw = body if isinstance(body, str) else json.dumps(body)
        return self._send("POST", self.url(parameter, default_path), raw, request_id)

    def evaluate(self, request: dict[str, Any]) -> dict[str, Any]:
        """Access Evaluation: 200, application/json, one Decision."""
        response = self.post("access_evaluation_endpoint", "/access/v1/evaluation", request, REQUEST_ID)
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == "application/json"
        return check_decision(json.loads(response.content))

    def evaluations(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """Access Evaluations: 200, an `evaluations` array of Decisions in request order (the
        top-level `decision` omitted, as RECOMMENDED)."""
        response = self.post("access_evaluations_endpoint", "/access/v1/evaluations", request, REQUEST_ID)
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == "application/json"
        answer = json.loads(response.content)
        assert set(answer) == {"evaluations"}, answer
        assert isinstance(answer["evaluations"], list)
        return [check_decision(each) for each in answer["evaluations"]]

    def refused(self, path: str, body: Any, status: int) -> dict[str, Any]:
        """An error of the HTTPS binding: the status, a JSON object body, the request id."""
        parameter = (
            "access_evaluations_endpoint" if path.endswith("evaluations") else "access_evaluation_endpoint"
        )
        response = self.post(parameter, path, body, REQUEST_ID)
        assert response.status_code == status, response.content
        assert response["Content-Type"] == "application/json"
        answer = json.loads(response.content)
        assert isinstance(answer, dict)
        return answer


# --- Requests, as the specification's examples write them ---------------------------------------

ALICE = {"type": "user", "id": "alice"}
CALL = {"name": "call"}


def tool(name: str, *, server: str | None = None, arguments: dict | None = None) -> dict[str, Any]:
    resource: dict[str, Any] = {"type": "tool", "id": name}
    properties = {
        key: value for key, value in (("server", server), ("arguments", arguments)) if value is not None
    }
    if properties:
        resource["properties"] = properties
    return resource


def request(resource: dict[str, Any], subject: dict = ALICE, **context: Any) -> dict[str, Any]:
    body = {"subject": subject, "resource": resource, "action": CALL}
    if context:
        body["context"] = context
    return body


PUSH = {"command": "git push origin main"}


@pytest.fixture(autouse=True)
def tools(runtime: AgentRuntime) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "Bash"},
            {"name": "Read", "side_effect_level": "READ_ONLY"},
            {
                "name": "Edit",
                "side_effect_level": "MUTATING",
                "destructive_behavior": "NON_DESTRUCTIVE",
                "idempotency_behavior": "IDEMPOTENT",
            },
        ],
        actor=TEST_ACTOR,
    )
    ToolSubject.objects.create(server="", tool="Bash", argument="command")


@pytest.fixture
def pep(runtime_token: str) -> Pep:
    client = Pep(runtime_token)
    client.discover()
    return client


def rule(text_tool: str, pattern: str, action: str, **extra: Any) -> ToolRule:
    made = ToolRule.objects.create(tool=text_tool, pattern=pattern, action=action, **extra)
    rules.rule_index_reset()
    return made


# --- Discovery -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_discovery_document_names_this_pdp_and_its_endpoints(scheme: str) -> None:
    # No token: metadata is fetched with a plain GET.
    metadata = Pep(None, scheme=scheme).discover()

    assert metadata == {
        "policy_decision_point": f"{scheme}://{HOST}",
        "access_evaluation_endpoint": f"{scheme}://{HOST}/access/v1/evaluation",
        "access_evaluations_endpoint": f"{scheme}://{HOST}/access/v1/evaluations",
    }


def test_the_discovery_document_may_be_cached_and_is_only_read() -> None:
    http = Client()
    response = http.get(WELL_KNOWN)
    assert response["Cache-Control"] == "max-age=3600"
    refused = http.post(WELL_KNOWN, "{}", content_type="application/json")
    assert refused.status_code == 405
    assert refused.json()["error"] == "method_not_allowed"


# --- One evaluation: ALLOW, ASK, DENY (U) -----------------------------------------------------------


def test_allow_is_true_and_nothing_else(pep: Pep) -> None:  # U: the gate, READ_ONLY
    assert pep.evaluate(request(tool("Read", arguments={"path": "README.md"}))) == {"decision": True}


def test_ask_is_false_with_ask_true(pep: Pep) -> None:  # U, T7: destructive always asks
    decision = pep.evaluate(request(tool("Bash", arguments=PUSH), session_id="s-1", turn_id="t-1"))

    assert decision == {
        "decision": False,
        "context": {"ask": True, "reason": "DESTRUCTIVE_ALWAYS_ASKS", "source": "GATE"},
    }


def test_deny_is_false_with_the_reason(pep: Pep) -> None:  # U1: an operator's DENY rule
    made = rule("Bash", "rm:*", RuleAction.DENY)

    decision = pep.evaluate(request(tool("Bash", arguments={"command": "rm -rf /"}), session_id="s-1"))

    assert decision == {
        "decision": False,
        "context": {
            "ask": False,
            "reason": "DENIED_BY_RULE",
            "source": "RULE",
            "rule": {"id": made.pk, "pattern": "Bash(rm:*)"},
        },
    }


def test_an_unattended_question_is_a_deny(pep: Pep) -> None:  # T8: nobody can be asked
    decision = pep.evaluate(request(tool("Bash", arguments=PUSH)))

    assert decision == {
        "decision": False,
        "context": {"ask": False, "reason": "UNATTENDED_NO_CHANNEL", "source": "GATE"},
    }


def test_a_pre_approval_answers_an_unattended_call(pep: Pep, runtime: AgentRuntime) -> None:  # U5
    rule("Bash", "git fetch:*", RuleAction.ALLOW, runtime=runtime, unattended=True)

    assert pep.evaluate(request(tool("Bash", arguments={"command": "git fetch origin"}))) == {
        "decision": True
    }
    assert pep.evaluate(
        request(tool("Bash", arguments={"command": "git fetch origin"}), session_id="s-1")
    ) == {
        "decision": False,
        "context": {"ask": True, "reason": "DESTRUCTIVE_ALWAYS_ASKS", "source": "GATE"},
    }


def test_a_session_is_made_and_its_principal_fixed_as_for_tool_decisions(pep: Pep) -> None:  # S12
    pep.evaluate(request(tool("Read"), session_id="s-1"))
    assert Session.objects.get(session_id="s-1").principal == "alice"

    bob = {"type": "user", "id": "bob"}
    answer = pep.refused("/access/v1/evaluation", request(tool("Read"), subject=bob, session_id="s-1"), 409)
    assert answer["error"] == "conflict"


def test_an_invoking_session_never_seen_is_400_naming_it(pep: Pep) -> None:  # S3
    body = request(tool("Read"), session_id="s-fork", invoking_session_id="never-seen")

    answer = pep.refused("/access/v1/evaluation", body, 400)

    assert list(answer["fields"]) == ["context.invoking_session_id"]


def test_allow_this_call_is_used_once_through_the_context(pep: Pep, api: Any, approver: User) -> None:  # U4
    opened = api.post(
        "/api/v1/tool-approval-requests",
        {"tool": "Bash", "session_id": "s-1", "principal": "alice", "arguments": {**PUSH, "force": False}},
        format="json",
    ).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]), user=approver, answer=Answer.ALLOW_CALL
    )
    # The same arguments, keys in another order: the same canonical digest.
    call = request(
        tool("Bash", arguments={"force": False, **PUSH}), session_id="s-1", approval_id=opened["id"]
    )
    changed = request(
        tool("Bash", arguments={"force": True, **PUSH}), session_id="s-1", approval_id=opened["id"]
    )

    assert pep.evaluate(changed)["decision"] is False
    assert pep.evaluate(call) == {"decision": True}
    again = pep.evaluate(call)
    assert again["decision"] is False
    assert again["context"]["ask"] is True
    assert "approval_id approves no call like this one" in again["context"]["note"]


# --- The same decision through both endpoints (U) --------------------------------------------------


@pytest.fixture
def world(api: Any, approver: User, runtime: AgentRuntime) -> None:
    """Rules, a pre-approval and a session grant narrowed to a pattern, as an operator and an
    approver would leave them."""
    rule("Bash", "rm:*", RuleAction.DENY)
    rule("Bash", "git status:*", RuleAction.ALLOW)
    rule("Bash", "git fetch:*", RuleAction.ALLOW, runtime=runtime, unattended=True)
    opened = api.post(
        "/api/v1/tool-approval-requests",
        {"tool": "Bash", "session_id": "s-1", "principal": "alice", "arguments": PUSH},
        format="json",
    ).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]),
        user=approver,
        answer=Answer.ALLOW_SESSION,
        pattern="git push:*",
    )


SAME_CALLS = [
    ("read-only", {"tool": "Read", "arguments": {"path": "a"}}, "ALLOW"),
    ("destructive, attended", {"tool": "Bash", "session_id": "s-1", "arguments": {"command": "ls"}}, "ASK"),
    ("destructive, unattended", {"tool": "Bash", "arguments": {"command": "ls"}}, "DENY"),
    ("deny rule", {"tool": "Bash", "session_id": "s-1", "arguments": {"command": "rm -rf /"}}, "DENY"),
    ("allow rule", {"tool": "Bash", "session_id": "s-1", "arguments": {"command": "git status"}}, "ALLOW"),
    (
        "an allow rule never covers a chained command",
        {"tool": "Bash", "session_id": "s-1", "arguments": {"command": "git status; rm -rf ~"}},
        "ASK",
    ),
    ("pre-approval", {"tool": "Bash", "arguments": {"command": "git fetch origin"}}, "ALLOW"),
    ("subject absent", {"tool": "Bash", "session_id": "s-1", "arguments": {"cmd": "ls"}}, "ASK"),
    (
        "session grant",
        {
            "tool": "Bash",
            "session_id": "s-1",
            "turn_id": "t-9",
            "arguments": {"command": "git push origin dev"},
        },
        "ALLOW",
    ),
    (
        "invoking session's grant",
        {
            "tool": "Bash",
            "session_id": "s-fork",
            "invoking_session_id": "s-1",
            "arguments": {"command": "git push origin dev"},
        },
        "ALLOW",
    ),
    ("unregistered MCP tool", {"tool": "git_reset", "server": "git", "session_id": "s-1"}, "ASK"),
    ("edit", {"tool": "Edit", "session_id": "s-1", "arguments": {"path": "a"}}, "ASK"),
]


@pytest.mark.parametrize(("call", "expected"), [c[1:] for c in SAME_CALLS], ids=[c[0] for c in SAME_CALLS])
def test_the_same_call_gets_the_same_decision_through_both_endpoints(
    world: None, pep: Pep, api: Any, call: dict[str, Any], expected: str
) -> None:  # U: one chain, two wires
    context = {k: call[k] for k in ("session_id", "invoking_session_id", "turn_id") if k in call}
    decision = pep.evaluate(
        request(tool(call["tool"], server=call.get("server"), arguments=call.get("arguments")), **context)
    )
    answer = api.post("/api/v1/tool-decisions", {**call, "principal": "alice"}, format="json").json()

    assert answer["decision"] == expected
    assert decision["decision"] is (expected == "ALLOW")
    if expected == "ALLOW":
        assert decision == {"decision": True}
    else:
        assert decision["context"]["ask"] is (expected == "ASK")
        assert decision["context"]["reason"] == answer["reason"]
        assert decision["context"]["source"] == answer["source"]
        assert decision["context"].get("rule") == answer.get("rule")
        assert decision["context"].get("note") == answer.get("note")


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
    # Issue 15, bad input: the tool decision's own checks, under the member's path.
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


# --- The HTTPS binding: request ids, JSON errors, the body limit, no page policy ---------------------


@pytest.mark.parametrize("request_id", [REQUEST_ID, "trace 42 / retry 1", "x" * 300])
def test_the_request_id_is_echoed_as_sent(pep: Pep, request_id: str) -> None:
    # Request Identification: "the PDP MUST include the same identifier in the response", even
    # one the rest of the API would replace (spaces, a slash, longer than 64 characters).
    for body, status in ((request(tool("Read")), 200), ({}, 400)):
        response = pep.post("access_evaluation_endpoint", "/access/v1/evaluation", body, request_id)
        assert response.status_code == status
    assert (
        Pep(None).post("access_evaluation_endpoint", "/access/v1/evaluation", {}, request_id).status_code
        == 401
    )


def test_without_a_request_id_one_is_given(pep: Pep) -> None:
    response = pep.post("access_evaluation_endpoint", "/access/v1/evaluation", request(tool("Read")))
    assert len(response["X-Request-ID"]) == 32


def test_an_unknown_path_under_access_is_404_json_even_in_debug(pep: Pep, settings: Any) -> None:
    settings.DEBUG = True
    for path in ("/access/v1/search/subject", "/access/v2/evaluation", "/access/"):
        response = Client().get(path)
        assert response.status_code == 404, path
        assert response.json() == {"error": "not_found", "detail": "No such API endpoint."}


def test_a_wrong_method_is_405_json(pep: Pep) -> None:
    response = Client().delete("/access/v1/evaluation", headers={"Authorization": f"Bearer {pep.token}"})
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_a_body_over_one_mebibyte_is_413(pep: Pep) -> None:
    body = json.dumps(request(tool("Bash", arguments={"command": "x" * (1024 * 1024)})))

    for path in ("/access/v1/evaluation", "/access/v1/evaluations"):
        answer = pep.refused(path, body, 413)
        assert answer == {
            "error": "payload_too_large",
            "detail": "Request body is larger than the 1 MiB limit.",
        }


def test_a_chunked_body_over_the_limit_is_413_json_under_asgi() -> None:
    result = drive("/access/v1/evaluation", [b"{" + b" " * 600_000, b" " * 600_000])
    assert result["status"] == 413
    assert json.loads(result["body"])["error"] == "payload_too_large"


def test_json_answers_carry_no_page_policy(pep: Pep) -> None:
    answered = pep.post("access_evaluation_endpoint", "/access/v1/evaluation", request(tool("Read")))
    refused = Pep(None).post("access_evaluations_endpoint", "/access/v1/evaluations", {})
    metadata = Client().get(WELL_KNOWN)

    for response in (answered, refused, metadata):
        assert "Content-Security-Policy" not in response


def test_the_trailing_slash_is_optional(pep: Pep) -> None:
    for path in ("/access/v1/evaluation/", "/access/v1/evaluations/"):
        response = Client().post(
            path,
            json.dumps(request(tool("Read"))),
            content_type="application/json",
            headers={"Authorization": f"Bearer {pep.token}"},
        )
        assert response.status_code == 200
    assert Client().get(WELL_KNOWN + "/").status_code == 200
