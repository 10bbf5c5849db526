"""Every operation of the OpenAPI schema describes what its view really takes and returns
(`POST /api/v1/skill-decisions` was once documented with the tool decision's summary, body
and answer).

The test walks every operation of the served schema (/api/schema/) and asks the running
view, not a list kept beside it:

* **request**: for each object of the body, a member given twice is refused by name; the
  view's strict serializer names the fields it accepts when sent one it does not know
  (`Unknown field. Allowed fields: …`; the empty key named `""`, quoted, in `fields` and in
  the detail) and the fields it requires when sent none; both must be exactly the documented
  properties and `required`.
  An object whose serializer ignores unknown fields (an MCP server's own `tools/list` item)
  must accept every documented property. An operation documented without a body must refuse
  any field. A call that sets every documented property must validate against the documented
  schema and be accepted.
* **response**: the body the view answers that call with must validate against the documented
  schema of its status code, closed: no property the schema does not list, every required one
  present, each of its type (OpenAPI's `nullable` read as JSON Schema's null).

`CALLS` holds one real call per operation (a schema operation without one fails the test, so
a new endpoint gets its row). The last test feeds the checker a schema whose skill decision
has the tool decision's body or answer, as before the fix, and expects it to say so.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest
from django.test import Client
from rest_framework.test import APIClient

from aimon_admin.approvals import rules
from aimon_admin.core.api import REQUIRED_MESSAGE, UNKNOWN_FIELD_MESSAGE
from aimon_admin.core.parsers import DUPLICATE_KEY_MESSAGE, member_name
from aimon_admin.registry.services import mcp_server_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

PROBE = "zz_not_a_field"
_ALLOWED = re.compile(re.escape(UNKNOWN_FIELD_MESSAGE).replace(r"\{allowed\}", "(.*)"))


@pytest.fixture(autouse=True)
def _fresh_rule_index() -> Iterator[None]:
    rules.rule_index_reset()
    yield
    rules.rule_index_reset()


@pytest.fixture(scope="module")
def served_schema(django_db_blocker: Any) -> dict[str, Any]:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


# --- One real call per operation ------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    url: str
    body: Any  # None: no body sent
    status: int


def _open_request(api: APIClient) -> str:
    response = api.post(
        "/api/v1/approval-requests", {"skills": ["deploy"], "session_id": "s-1"}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


TOOL_CALL = {
    "tool": "bash",
    "server": None,
    "session_id": "s-1",
    "invoking_session_id": None,
    "turn_id": "t-1",
    "principal": None,
    "arguments": {"command": "git push origin main"},
}


def _open_tool_request(api: APIClient) -> str:
    response = api.post("/api/v1/tool-approval-requests", TOOL_CALL, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _local_tools(api: APIClient) -> None:
    response = api.put("/api/v1/tools", {"tools": [{"name": "bash"}]}, format="json")
    assert response.status_code == 200, response.content


def _server() -> None:
    mcp_server_create(name="files", transport="STDIO", command="npx", args=["files-mcp"], actor=TEST_ACTOR)


DECISION = {
    "skills": ["deploy", "notify"],
    "session_id": "s-1",
    "invoking_session_id": None,
    "turn_id": "t-1",
    "principal": None,
}

# An AuthZEN evaluation of the same call, every member set (docs/api.md "AuthZEN").
AUTHZEN_EVALUATION = {
    "subject": {"type": "user", "id": "alice"},
    "resource": {
        "type": "tool",
        "id": "bash",
        "properties": {"server": None, "arguments": {"command": "git push origin main"}},
    },
    "action": {"name": "call"},
    "context": {
        "session_id": "s-1",
        "invoking_session_id": None,
        "turn_id": "t-1",
        "approval_id": "0f9c2a44-2c1e-4c33-9b51-3f1b8f0c9d11",
        "replay": False,
    },
}

CALLS: dict[tuple[str, str], Callable[[APIClient], Call]] = {
    ("get", "/api/v1/runtime"): lambda api: Call("/api/v1/runtime", None, 200),
    ("post", "/api/v1/skill-decisions"): lambda api: Call("/api/v1/skill-decisions", DECISION, 200),
    ("post", "/api/v1/approval-requests"): lambda api: Call(
        "/api/v1/approval-requests", {**DECISION, "reason": "ship it", "timeout_seconds": 60}, 201
    ),
    ("get", "/api/v1/approval-requests/{request_id}"): lambda api: Call(
        f"/api/v1/approval-requests/{_open_request(api)}?wait=0", None, 200
    ),
    ("post", "/api/v1/approval-requests/{request_id}/cancel"): lambda api: Call(
        f"/api/v1/approval-requests/{_open_request(api)}/cancel", {}, 200
    ),
    ("post", "/api/v1/sessions/{session_id}/clear"): lambda api: Call("/api/v1/sessions/s-1/clear", {}, 200),
    ("post", "/api/v1/sessions/{session_id}/revoke"): lambda api: Call(
        "/api/v1/sessions/s-1/revoke", {"agent": True}, 200
    ),
    ("get", "/api/v1/tools"): lambda api: (_local_tools(api), Call("/api/v1/tools", None, 200))[1],
    ("put", "/api/v1/tools"): lambda api: Call(
        "/api/v1/tools",
        {
            "tools": [
                {
                    "name": "bash",
                    "description": "Runs a shell command.",
                    "input_schema": {"type": "object"},
                    "side_effect_level": "MUTATING",
                    "destructive_behavior": None,
                    "idempotency_behavior": "NON_IDEMPOTENT",
                }
            ]
        },
        200,
    ),
    ("post", "/api/v1/tool-decisions"): lambda api: (
        _local_tools(api),
        Call(
            "/api/v1/tool-decisions",
            {**TOOL_CALL, "replay": False, "approval_id": "0f9c2a44-2c1e-4c33-9b51-3f1b8f0c9d11"},
            200,
        ),
    )[1],
    ("post", "/api/v1/tool-approval-requests"): lambda api: Call(
        "/api/v1/tool-approval-requests", {**TOOL_CALL, "reason": "ship it", "timeout_seconds": 60}, 201
    ),
    ("get", "/api/v1/tool-approval-requests/{request_id}"): lambda api: Call(
        f"/api/v1/tool-approval-requests/{_open_tool_request(api)}?wait=0", None, 200
    ),
    ("post", "/api/v1/tool-approval-requests/{request_id}/cancel"): lambda api: Call(
        f"/api/v1/tool-approval-requests/{_open_tool_request(api)}/cancel", {}, 200
    ),
    ("post", "/access/v1/evaluation"): lambda api: (
        _local_tools(api),
        Call("/access/v1/evaluation", AUTHZEN_EVALUATION, 200),
    )[1],
    ("post", "/access/v1/evaluations"): lambda api: (
        _local_tools(api),
        Call(
            "/access/v1/evaluations",
            {
                **AUTHZEN_EVALUATION,
                "options": {"evaluations_semantic": "execute_all"},
                "evaluations": [AUTHZEN_EVALUATION],
            },
            200,
        ),
    )[1],
    ("get", "/.well-known/authzen-configuration"): lambda api: Call(
        "/.well-known/authzen-configuration", None, 200
    ),
    ("get", "/api/v1/mcp-servers"): lambda api: (_server(), Call("/api/v1/mcp-servers", None, 200))[1],
    ("post", "/api/v1/mcp-servers/{name}/tools"): lambda api: (
        _server(),
        Call(
            "/api/v1/mcp-servers/files/tools",
            {
                "tools": [
                    {
                        "name": "read_file",
                        "description": "Reads a file.",
                        "inputSchema": {"type": "object"},
                        "annotations": {"readOnlyHint": True},
                    }
                ]
            },
            200,
        ),
    )[1],
}


# --- OpenAPI 3.0 schemas as JSON Schema -----------------------------------------------------------

_SUBSCHEMA = ("items", "additionalProperties", "not")
_SUBSCHEMA_LISTS = ("allOf", "oneOf", "anyOf")
_OPENAPI_ONLY = ("nullable", "readOnly", "writeOnly", "example", "discriminator", "externalDocs")


def json_schema(node: Any, components: dict[str, Any], *, closed: bool) -> Any:
    """`node` with every $ref resolved and `nullable` as a null alternative; `closed` also
    refuses properties an object schema does not list."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return json_schema(components[node["$ref"].rsplit("/", 1)[1]], components, closed=closed)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _OPENAPI_ONLY:
            continue
        if key == "properties":
            out[key] = {name: json_schema(sub, components, closed=closed) for name, sub in value.items()}
        elif key in _SUBSCHEMA and isinstance(value, dict):
            out[key] = json_schema(value, components, closed=closed)
        elif key in _SUBSCHEMA_LISTS:
            out[key] = [json_schema(sub, components, closed=closed) for sub in value]
        else:
            out[key] = value
    if closed and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def _object_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The object-with-properties form of `schema` (a nullable one's non-null branch)."""
    if "properties" in schema:
        return schema
    for key in _SUBSCHEMA_LISTS:
        for branch in schema.get(key, ()):
            found = _object_schema(branch)
            if found is not None:
                return found
    return None


def _objects(body: Any, schema: dict[str, Any], path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple, dict]]:
    """(path in the body, its documented object schema) for each object of `body` the schema
    describes field by field (free-form JSON, such as an input schema, is not walked)."""
    if isinstance(body, list):
        items = schema.get("items")
        if isinstance(items, dict) and body:
            yield from _objects(body[0], items, (*path, 0))
        return
    described = _object_schema(schema)
    if not isinstance(body, dict) or described is None:
        return
    yield path, described
    for name, value in body.items():
        if name in described["properties"]:
            yield from _objects(value, described["properties"][name], (*path, name))


def _at(body: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        body = body[step]
    return body


def _replaced(body: Any, path: tuple[Any, ...], make: Callable[[dict], dict]) -> Any:
    body = copy.deepcopy(body)
    if not path:
        return make(body)
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = make(target[path[-1]])
    return body


def _doubled(body: Any, path: tuple[Any, ...], key: str) -> str:
    """`body` as JSON text whose object at `path` names `key` a second time, same value."""
    mark = "zz_doubled_mark"
    text = json.dumps(_replaced(body, path, lambda o: {**o, mark: 0}))
    return text.replace(f'"{mark}": 0', f"{json.dumps(key)}: {json.dumps(_at(body, path)[key])}")


def _messages(answer: Any) -> list[tuple[str, str]]:
    fields = answer.get("fields", {}) if isinstance(answer, dict) else {}
    return [(key, message) for key, messages in fields.items() for message in messages]


# --- The check ---------------------------------------------------------------------------------------


def _send(api: APIClient, method: str, url: str, body: Any) -> Any:
    if body is None:
        return getattr(api, method)(url)
    return getattr(api, method)(url, body, format="json")


def operation_problems(schema: dict[str, Any], method: str, path: str, api: APIClient) -> list[str]:
    """What the documented operation says that its view does not do."""
    components = schema["components"]["schemas"]
    operation = schema["paths"][path][method]
    call = CALLS[(method, path)](api)
    problems: list[str] = []

    documented = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if documented is not None:
        open_schema = json_schema(documented, components, closed=False)
        try:
            jsonschema.validate(call.body, open_schema)
        except jsonschema.ValidationError as exc:
            problems.append(f"request: the call's body does not fit the documented body: {exc.message}")
        for where, object_schema in _objects(call.body, open_schema):
            properties, required = set(object_schema["properties"]), set(object_schema.get("required", ()))
            given = set(_at(call.body, where))
            if given != properties:
                problems.append(
                    f"request{list(where)}: the call sets {sorted(given)}, not all of {sorted(properties)}"
                )
            probed = _send(api, method, call.url, _replaced(call.body, where, lambda o: {**o, PROBE: 1}))
            allowed = [m for _, m in _messages(probed.json()) if _ALLOWED.fullmatch(m)]
            if allowed:
                names = _ALLOWED.fullmatch(allowed[0]).group(1)  # type: ignore[union-attr]
                accepted = set() if names == "none" else set(names.split(", "))
                if accepted != properties:
                    problems.append(
                        f"request{list(where)}: documented {sorted(properties)}, "
                        f"the view accepts {sorted(accepted)}"
                    )
            elif probed.status_code >= 400:
                problems.append(f"request{list(where)}: an unknown field got {probed.status_code}, not named")
            if allowed:
                # The empty key names nothing as it stands: it is refused as `""`, quoted.
                blank = _send(api, method, call.url, _replaced(call.body, where, lambda o: {**o, "": 1}))
                named = [key for key, m in _messages(blank.json()) if _ALLOWED.fullmatch(m)]
                if not (named and named[0].endswith('""') and blank.json()["detail"].endswith('"".')):
                    problems.append(f"request{list(where)}: the empty key was not named: {blank.content!r}")
            first = next(iter(_at(call.body, where)), None)
            if first is not None:
                # Duplicate keys are refused by name, wherever they stand: a reader keeping the
                # first and one keeping the last would disagree.
                doubled = api.generic(
                    method.upper(),
                    call.url,
                    _doubled(call.body, where, first),
                    content_type="application/json",
                )
                if (member_name(first), DUPLICATE_KEY_MESSAGE) not in _messages(doubled.json()):
                    problems.append(
                        f"request{list(where)}: {first!r} given twice was not refused by name: "
                        f"{doubled.status_code} {doubled.content!r}"
                    )
            emptied = _send(api, method, call.url, _replaced(call.body, where, lambda o: {}))
            needed = {key.rsplit(".", 1)[-1] for key, m in _messages(emptied.json()) if m == REQUIRED_MESSAGE}
            if needed != required:
                problems.append(
                    f"request{list(where)}: documented as required {sorted(required)}, "
                    f"the view requires {sorted(needed)}"
                )
    elif method != "get":
        probed = _send(api, method, call.url, {PROBE: 1})
        refused = [
            m for _, m in _messages(probed.json()) if m == UNKNOWN_FIELD_MESSAGE.format(allowed="none")
        ]
        if not refused:
            problems.append(f"request: documented without a body, but the view answered {probed.status_code}")

    response = _send(api, method, call.url, call.body)
    if response.status_code != call.status:
        return [
            *problems,
            f"the call answered {response.status_code}, not {call.status}: {response.content!r}",
        ]
    answered = operation["responses"].get(str(response.status_code), {})
    answer_schema = answered.get("content", {}).get("application/json", {}).get("schema")
    if answer_schema is None:
        return [*problems, f"response {response.status_code}: not documented with a body"]
    try:
        jsonschema.validate(response.json(), json_schema(answer_schema, components, closed=True))
    except jsonschema.ValidationError as exc:
        problems.append(f"response {response.status_code}: {exc.message} (at {list(exc.absolute_path)})")
    return problems


def _operations(schema: dict[str, Any]) -> set[tuple[str, str]]:
    methods = {"get", "put", "post", "patch", "delete"}
    return {(method, path) for path, item in schema["paths"].items() for method in item if method in methods}


def test_every_schema_operation_has_a_real_call(served_schema: dict[str, Any]) -> None:
    missing = _operations(served_schema) - set(CALLS)
    assert not missing, f"add a row to CALLS in {__name__} for {sorted(missing)}"
    assert set(CALLS) - _operations(served_schema) == set()


@pytest.mark.parametrize(("method", "path"), sorted(CALLS), ids=[f"{m} {p}" for m, p in sorted(CALLS)])
def test_each_operation_documents_what_its_view_takes_and_returns(
    served_schema: dict[str, Any], api: APIClient, runtime: AgentRuntime, method: str, path: str
) -> None:
    assert operation_problems(served_schema, method, path, api) == []


@pytest.mark.parametrize("swapped", ["requestBody", "responses"])
def test_a_skill_decision_documented_as_a_tool_decision_is_caught(
    served_schema: dict[str, Any], api: APIClient, runtime: AgentRuntime, swapped: str
) -> None:
    # The schema before the fix: the skill decision with the tool decision's body or answer.
    wrong = copy.deepcopy(served_schema)
    tool = wrong["paths"]["/api/v1/tool-decisions"]["post"]
    wrong["paths"]["/api/v1/skill-decisions"]["post"][swapped] = copy.deepcopy(tool[swapped])
    problems = operation_problems(wrong, "post", "/api/v1/skill-decisions", api)
    side = "request" if swapped == "requestBody" else "response 200"
    assert problems, "the checker missed a skill decision documented as a tool decision"
    assert all(problem.startswith(side) for problem in problems), problems
