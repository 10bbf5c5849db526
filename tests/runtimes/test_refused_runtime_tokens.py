"""Every token-authenticated endpoint refuses the token of a disabled or retired runtime: a
401 that says why, and nothing changed.

The endpoints come from the URL configuration (the authorization matrix's walk), so an
endpoint added later is checked without touching this file; each is called with every
method it serves (found by calling it with a live token first, in a rolled-back savepoint),
with a body it would accept. The skill decision's fused read (the token looked up inside
the decision's own prepared statement) is one of them, and has its own test below.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from rest_framework.test import APIClient

from aimon_admin.runtimes.authentication import (
    INVALID_TOKEN_MESSAGE,
    RUNTIME_DISABLED_MESSAGE,
    RUNTIME_RETIRED_MESSAGE,
)
from aimon_admin.runtimes.services import runtime_disable, runtime_enable, runtime_retire, token_issue
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import bearer_client
from tests.security.test_authorization_matrix import ROUTES, World, fingerprint, path_of
from tests.security.test_authorization_matrix import world as matrix_world

world = matrix_world

API_ROUTES = [route for route in ROUTES if (route.name or "").startswith("api:")]
METHODS = ("get", "post", "put", "patch", "delete")
# A body each endpoint would accept from a live token, so a refusal is never the body's.
BODIES: dict[str, dict[str, Any]] = {
    "api:skill-decisions": {"skills": ["deploy"], "session_id": "s-alice", "principal": "alice"},
    "api:approval-requests": {"skills": ["deploy"], "session_id": "s-alice", "principal": "alice"},
    "api:tool-decisions": {"tool": "grep"},
    "api:tools": {"tools": [{"name": "grep", "description": "search"}]},
    "api:mcp-server-tools": {"tools": [{"name": "ls", "description": "list"}]},
}
CHALLENGE = 'Bearer realm="aimon"'

pytestmark = pytest.mark.django_db


def call(client: APIClient, method: str, path: str, key: str) -> Any:
    if method in ("get", "delete"):
        return getattr(client, method)(path)
    return getattr(client, method)(path, BODIES.get(key, {}), format="json")


def served_methods(key: str, path: str, token: str) -> list[str]:
    """The methods the endpoint answers a live token with something other than 405."""
    served = []
    client = bearer_client(token)
    for method in METHODS:
        with transaction.atomic():
            status = call(client, method, path, key).status_code
            transaction.set_rollback(True)
        assert status != 401, f"{method.upper()} {path}: the live token was refused"
        if status != 405:
            served.append(method)
    return served


def test_the_walk_finds_the_endpoints() -> None:
    keys = {route.name for route in API_ROUTES}
    assert {"api:skill-decisions", "api:approval-request-detail", "api:tools", "api:runtime-self"} <= keys
    assert len(API_ROUTES) >= 11


@pytest.mark.parametrize("state", ["disabled", "retired"])
@pytest.mark.parametrize("key", [route.name for route in API_ROUTES])
def test_every_endpoint_refuses_a_disabled_or_retired_runtimes_token(
    key: str, state: str, world: World
) -> None:
    route = next(route for route in API_ROUTES if route.name == key)
    path = path_of(route, world)
    token = world.tokens["token"]
    methods = served_methods(key, path, token)
    assert methods, f"{path} serves no method to a live token"

    if state == "disabled":
        runtime_disable(runtime=world.runtime, actor=TEST_ACTOR)
        message = RUNTIME_DISABLED_MESSAGE
    else:
        runtime_retire(runtime=world.runtime, actor=TEST_ACTOR)
        message = RUNTIME_RETIRED_MESSAGE
    client = bearer_client(token)
    for method in methods:
        before = fingerprint()
        response = call(client, method, path, key)
        assert (response.status_code, response.json()) == (
            401,
            {"error": "not_authenticated", "detail": message},
        ), f"{method.upper()} {path}"
        assert response["WWW-Authenticate"] == CHALLENGE
        assert fingerprint() == before, f"a refused {method.upper()} {path} changed something"


def test_the_fused_decision_says_the_runtime_is_disabled_then_decides_once_enabled(world: World) -> None:
    # The hot path: the token is looked up inside the decision's own prepared statement.
    client = bearer_client(world.tokens["token"])
    body = BODIES["api:skill-decisions"]
    assert client.post("/api/v1/skill-decisions", body, format="json").status_code == 200

    runtime_disable(runtime=world.runtime, actor=TEST_ACTOR)
    refused = client.post("/api/v1/skill-decisions", body, format="json")
    assert (refused.status_code, refused.json()["detail"]) == (401, RUNTIME_DISABLED_MESSAGE)
    # The other runtime's token is untouched.
    other = bearer_client(world.tokens["other_token"]).post("/api/v1/skill-decisions", body, format="json")
    assert other.status_code == 200

    runtime_enable(runtime=world.runtime, actor=TEST_ACTOR)
    assert client.post("/api/v1/skill-decisions", body, format="json").status_code == 200


def test_a_token_issued_while_disabled_waits_for_the_enable(world: World) -> None:
    runtime_disable(runtime=world.runtime, actor=TEST_ACTOR)
    _, raw = token_issue(runtime=world.runtime, actor=TEST_ACTOR, label="spare")
    response = bearer_client(raw).get("/api/v1/runtime")
    assert (response.status_code, response.json()["detail"]) == (401, RUNTIME_DISABLED_MESSAGE)
    runtime_enable(runtime=world.runtime, actor=TEST_ACTOR)
    assert bearer_client(raw).get("/api/v1/runtime").status_code == 200


def test_a_revoked_or_unknown_token_keeps_the_usual_words(world: World) -> None:
    # Only a token that would otherwise work learns about its runtime.
    runtime_disable(runtime=world.runtime, actor=TEST_ACTOR)
    for raw in (world.tokens["revoked_token"], "aimon_" + "x" * 43):
        response = bearer_client(raw).get("/api/v1/runtime")
        assert (response.status_code, response.json()["detail"]) == (401, INVALID_TOKEN_MESSAGE)
