"""An independent AuthZEN 1.0 client for the tests of the AuthZEN endpoints (docs/api.md "AuthZEN").

`Pep` is a policy enforcement point written from the specification's text alone: it finds the
endpoints in the discovery document (checking the identifier as the specification says),
sends JSON bodies built as plain dicts in the shapes of the specification's examples, and
checks every answer against the specification's response shapes and HTTPS binding (200 and
application/json, a Decision object, X-Request-ID echoed). Nothing of the server's own
serializers is used: what the server promises is checked from the outside.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.http import HttpResponse
from django.test import Client

from aimon_admin.approvals import rules
from aimon_admin.approvals.models import ToolRule
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR

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


# Fixtures for the test modules, which import them (under other names than they are used by).


@pytest.fixture(name="tools", autouse=True)
def tools_fixture(runtime: AgentRuntime) -> None:
    """The runtime's own tools: Bash (destructive, its subject argument `command`), Read
    (read-only) and Edit (writes, not destructive)."""
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


@pytest.fixture(name="pep")
def pep_fixture(runtime_token: str) -> Pep:
    """The client, with the runtime's token, having read the discovery document."""
    client = Pep(runtime_token)
    client.discover()
    return client


def rule(text_tool: str, pattern: str, action: str, **extra: Any) -> ToolRule:
    made = ToolRule.objects.create(tool=text_tool, pattern=pattern, action=action, **extra)
    rules.rule_index_reset()
    return made
