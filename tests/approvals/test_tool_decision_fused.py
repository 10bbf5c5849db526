"""`POST /api/v1/tool-decisions` looks its token up in the decision's own read, as the skill
decision does: authentication answers exactly as on every endpoint (an unauthenticated caller
never learns what was wrong with a body), and the answers are those of the token looked up
first (U1-U7; docs/api.md)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules, services
from aimon_admin.approvals.choices import Answer, RequestKind, RuleAction
from aimon_admin.approvals.models import ToolRule
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace, mcp_server_create, mcp_tools_record
from aimon_admin.runtimes.authentication import RUNTIME_DISABLED_MESSAGE
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.services import runtime_disable, token_revoke
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

PATH = "/api/v1/tool-decisions"
UNKNOWN = "aimon_not-a-real-token-at-all-000000000000"


@pytest.fixture(autouse=True)
def world(runtime: AgentRuntime, approver: User) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[{"name": "Bash"}, {"name": "Read", "side_effect_level": "READ_ONLY"}],
        actor=TEST_ACTOR,
    )
    server = mcp_server_create(name="git", transport="STDIO", command="git-mcp", actor=TEST_ACTOR)
    mcp_tools_record(server=server, listing=[{"name": "git_push"}], actor=TEST_ACTOR, complete=True)
    ToolSubject.objects.create(server="", tool="Bash", argument="command")
    ToolRule.objects.create(tool="Bash", pattern="rm:*", action=RuleAction.DENY)
    ToolRule.objects.create(
        runtime=runtime, tool="Bash", pattern="git fetch:*", action=RuleAction.ALLOW, unattended=True
    )
    rules.rule_index_reset()
    request, _ = services.request_create(
        services.RequestInput(
            runtime=runtime,
            skills=[],
            kind=RequestKind.TOOL,
            tool="Bash",
            arguments={"command": "git push origin main"},
            session_id="s-1",
            principal="alice",
        )
    )
    services.request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION, pattern="git push:*")


def client(token: str | None = None, header: str | None = None) -> APIClient:
    api = APIClient()
    if header is not None:
        api.credentials(HTTP_AUTHORIZATION=header)
    elif token is not None:
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


CALLS: list[dict[str, Any]] = [
    {"tool": "Bash", "session_id": "s-1", "arguments": {"command": "git push origin dev"}},
    {"tool": "Bash", "session_id": "s-1", "arguments": {"command": "rm -rf /"}},
    {"tool": "Bash", "session_id": "s-2", "arguments": {"command": "git push origin dev"}},
    {"tool": "Bash", "invoking_session_id": "s-1", "arguments": {"command": "git push x"}},
    {"tool": "Bash", "arguments": {"command": "git fetch origin"}},
    {"tool": "Bash", "arguments": {"cmd": "ls"}},
    {"tool": "Read"},
    {"tool": "git_push", "server": "git", "session_id": "s-1"},
    {"tool": "nobody", "session_id": "s-3", "principal": "bob"},
]


@pytest.mark.parametrize("call", CALLS, ids=range(len(CALLS)))
def test_the_fused_read_answers_as_the_token_looked_up_first(
    runtime: AgentRuntime, runtime_token: str, call: dict[str, Any]
) -> None:  # U: one path, two reads
    first = services.tool_call_decide(runtime, services.ToolCall(**call))
    fused = services.decide_for_token(runtime_token, services.ToolCall(**call), services.tool_call_decide)

    assert fused is not None
    token, decided = fused
    assert token.runtime.pk == runtime.pk
    assert (decided.verdict, decided.axes, decided.registered, decided.notes) == (
        first.verdict,
        first.axes,
        first.registered,
        first.notes,
    )


def test_no_token_no_decision(runtime: AgentRuntime, runtime_token: str) -> None:
    bash, decide = services.ToolCall(tool="Bash"), services.tool_call_decide
    assert services.decide_for_token(UNKNOWN, bash, decide) is None
    assert services.decide_for_token("x", bash, decide) is None
    token_revoke(token=RuntimeToken.objects.get(runtime=runtime), actor=TEST_ACTOR)
    assert services.decide_for_token(runtime_token, bash, decide) is None


@pytest.mark.parametrize(
    "body", [{"tool": "Bash"}, {"tool": ""}, {"nope": 1}, {"tool": "Bash", "arguments": []}], ids=str
)
def test_without_a_valid_token_every_body_is_a_401(body: dict[str, Any]) -> None:
    for api in (client(), client(UNKNOWN), client(header="Bearer")):
        response = api.post(PATH, body, format="json")
        assert response.status_code == 401, (body, response.content)
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_disabled_runtimes_token_is_told_why(runtime: AgentRuntime, runtime_token: str) -> None:
    runtime_disable(runtime=runtime, actor=TEST_ACTOR)

    response = client(runtime_token).post(PATH, {"tool": "Bash"}, format="json")

    assert response.status_code == 401
    assert response.json()["detail"] == RUNTIME_DISABLED_MESSAGE


def test_with_a_valid_token_a_bad_body_is_a_400(runtime_token: str) -> None:
    response = client(runtime_token).post(PATH, {"tool": "Bash", "arguments": []}, format="json")

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["arguments"]


def test_a_conflict_and_an_unknown_invoking_session_are_answered_after_the_token(runtime_token: str) -> None:
    api = client(runtime_token)
    assert (
        api.post(PATH, {"tool": "Bash", "session_id": "s-1", "principal": "bob"}, format="json").status_code
        == 409
    )
    unknown = api.post(PATH, {"tool": "Bash", "invoking_session_id": "never"}, format="json")
    assert (unknown.status_code, list(unknown.json()["fields"])) == (400, ["invoking_session_id"])
