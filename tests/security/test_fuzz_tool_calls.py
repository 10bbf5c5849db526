"""Hypothesis fuzzing of the tool-call endpoints (bad input): `POST /tool-decisions` and
`POST /tool-approval-requests` take any body, raw bytes included, and answer a 2xx, a 4xx
naming what is wrong, or a 409 — never a 5xx. Arguments that pass are stored exactly as sent
and their digest is the RFC 8785 one; a decision's answer is only ever ALLOW, ASK or DENY.

The Schemathesis run (test_schemathesis.py) covers these operations from their schema too;
this file aims at the arguments object itself: deep, wide, odd numbers, odd text.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.tool_policy import arguments_problem
from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import TEST_ACTOR
from tests.fuzzing import budget

EXAMPLES = 100
PATHS = ("/api/v1/tool-decisions", "/api/v1/tool-approval-requests")
FIELDS = (
    "tool",
    "server",
    "session_id",
    "invoking_session_id",
    "turn_id",
    "principal",
    "arguments",
    "replay",
    "approval_id",
    "reason",
    "timeout_seconds",
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(["git push origin main", "rm -rf /", "a\nb", "x;y", "$(id)", "../../etc", "\u202e", ""]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["command", "path", "cwd", "x"]), json_values, max_size=4),
    json_values,
)
bodies = st.fixed_dictionaries(
    {"tool": st.sampled_from(["Bash", "Read", "nobody", ""]) | json_scalars},
    optional={
        "server": st.none() | st.sampled_from(["git", "x" * 101]) | json_scalars,
        "session_id": st.sampled_from(["s-1", "s-2"]) | json_scalars,
        "invoking_session_id": st.none() | st.sampled_from(["s-1", "never"]),
        "turn_id": st.none() | st.text(max_size=5),
        "principal": st.none() | st.sampled_from(["alice", "bob"]),
        "arguments": arguments,
        "replay": st.booleans() | json_scalars,
        "approval_id": st.none() | st.uuids().map(str) | st.text(max_size=8),
        "reason": st.none() | st.text(max_size=20),
        "timeout_seconds": st.none() | st.integers(min_value=-5, max_value=100_000),
        "zz_unknown": json_scalars,
    },
)
raw_arguments = st.sampled_from(
    [
        '{"n": 1e999}',
        '{"n": -1e999}',
        '{"n": 9007199254740993}',
        '{"t": "\\ud800"}',
        '{"t": "\\udc00x"}',
        '{"t": "\\u0000"}',
        '{"\\ud800": 1}',
        '"just text"',
        "[]",
        '{"a":' * 40 + "1" + "}" * 40,
        "[" * 600 + "]" * 600,
        '{"big": "' + "x" * 70_000 + '"}',
    ]
)


@pytest.fixture
def tools(runtime: AgentRuntime) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[{"name": "Bash"}, {"name": "Read", "side_effect_level": "READ_ONLY"}],
        actor=TEST_ACTOR,
    )
    ToolSubject.objects.create(server="", tool="Bash", argument="command")


def _has_nul(value: Any) -> bool:
    """NUL anywhere (PostgreSQL cannot store it: refused as a 400 naming arguments)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _same_json(stored: Any, sent: Any) -> bool:
    if isinstance(sent, bool) or sent is None or isinstance(sent, str):
        return stored == sent and type(stored) is type(sent)
    if isinstance(sent, (int, float)):
        return not isinstance(stored, bool) and Decimal(repr(stored)) == Decimal(repr(sent))
    if isinstance(sent, list):
        return isinstance(stored, list) and len(stored) == len(sent) and all(map(_same_json, stored, sent))
    return (
        isinstance(stored, dict)
        and stored.keys() == sent.keys()
        and all(_same_json(stored[k], sent[k]) for k in sent)
    )


def _check(response: Any, body: Any) -> None:
    assert response.status_code < 500, (response.status_code, body, response.content[:300])
    if response.status_code == 400:
        answer = response.json()
        assert answer["error"] == "invalid"
        assert answer["detail"]


@budget(EXAMPLES, HealthCheck.function_scoped_fixture)
@given(body=bodies)
@pytest.mark.usefixtures("tools")
def test_any_body_is_answered_without_a_server_error(api: APIClient, body: dict[str, Any]) -> None:
    for path in PATHS:
        sent = {
            k: v
            for k, v in body.items()
            if path.endswith("requests") or k not in ("reason", "timeout_seconds")
        }
        response = api.post(path, sent, format="json")
        _check(response, sent)
        if response.status_code == 400:
            named = set(response.json().get("fields", {}))
            assert named <= {*FIELDS, "zz_unknown", "non_field_errors"}, named
        if path == PATHS[0] and response.status_code == 200:
            assert response.json()["decision"] in ("ALLOW", "ASK", "DENY")


@budget(EXAMPLES, HealthCheck.function_scoped_fixture)
@given(value=st.dictionaries(st.text(max_size=10), json_values, max_size=5))
@pytest.mark.usefixtures("tools")
def test_arguments_that_pass_are_stored_as_sent_with_their_canonical_digest(
    api: APIClient, value: dict[str, Any]
) -> None:  # U2, U4
    response = api.post(PATHS[1], {"tool": "Bash", "session_id": "s-1", "arguments": value}, format="json")
    _check(response, value)
    if arguments_problem(value) is not None or _has_nul(value):
        assert response.status_code == 400
        assert list(response.json()["fields"]) == ["arguments"]
        return
    assert response.status_code == 201, response.content
    stored = ApprovalRequest.objects.get(pk=response.json()["id"])
    # As sent, number for number: PostgreSQL's jsonb keeps 4.673744980609105e+16 as the same
    # number written 46737449806091050, which Python reads back as an int.
    assert _same_json(stored.arguments, value)
    assert response.json()["arguments_digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


@budget(40, HealthCheck.function_scoped_fixture)
@given(raw=raw_arguments)
@pytest.mark.usefixtures("tools")
def test_hostile_raw_arguments_are_a_4xx(api: APIClient, raw: str) -> None:  # bad input
    for path in PATHS:
        body = '{"tool": "Bash", "session_id": "s-1", "arguments": ' + raw + "}"
        response = api.generic("POST", path, body, content_type="application/json")
        assert 400 <= response.status_code < 500, (path, raw[:60], response.status_code)
