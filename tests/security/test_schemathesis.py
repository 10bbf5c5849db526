"""Schemathesis against the served OpenAPI schema, in-process.

Every operation of /api/schema/ gets at least 100 generated requests from an authenticated
runtime, then the stateful phase chains operations through the links Schemathesis infers
(create an approval request, then read or cancel it). Each response must not be a server
error, must conform to its documented schema, status code and content type. Bad input is
a 4xx naming the field, never a 500 (house rule, S1/S11 bodies included).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.test import override_settings
from hypothesis import HealthCheck
from hypothesis.stateful import initialize, precondition, rule
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.generation.stateful.state_machine import StepInput
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.registry.services import mcp_server_create
from aimon_admin.wsgi import application
from tests.conftest import TEST_ACTOR
from tests.fuzzing import budget

pytestmark = pytest.mark.django_db

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]
EXAMPLES_PER_OPERATION = 100
STATEFUL_SCENARIOS = 60
# Each example is an HTTP call: no shrinking pass over a failure the run has already reported.
# (No deadline: a slow example on a busy machine is not a failure; the count bounds the run.)
SETTINGS = budget(
    EXAMPLES_PER_OPERATION, *HealthCheck, phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate]
)
OPEN = "/api/v1/approval-requests"
LONG_POLL = "/api/v1/approval-requests/{request_id}"
OPEN_TOOL = "/api/v1/tool-approval-requests"
RELAY = "/api/v1/mcp-servers/{name}/tools"
TOOL_LONG_POLL = "/api/v1/tool-approval-requests/{request_id}"


# Schemathesis' WSGI client sends Host: localhost.
WSGI_HOST = "localhost"


# OpenAPI links for the stateful phase: what a runtime does with a request it opened (read it,
# cancel it) and with the session it named (clear, revoke). Schemathesis infers only the
# mcp-servers -> tools link by itself.
_REQUEST_LINKS = {
    "ReadTheRequest": {
        "operationId": "v1_approval_requests_retrieve",
        "parameters": {"request_id": "$response.body#/id"},
    },
    "CancelTheRequest": {
        "operationId": "v1_approval_requests_cancel_create",
        "parameters": {"request_id": "$response.body#/id"},
    },
    "ClearItsSession": {
        "operationId": "v1_sessions_clear_create",
        "parameters": {"session_id": "$request.body#/session_id"},
    },
    "RevokeItsSession": {
        "operationId": "v1_sessions_revoke_create",
        "parameters": {"session_id": "$request.body#/session_id"},
    },
}
_READ_LINKS = {
    "CancelTheRequest": _REQUEST_LINKS["CancelTheRequest"],
    "ReadItAgain": {
        "operationId": "v1_approval_requests_retrieve",
        "parameters": {"request_id": "$response.body#/id"},
    },
}


# The same for a tool approval request (U2): read it, cancel it, clear or revoke its session.
_TOOL_REQUEST_LINKS = {
    "ReadTheToolRequest": {
        "operationId": "v1_tool_approval_requests_retrieve",
        "parameters": {"request_id": "$response.body#/id"},
    },
    "CancelTheToolRequest": {
        "operationId": "v1_tool_approval_requests_cancel_create",
        "parameters": {"request_id": "$response.body#/id"},
    },
    "ClearItsSession": _REQUEST_LINKS["ClearItsSession"],
    "RevokeItsSession": _REQUEST_LINKS["RevokeItsSession"],
}
_TOOL_READ_LINKS = {
    "CancelTheToolRequest": _TOOL_REQUEST_LINKS["CancelTheToolRequest"],
    "ReadItAgain": _TOOL_REQUEST_LINKS["ReadTheToolRequest"],
}


def _served_schema() -> Any:
    """The schema exactly as served at /api/schema/ plus the links above, called through WSGI.

    Loaded at import (pytest parametrizes per operation at collection); the schema view
    reads no database.
    """
    with override_settings(ALLOWED_HOSTS=[*django_settings.ALLOWED_HOSTS, WSGI_HOST]):
        served = schemathesis.openapi.from_wsgi("/api/schema/", application).raw_schema
    raw = copy.deepcopy(served)
    paths = raw["paths"]
    for status in ("200", "201"):
        paths["/api/v1/approval-requests"]["post"]["responses"][status]["links"] = _REQUEST_LINKS
    paths["/api/v1/approval-requests/{request_id}"]["get"]["responses"]["200"]["links"] = _READ_LINKS
    paths["/api/v1/approval-requests/{request_id}/cancel"]["post"]["responses"]["200"]["links"] = {
        "ReadTheCancelled": _READ_LINKS["ReadItAgain"]
    }
    for status in ("200", "201"):
        paths[OPEN_TOOL]["post"]["responses"][status]["links"] = _TOOL_REQUEST_LINKS
    paths[TOOL_LONG_POLL]["get"]["responses"]["200"]["links"] = _TOOL_READ_LINKS
    paths[f"{TOOL_LONG_POLL}/cancel"]["post"]["responses"]["200"]["links"] = {
        "ReadTheCancelled": _TOOL_READ_LINKS["ReadItAgain"]
    }
    linked = schemathesis.openapi.from_dict(raw)
    linked.app = application
    linked.location = "/api/schema/"
    # Sequences are built from valid requests (a negative step drops the token or breaks
    # the body, and the chain stops there); hostile input per operation is the other test's.
    linked.config.phases.stateful.generation.modes = [GenerationMode.POSITIVE]
    return linked


schema = _served_schema()


@pytest.fixture(autouse=True)
def _wsgi_host(settings: Any) -> None:
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, WSGI_HOST]


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    """Schemathesis calls the WSGI app directly, whose request signals would close the test's
    connection mid-transaction (on PostgreSQL); Django's own test client unhooks them too."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def _mcp_server(db: None) -> None:
    """A server GET /mcp-servers lists, so the stateful link relays tools to a real one."""
    mcp_server_create(
        name="fuzz-target",
        transport=McpTransport.STREAMABLE_HTTP,
        url="http://127.0.0.1:9/mcp",
        annotation_trust=AnnotationTrust.TRUST,
        actor=TEST_ACTOR,
    )


@pytest.fixture
def auth(runtime_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {runtime_token}"}


def _bounded(case: Any) -> None:
    # ?wait=N holds a long-poll open for up to 60 s on a pending request; the waiting itself is
    # tested in tests/approvals. Here every generated wait is sent as 0 so the run stays bounded.
    if case.operation.path in (LONG_POLL, TOOL_LONG_POLL) and case.query and "wait" in case.query:
        case.query["wait"] = 0


def test_the_authzen_endpoints_are_fuzzed_too() -> None:
    # The run covers every operation of the served schema, so these must be in it.
    paths = schema.raw_schema["paths"]
    fuzzed = {(method.upper(), path) for path, item in paths.items() for method in item}
    assert {
        ("POST", "/access/v1/evaluation"),
        ("POST", "/access/v1/evaluations"),
        ("GET", "/.well-known/authzen-configuration"),
    } <= fuzzed


@schema.parametrize()
@SETTINGS
def test_every_operation_answers_generated_input_within_its_schema(case: Any, auth: dict[str, str]) -> None:
    _bounded(case)
    case.call_and_validate(headers=auth, checks=CHECKS)


@pytest.mark.hypothesis  # a state machine: `make fuzz` (-m hypothesis) runs it too
def test_stateful_sequences_keep_to_the_schema(auth: dict[str, str]) -> None:
    answered: Counter[tuple[str, int]] = Counter()

    workflow = schema.as_state_machine()
    opened = workflow.bundles["POST /api/v1/approval-requests -> 201"]
    opened_tool = workflow.bundles["POST /api/v1/tool-approval-requests -> 201"]

    known_skill_request = hypothesis.strategies.builds(
        lambda n: schema[OPEN]["POST"].Case(
            body={"skills": ["deploy", "notify"], "session_id": f"s-{n}", "reason": "ship"},
            media_type="application/json",
        ),
        hypothesis.strategies.integers(min_value=0, max_value=10**6),
    )
    known_tool_request = hypothesis.strategies.builds(  # U2: a call in a session asks
        lambda n: schema[OPEN_TOOL]["POST"].Case(
            body={"tool": "Bash", "session_id": f"s-{n}", "arguments": {"command": f"git push origin r{n}"}},
            media_type="application/json",
        ),
        hypothesis.strategies.integers(min_value=0, max_value=10**6),
    )

    known_relay = hypothesis.strategies.builds(  # T15: a runtime hands over a listing
        lambda n: schema[RELAY]["POST"].Case(
            path_parameters={"name": "fuzz-target"},
            body={"tools": [{"name": f"tool-{n}", "description": "lists", "inputSchema": {}}]},
            media_type="application/json",
        ),
        hypothesis.strategies.integers(min_value=0, max_value=10**6),
    )

    class Machine(workflow):  # type: ignore[misc, valid-type]
        # Schemathesis takes only GET /mcp-servers as an entry point (it guesses session_id
        # names a resource nothing produces); opening a request is where a runtime starts.
        # Generated bodies mostly break rules the schema cannot state (control characters,
        # unknown fields), so every scenario first opens one known-good request of each kind
        # and relays one known-good listing: the links from them are there to follow, and each
        # endpoint answers a valid call at least once, whatever the draw. Generated bodies may
        # open two more requests a scenario, so the remaining steps go to the links.
        @initialize(target=opened, case=known_skill_request)
        def open_a_known_approval_request(self, case: Any) -> Any:
            return self._open(case)

        @initialize(target=opened_tool, case=known_tool_request)
        def open_a_known_tool_approval_request(self, case: Any) -> Any:
            return self._open(case)

        @initialize(case=known_relay)
        def relay_a_known_listing(self, case: Any) -> None:
            self._open(case)

        @precondition(lambda self: self._opened < 2)
        @rule(target=opened, case=schema[OPEN]["POST"].as_strategy())
        def open_an_approval_request(self, case: Any) -> Any:
            self._opened += 1
            return self._open(case)

        @precondition(lambda self: self._opened < 2)
        @rule(target=opened_tool, case=schema[OPEN_TOOL]["POST"].as_strategy())
        def open_a_tool_approval_request(self, case: Any) -> Any:
            self._opened += 1
            return self._open(case)

        def _open(self, case: Any) -> Any:
            step = StepInput.initial(case)
            self.recorder.record_case(case=case)  # what the generated rules do before a step
            self.control.record_step(step, self.recorder)
            return self._step(step)

        # Each scenario starts from the same database: what one scenario wrote (an
        # idempotent replay answering 200 instead of 201) would make the next one draw
        # differently, which Hypothesis reports as a flaky strategy.
        def setup(self) -> None:
            self._opened = 0
            self._scenario = transaction.atomic()
            self._scenario.__enter__()

        def teardown(self) -> None:
            transaction.set_rollback(True)
            self._scenario.__exit__(None, None, None)

        def before_call(self, case: Any) -> None:
            _bounded(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": auth}

        def after_call(self, response: Any, case: Any) -> None:
            super().after_call(response, case)
            answered[(f"{case.method} {case.operation.path}", response.status_code)] += 1

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, headers=auth)

    Machine.run(
        settings=budget(
            STATEFUL_SCENARIOS,
            *HealthCheck,
            stateful_step_count=6,
            # The same scenarios under `make fuzz` too: a random draw can miss every valid
            # request body (the server checks more than the schema says), and then no link
            # is followed.
            derandomize=True,
            database=None,
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        )
    )

    # The links were followed: a request opened in a scenario was read back and cancelled.
    assert answered[("GET /api/v1/approval-requests/{request_id}", 200)] > 0, answered
    assert answered[("POST /api/v1/approval-requests/{request_id}/cancel", 200)] > 0, answered
    assert answered[(f"POST {RELAY}", 200)] > 0, answered
    assert answered[(f"GET {TOOL_LONG_POLL}", 200)] > 0, answered
    assert answered[(f"POST {TOOL_LONG_POLL}/cancel", 200)] > 0, answered
