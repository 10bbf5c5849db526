"""The tool decision as an OpenID AuthZEN Authorization API 1.0 policy decision point
(docs/api.md "AuthZEN"; U1-U7), driven by the independent client of `authzen_client`:
discovery, one evaluation (ALLOW, ASK, DENY), the same decision as POST /api/v1/tool-decisions,
and the HTTPS binding (request ids, JSON errors, the body limit, no page policy)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.approvals import services
from aimon_admin.approvals.choices import Answer, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, Session
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.authzen_client import (  # noqa: F401 - fixtures
    HOST,
    PUSH,
    REQUEST_ID,
    WELL_KNOWN,
    Pep,
    pep_fixture,
    request,
    rule,
    tool,
    tools_fixture,
)
from tests.core.test_asgi import drive

pytestmark = pytest.mark.django_db


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
    # U1, fail closed: Bash has a deny pattern (rm:*) and this call names no command.
    ("subject absent", {"tool": "Bash", "session_id": "s-1", "arguments": {"cmd": "ls"}}, "DENY"),
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
