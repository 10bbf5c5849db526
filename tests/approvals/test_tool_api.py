"""Tool calls that ask, through the HTTP API (docs/api.md "Tools"; U1-U7):
`POST /tool-decisions` with the fields of part U, `POST /tool-approval-requests`, its long-poll
and cancel; whole bodies, another runtime's request a 404, bad input a 400 naming the field."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.request
import uuid
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules, services, wakeups
from aimon_admin.approvals.api.serializers import ToolDecisionIn, tool_decision_input
from aimon_admin.approvals.choices import Answer, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, Grant, ToolRule
from aimon_admin.approvals.services.errors import UNATTENDED_TOOL_REQUEST_MESSAGE
from aimon_admin.approvals.services.tool_decisions import APPROVAL_NOT_USED_NOTE, REPLAY_NOT_IDEMPOTENT_NOTE
from aimon_admin.approvals.tool_policy import ARGUMENTS_MAX_DEPTH
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import api_client_for, bearer_client

TOOL_REQUESTS = "/api/v1/tool-approval-requests"
DECISIONS = "/api/v1/tool-decisions"
PUSH = {"command": "git push origin main"}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture(autouse=True)
def tools(runtime: AgentRuntime, other_runtime: AgentRuntime) -> None:
    for each in (runtime, other_runtime):
        local_tools_replace(
            runtime=each,
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
def other_api(other_runtime: AgentRuntime) -> APIClient:
    return api_client_for(other_runtime, label="t")


def open_request(api: APIClient, **body: Any) -> Any:
    body = {"tool": "Bash", "session_id": "s-1", "principal": "alice", "arguments": PUSH, **body}
    return api.post(TOOL_REQUESTS, body, format="json")


def decide(api: APIClient, **body: Any) -> Any:
    return api.post(DECISIONS, {"tool": "Bash", "session_id": "s-1", **body}, format="json")


def digest(canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def fields_of(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    return response.json()["fields"]


# --- POST /tool-approval-requests (U2) ------------------------------------------------------------


def test_opening_a_request_returns_the_call_as_stored(api: APIClient) -> None:  # U2, U4
    response = open_request(api, turn_id="t-3", reason="push the release branch")

    assert response.status_code == 201
    body = response.json()
    assert response["Location"] == f"/api/v1/tool-approval-requests/{body['id']}"
    assert ISO.match(body.pop("created_at"))
    assert ISO.match(body.pop("expires_at"))
    uuid.UUID(body.pop("id"))
    assert body == {
        "status": "PENDING",
        "tool": "Bash",
        "server": None,
        "subject": "git push origin main",
        "arguments_digest": digest(b'{"command":"git push origin main"}'),
        "decision": None,
        "scope": None,
        "pattern": None,
        "answered_by": None,
        "answered_at": None,
    }


def test_an_unattended_call_is_400(api: APIClient) -> None:  # U2, T8
    response = open_request(api, session_id=None)

    assert fields_of(response) == {"session_id": [UNATTENDED_TOOL_REQUEST_MESSAGE]}
    assert not ApprovalRequest.objects.exists()


def test_a_fork_may_open_one_on_its_invoking_session(api: APIClient) -> None:  # U2, S3
    decide(api, session_id="s-parent", principal="alice")

    response = open_request(api, session_id=None, invoking_session_id="s-parent")

    assert response.status_code == 201
    assert open_request(api, session_id=None, invoking_session_id="nobody").status_code == 400


def test_a_call_the_chain_decides_is_answered_at_once(api: APIClient) -> None:  # U2
    response = open_request(api, tool="Read", arguments={"path": "a"})

    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["decision"], body["scope"], body["source"]) == (
        "ANSWERED",
        "ALLOW",
        None,
        "GATE",
    )


def test_the_idempotency_key_returns_the_same_request(api: APIClient) -> None:  # U2, S4
    first = api.post(
        TOOL_REQUESTS,
        {"tool": "Bash", "session_id": "s-1", "arguments": PUSH},
        format="json",
        headers={"Idempotency-Key": "k-1"},
    )
    again = api.post(
        TOOL_REQUESTS,
        {"tool": "Bash", "session_id": "s-1", "arguments": PUSH},
        format="json",
        headers={"Idempotency-Key": "k-1"},
    )
    skill = api.post(
        "/api/v1/approval-requests",
        {"skills": ["deploy"], "session_id": "s-1"},
        format="json",
        headers={"Idempotency-Key": "k-1"},
    )

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    assert skill.status_code == 409  # that key opened a tool request
    assert ApprovalRequest.objects.count() == 1


def test_the_principal_of_a_session_is_fixed(api: APIClient) -> None:  # S12
    assert open_request(api).status_code == 201
    assert open_request(api, principal="bob").status_code == 409


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ('"ls"', "arguments", "Must be a JSON object of the call's arguments"),
        ("[1, 2]", "arguments", "Must be a JSON object of the call's arguments"),
        ('{"n": 1e999}', "arguments", "Numbers must be finite"),
        ('{"text": "\\ud800"}', "arguments", "Text must be valid Unicode"),
        ('{"text": "a\\u0000b"}', "arguments", "Must not contain NUL characters"),
        ('{"n": 9007199254740993}', "arguments", "Whole numbers must lie within"),
        (json.dumps({"big": "x" * (64 * 1024)}), "arguments", "At most 65536 bytes as canonical JSON"),
        ('{"a":' * ARGUMENTS_MAX_DEPTH + "1" + "}" * ARGUMENTS_MAX_DEPTH, "arguments", "Nested deeper than"),
    ],
)
def test_bad_arguments_are_400_naming_the_problem(api: APIClient, raw: str, field: str, message: str) -> None:
    # Bad input: never a 5xx, the problem named.
    for path in (TOOL_REQUESTS, DECISIONS):
        body = '{"tool": "Bash", "session_id": "s-1", "arguments": ' + raw + "}"
        response = api.generic("POST", path, body, content_type="application/json")
        fields = fields_of(response)
        assert list(fields) == [field], path
        assert fields[field][0].startswith(message), fields


def test_nan_does_not_even_parse(api: APIClient) -> None:  # bad input
    body = '{"tool": "Bash", "session_id": "s-1", "arguments": {"n": NaN}}'
    for path in (TOOL_REQUESTS, DECISIONS):
        response = api.generic("POST", path, body, content_type="application/json")
        assert response.status_code == 400
        assert response.json()["detail"].startswith("JSON parse error")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tool": ""}, "tool"),
        ({"tool": "Bash", "sesion_id": "s-1"}, "sesion_id"),
        ({"tool": "Bash", "decision": "ALLOW"}, "decision"),  # S11: nothing carries an answer in
        ({"tool": "Bash", "server": "x" * 201}, "server"),
        ({"tool": "Bash", "timeout_seconds": 0}, "timeout_seconds"),
        ({"tool": "Bash", "reason": "x" * 2001}, "reason"),
    ],
)
def test_bad_request_bodies_are_400_naming_the_field(api: APIClient, body: dict, field: str) -> None:
    assert field in fields_of(api.post(TOOL_REQUESTS, {"session_id": "s-1", **body}, format="json"))


# --- GET …/{id}?wait=N and cancel ------------------------------------------------------------------


def test_the_request_is_read_only_by_its_runtime_and_under_its_own_path(
    api: APIClient, other_api: APIClient
) -> None:
    opened = open_request(api).json()

    assert api.get(f"{TOOL_REQUESTS}/{opened['id']}").json() == opened
    assert other_api.get(f"{TOOL_REQUESTS}/{opened['id']}").status_code == 404
    assert api.get(f"/api/v1/approval-requests/{opened['id']}").status_code == 404
    assert api.get(f"{TOOL_REQUESTS}/not-a-uuid").status_code == 404
    assert api.get(f"{TOOL_REQUESTS}/{opened['id']}?wait=61").status_code == 400


def test_an_answer_is_read_with_its_scope_and_pattern(api: APIClient, approver: User) -> None:  # U3
    opened = open_request(api).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]),
        user=approver,
        answer=Answer.ALLOW_SESSION,
        pattern="git push:*",
    )

    body = api.get(f"{TOOL_REQUESTS}/{opened['id']}").json()

    assert (body["status"], body["decision"], body["scope"], body["pattern"], body["answered_by"]) == (
        "ANSWERED",
        "ALLOW",
        "SESSION",
        "git push:*",
        "alice",
    )


def test_cancel_denies_the_exact_subject_for_the_session(api: APIClient) -> None:  # S9
    opened = open_request(api).json()

    cancelled = api.post(f"{TOOL_REQUESTS}/{opened['id']}/cancel")

    assert cancelled.status_code == 200
    assert (cancelled.json()["status"], cancelled.json()["decision"], cancelled.json()["scope"]) == (
        "CANCELLED",
        "DENY",
        "SESSION",
    )
    assert cancelled.json()["pattern"] == "git push origin main"
    assert api.post(f"{TOOL_REQUESTS}/{opened['id']}/cancel").status_code == 409
    assert decide(api, arguments=PUSH).json()["decision"] == "DENY"


def test_another_runtime_cannot_cancel(api: APIClient, other_api: APIClient) -> None:
    opened = open_request(api).json()

    assert other_api.post(f"{TOOL_REQUESTS}/{opened['id']}/cancel").status_code == 404
    assert ApprovalRequest.objects.get().status == "PENDING"


@pytest.mark.django_db(transaction=True)
def test_the_long_poll_returns_when_the_approver_answers(
    live_server: Any, runtime_token: str, approver: User, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:  # U2, U3: one long-poll path for both kinds
    settings.REDIS_URL = ""
    monkeypatch.setattr(wakeups, "REPOLL_SECONDS", 30.0)  # only a wake-up returns it before `wait`
    opened = open_request(bearer_client(runtime_token)).json()
    result: dict[str, Any] = {}

    def poll() -> None:
        request = urllib.request.Request(  # noqa: S310 - the live test server
            f"{live_server.url}{TOOL_REQUESTS}/{opened['id']}?wait=20",
            headers={"Authorization": f"Bearer {runtime_token}"},
        )
        with urllib.request.urlopen(request, timeout=40) as response:  # noqa: S310
            result.update(json.load(response))

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    channel = wakeups.channel_for(opened["id"])
    while not wakeups._waiters.get(channel):
        thread.join(0.01)
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]),
        user=approver,
        answer=Answer.ALLOW_SESSION,
        pattern="git push:*",
    )
    thread.join(30)

    assert (result["status"], result["scope"], result["pattern"]) == ("ANSWERED", "SESSION", "git push:*")


# --- POST /tool-decisions with the fields of part U --------------------------------------------------


def test_allow_this_call_answers_the_same_arguments_once(api: APIClient, approver: User) -> None:  # U4
    opened = open_request(api, arguments={"command": "git push origin main", "force": False}).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]), user=approver, answer=Answer.ALLOW_CALL
    )
    assert api.get(f"{TOOL_REQUESTS}/{opened['id']}").json()["scope"] == "CALL"
    reordered = {"force": False, "command": "git push origin main"}

    first = decide(api, arguments=reordered, approval_id=opened["id"])
    second = decide(api, arguments=reordered, approval_id=opened["id"])

    assert first.json() == {
        "decision": "ALLOW",
        "reason": "GRANTED",
        "source": "CALL",
        "side_effect_level": "MUTATING",
        "destructive_behavior": "DESTRUCTIVE",
        "idempotency_behavior": "NON_IDEMPOTENT",
        "registered": True,
    }
    assert second.json() == {
        "decision": "ASK",
        "reason": "DESTRUCTIVE_ALWAYS_ASKS",
        "source": "GATE",
        "side_effect_level": "MUTATING",
        "destructive_behavior": "DESTRUCTIVE",
        "idempotency_behavior": "NON_IDEMPOTENT",
        "registered": True,
        "note": APPROVAL_NOT_USED_NOTE,
    }
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_CALL_APPROVAL_USED).count() == 1


def test_a_session_grant_of_a_pattern_answers_other_calls_of_it(api: APIClient, approver: User) -> None:  # U3
    opened = open_request(api).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]),
        user=approver,
        answer=Answer.ALLOW_SESSION,
        pattern="git push:*",
    )

    assert decide(api, arguments={"command": "git push origin dev"}).json()["source"] == "SESSION"
    assert decide(api, arguments={"command": "rm -rf /"}).json()["decision"] == "ASK"


def test_a_rule_that_decided_is_named(api: APIClient) -> None:  # U1
    rule = ToolRule.objects.create(tool="Bash", pattern="rm:*", action=RuleAction.DENY)
    rules.rule_index_reset()

    body = decide(api, arguments={"command": "rm -rf /"}).json()

    assert (body["decision"], body["reason"], body["source"]) == ("DENY", "DENIED_BY_RULE", "RULE")
    assert body["rule"] == {"id": rule.pk, "pattern": "Bash(rm:*)"}


def test_an_absent_subject_is_said(api: APIClient) -> None:  # U1
    body = decide(api, arguments={"cmd": "ls"}).json()

    assert body["decision"] == "ASK"
    assert body["note"] == (
        "The subject argument 'command' is absent, so only rules for the whole tool apply "
        "(and a deny pattern of the tool denies the call)."
    )


def test_a_pre_approval_answers_an_unattended_call(api: APIClient, runtime: AgentRuntime) -> None:  # U5
    ToolRule.objects.create(
        runtime=runtime, tool="Bash", pattern="git fetch:*", action=RuleAction.ALLOW, unattended=True
    )
    rules.rule_index_reset()

    body = decide(api, session_id=None, arguments={"command": "git fetch"}).json()
    other = decide(api, session_id=None, arguments={"command": "git push"}).json()

    assert (body["decision"], body["reason"], body["source"]) == ("ALLOW", "PRE_APPROVED", "RULE")
    assert (other["decision"], other["reason"]) == ("DENY", "UNATTENDED_NO_CHANNEL")


def test_a_replay_of_a_non_idempotent_tool_asks_again(api: APIClient, approver: User) -> None:  # U6
    opened = open_request(api).json()
    services.request_answer(
        request=ApprovalRequest.objects.get(pk=opened["id"]), user=approver, answer=Answer.ALLOW_CALL
    )

    body = decide(api, arguments=PUSH, approval_id=opened["id"], replay=True).json()

    assert body["decision"] == "ASK"
    assert body["note"] == REPLAY_NOT_IDEMPOTENT_NOTE


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"approval_id": "not-a-uuid"}, "approval_id"),
        ({"replay": "yes"}, "replay"),
        ({"replay": None}, "replay"),
        ({"arguments": []}, "arguments"),
        ({"invoking_session_id": "never-seen"}, "invoking_session_id"),
        ({"turn_id": ""}, "turn_id"),
        ({"principal": 7}, "principal"),
    ],
)
def test_bad_decision_fields_are_400_naming_the_field(api: APIClient, body: dict, field: str) -> None:
    assert list(fields_of(decide(api, **body))) == [field]


def test_a_decision_naming_another_principal_for_a_session_is_409(api: APIClient) -> None:  # S12
    assert decide(api, principal="alice").status_code == 200
    assert decide(api, principal="bob").status_code == 409


def test_nothing_is_granted_through_the_api(api: APIClient) -> None:  # S11
    opened = open_request(api).json()

    for path in (f"{TOOL_REQUESTS}/{opened['id']}", f"{TOOL_REQUESTS}/{opened['id']}/answer"):
        assert api.post(path, {"answer": "ALLOW_SESSION"}, format="json").status_code in (404, 405)
    assert not Grant.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"tool": "Bash", "arguments": {"command": "ls"}},
        {"tool": "Bash", "session_id": "s-1", "invoking_session_id": "s-0", "turn_id": "t", "principal": "a"},
        {"tool": "Bash", "arguments": None},
        {"tool": "Bash", "arguments": {}},
        {"tool": "Bash", "arguments": []},
        {"tool": "Bash", "arguments": {"n": float("inf")}},
        {"tool": "Bash", "arguments": {"t": "a\x00"}},
        {"tool": "Bash", "arguments": {"deep": [[[["x"]]]]}, "server": "git"},
        {"tool": "Bash", "turn_id": ""},
        {"tool": "Bash", "principal": 7},
        {"tool": "Bash", "arguments": {"command": "ls"}, "replay": True},
        {
            "tool": "Bash",
            "arguments": {"command": "ls"},
            "approval_id": "0f9c2a44-2c1e-4c33-9b51-3f1b8f0c9d11",
        },
    ],
)
def test_the_decision_fast_path_agrees_with_the_fields(body: dict) -> None:
    # The common bodies are checked directly (the endpoint runs on every call); each answer,
    # value or error, must be the serializer's own.
    serializer = ToolDecisionIn(data=body)
    if serializer.is_valid():
        assert tool_decision_input(body) == serializer.validated_data
    else:
        with pytest.raises(ValidationError) as raised:
            tool_decision_input(body)
        assert raised.value.detail == serializer.errors
