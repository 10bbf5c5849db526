"""The approvals runtime API (docs/api.md "Deciding skills", "Asking a person: approval
requests", "Clearing and revoking"): whole bodies, every 4xx shape, another runtime's
request → 404.

People answer through the browser; here they answer through the service it calls.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules
from aimon_admin.approvals.api.requests import NOT_FOUND_MESSAGE
from aimon_admin.approvals.api.serializers import (
    DUPLICATE_SKILLS_MESSAGE,
    NOT_BOOLEAN_MESSAGE,
    WAIT_MESSAGE,
)
from aimon_admin.approvals.choices import Answer, GrantScope, RequestStatus, RevokeReason
from aimon_admin.approvals.models import ApprovalRequest, Grant, Session
from aimon_admin.approvals.services import (
    request_answer,
)
from aimon_admin.approvals.services.errors import PRINCIPAL_CONFLICT_MESSAGE, UNKNOWN_INVOKING_SESSION_MESSAGE
from aimon_admin.approvals.tasks import EXPIRE_TASK_NAME, expire_due_requests
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.api import CONTROL_CHARS_MESSAGE, UNKNOWN_FIELD_MESSAGE
from aimon_admin.runtimes.authentication import INVALID_TOKEN_MESSAGE
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import api_decide_skills, api_open_skill_request
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import api_client_for

pytestmark = pytest.mark.django_db

DECIDE_FIELDS = "invoking_session_id, principal, session_id, skills, turn_id"
REQUEST_FIELDS = "invoking_session_id, principal, reason, session_id, skills, timeout_seconds, turn_id"
NO_CREDENTIALS = "Authentication credentials were not provided."


@pytest.fixture(autouse=True)
def _fresh_rule_index() -> Iterator[None]:
    # The rule set's version number restarts with every test database rollback, so a
    # process-wide index cached by an earlier test could carry its (rolled back) rules.
    rules.rule_index_reset()
    yield
    rules.rule_index_reset()


@pytest.fixture
def other_api(other_runtime: AgentRuntime) -> APIClient:
    return api_client_for(other_runtime)


def decisions(api: APIClient, skills: list[str], **body: Any) -> list[tuple[str, str, str]]:
    response = api_decide_skills(api, skills, **body)
    assert response.status_code == 200, response.content
    return [(d["skill"], d["decision"], d["source"]) for d in response.json()["decisions"]]


def opened(api: APIClient, skills: list[str], **body: Any) -> dict[str, Any]:
    response = api_open_skill_request(api, skills, **body)
    assert response.status_code == 201, response.content
    return response.json()


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def row(body: dict[str, Any]) -> ApprovalRequest:
    return ApprovalRequest.objects.get(pk=body["id"])


def answer(body: dict[str, Any], user: User, how: Answer = Answer.ALLOW_SESSION, **kw: Any) -> None:
    outcome = request_answer(request=row(body), user=user, answer=how, **kw)
    assert not outcome.failed


def invalid(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "error": "invalid",
        "detail": "Invalid input: " + ", ".join(sorted(fields)) + ".",
        "fields": fields,
    }


def unknown(names: list[str], allowed: str) -> dict[str, Any]:
    message = UNKNOWN_FIELD_MESSAGE.format(allowed=allowed)
    return invalid({name: [message] for name in names})


# --- Skill decisions (S1-S3) -----------------------------------------------------------------------


def test_a_skill_nothing_decides_is_ask_from_the_default(api: APIClient) -> None:  # S2
    response = api_decide_skills(
        api, ["deploy", "notify"], session_id="s-1", turn_id="t-1", principal="alice"
    )
    assert response.status_code == 200
    assert response.json() == {
        "decisions": [
            {"skill": "deploy", "decision": "ASK", "source": "DEFAULT"},
            {"skill": "notify", "decision": "ASK", "source": "DEFAULT"},
        ]
    }


def test_a_decision_creates_the_session_with_its_principal(api: APIClient, runtime: AgentRuntime) -> None:
    api_decide_skills(api, ["deploy"], session_id="s-1", principal="alice")  # S12
    session = Session.objects.get(runtime=runtime, session_id="s-1")
    assert session.principal == "alice"


def test_a_session_answer_reaches_that_session_only(api: APIClient, approver: User) -> None:  # S2 S4
    request = opened(api, ["deploy"], session_id="s-1", principal="alice")
    answer(request, approver)
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "ALLOW", "SESSION")]
    assert decisions(api, ["deploy"], session_id="s-2") == [("deploy", "ASK", "DEFAULT")]


def test_an_agent_answer_reaches_every_session_of_that_runtime_only(
    api: APIClient, other_api: APIClient, operator: User
) -> None:  # S4
    request = opened(api, ["deploy"], session_id="s-1")
    answer(request, operator, Answer.ALLOW_AGENT)
    assert decisions(api, ["deploy"], session_id="s-2") == [("deploy", "ALLOW", "AGENT")]
    assert decisions(api, ["deploy"]) == [("deploy", "ALLOW", "AGENT")]
    assert decisions(other_api, ["deploy"], session_id="s-1") == [("deploy", "ASK", "DEFAULT")]


def test_session_deny_beats_older_agent_allow(api: APIClient, operator: User) -> None:  # S2
    asked_in_s2 = opened(api, ["deploy"], session_id="s-2")
    answer(opened(api, ["deploy"], session_id="s-1"), operator, Answer.ALLOW_AGENT)
    answer(asked_in_s2, operator, Answer.DENY)
    assert decisions(api, ["deploy"], session_id="s-2") == [("deploy", "DENY", "SESSION")]
    assert decisions(api, ["deploy"], session_id="s-3") == [("deploy", "ALLOW", "AGENT")]


def test_an_allow_once_answers_that_turn_only(api: APIClient, approver: User) -> None:  # S2 S4
    request = opened(api, ["deploy"], session_id="s-1", turn_id="t-1", principal="alice")
    answer(request, approver, Answer.ALLOW_ONCE)
    assert decisions(api, ["deploy"], session_id="s-1", turn_id="t-1") == [("deploy", "ALLOW", "TURN")]
    assert decisions(api, ["deploy"], session_id="s-1", turn_id="t-2") == [("deploy", "ASK", "DEFAULT")]


def test_a_rule_decides_what_no_grant_holds(api: APIClient) -> None:  # S2
    rules.rule_create(pattern="read-*", action="ALLOW", actor=TEST_ACTOR)
    rules.rule_create(pattern="drop-db", action="DENY", actor=TEST_ACTOR)
    assert decisions(api, ["read-file", "drop-db", "deploy"], session_id="s-1") == [
        ("read-file", "ALLOW", "RULE"),
        ("drop-db", "DENY", "RULE"),
        ("deploy", "ASK", "DEFAULT"),
    ]


def test_a_fork_inherits_its_invoking_sessions_approvals_and_denials(
    api: APIClient, approver: User, runtime: AgentRuntime
) -> None:  # S3
    request = opened(api, ["deploy", "drop-db"], session_id="s-1", principal="alice")
    answer(request, approver, Answer.ALLOW_SESSION, skills=["deploy"])
    answer(request, approver, Answer.DENY, skills=["drop-db"])
    assert decisions(api, ["deploy", "drop-db", "notify"], invoking_session_id="s-1") == [
        ("deploy", "ALLOW", "INVOKING_SESSION"),
        ("drop-db", "DENY", "INVOKING_SESSION"),
        ("notify", "ASK", "DEFAULT"),
    ]
    # The session's own answer is read before the invoking session's (S3).
    assert decisions(api, ["deploy"], session_id="s-9", invoking_session_id="s-1") == [
        ("deploy", "ALLOW", "INVOKING_SESSION")
    ]
    answer(opened(api, ["deploy"], session_id="s-9", principal="alice"), approver, Answer.DENY)
    assert decisions(api, ["deploy"], session_id="s-9", invoking_session_id="s-1") == [
        ("deploy", "DENY", "SESSION")
    ]


def unknown_invoking(session_id: str) -> dict[str, Any]:
    return {
        "error": "invalid",
        "detail": "Invalid input: invoking_session_id.",
        "fields": {"invoking_session_id": [UNKNOWN_INVOKING_SESSION_MESSAGE.format(session=session_id)]},
    }


@pytest.mark.parametrize("session_id", [None, "s-1"])
def test_an_unknown_invoking_session_is_refused_naming_the_field(
    api: APIClient, runtime: AgentRuntime, other_api: APIClient, session_id: str | None
) -> None:  # S3: it once silently created a session nobody owns
    api_decide_skills(other_api, ["deploy"], session_id="s-other")  # another runtime's session is not ours
    for unknown in ("s-unknown", "s-other"):
        for call in (api_decide_skills, api_open_skill_request):
            response = call(
                api, ["deploy"], session_id=session_id, invoking_session_id=unknown, principal="alice"
            )
            assert (response.status_code, response.json()) == (400, unknown_invoking(unknown))
    assert not Session.objects.filter(runtime=runtime).exists()  # neither session created
    assert not ApprovalRequest.objects.exists()
    # Once the invoking session has been seen, a fork names it.
    api_decide_skills(api, ["deploy"], session_id="s-unknown")
    assert decisions(api, ["deploy"], invoking_session_id="s-unknown") == [("deploy", "ASK", "DEFAULT")]
    assert api_open_skill_request(api, ["deploy"], invoking_session_id="s-unknown").status_code == 201


def test_a_sessions_principal_is_fixed_when_first_seen(api: APIClient) -> None:  # S12
    api_decide_skills(api, ["deploy"], session_id="s-1", principal="alice")
    conflict = {
        "error": "conflict",
        "detail": PRINCIPAL_CONFLICT_MESSAGE.format(session="s-1", fixed="alice"),
    }
    response = api_decide_skills(api, ["deploy"], session_id="s-1", principal="mallory")
    assert (response.status_code, response.json()) == (409, conflict)
    response = api_open_skill_request(api, ["deploy"], session_id="s-1", principal="mallory")
    assert (response.status_code, response.json()) == (409, conflict)
    assert not ApprovalRequest.objects.exists()
    # Naming no principal, or the same one, is fine.
    assert api_decide_skills(api, ["deploy"], session_id="s-1").status_code == 200
    assert api_decide_skills(api, ["deploy"], session_id="s-1", principal="alice").status_code == 200


def test_the_same_session_id_on_another_runtime_is_another_session(
    api: APIClient, other_api: APIClient
) -> None:
    # S12: keyed by (runtime, session_id)
    api_decide_skills(api, ["deploy"], session_id="s-1", principal="alice")
    assert api_decide_skills(other_api, ["deploy"], session_id="s-1", principal="bob").status_code == 200


def test_skill_decisions_cost_a_few_queries(
    api: APIClient, approver: User, django_assert_max_num_queries
) -> None:  # the hot path
    request = opened(api, ["deploy"], session_id="s-1", principal="alice")
    answer(request, approver)
    api_decide_skills(api, ["deploy"], session_id="s-0")  # the invoking session exists
    skills = [f"skill-{n}" for n in range(99)] + ["deploy"]
    body = {"session_id": "s-1", "invoking_session_id": "s-0", "turn_id": "t-1", "principal": "alice"}
    api_decide_skills(api, skills, **body)  # warm: token and session seen, rule index built
    # token, both sessions at once, every grant at once, the rule set's version: four,
    # however many skills.
    with django_assert_max_num_queries(4):
        response = api_decide_skills(api, skills, **body)
    assert response.json()["decisions"][-1] == {"skill": "deploy", "decision": "ALLOW", "source": "SESSION"}
    # First sight: the same one read finds the session absent, then it is inserted (in a savepoint).
    with django_assert_max_num_queries(4):
        assert api_decide_skills(api, skills, session_id="s-new", principal="alice").status_code == 200


def test_a_decision_for_a_new_session_reads_its_session_row_once(
    api: APIClient, django_assert_num_queries: Any
) -> None:  # S12: created at first sight, from the one read that found it absent
    # warm: token seen, rule index built
    api_decide_skills(api, ["deploy"], session_id="s-0", principal="alice")
    with django_assert_num_queries(4) as queries:
        response = api_decide_skills(api, ["deploy"], session_id="s-new", principal="alice")
    assert response.status_code == 200
    assert Session.objects.get(session_id="s-new").principal == "alice"
    # One read: token, sessions, grants and the rule set's version in one statement (on
    # PostgreSQL a prepared statement, logged without its text). Then the insert.
    writes = ("INSERT", "SAVEPOINT", "RELEASE")
    sqls = [(q["sql"] or "").lstrip().upper() for q in queries.captured_queries]
    assert [sql.split()[0] for sql in sqls if sql.startswith(writes)] == ["SAVEPOINT", "INSERT", "RELEASE"]
    assert len([sql for sql in sqls if not sql.startswith(writes)]) == 1


# --- Input errors (docs/api.md "Basics") ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"skills": ["This field is required."]}),
        ({"skills": []}, {"skills": ["Ensure this field has at least 1 elements."]}),
        (
            {"skills": [f"s{n}" for n in range(101)]},
            {"skills": ["Ensure this field has no more than 100 elements."]},
        ),
        ({"skills": ["a", "b", "a"]}, {"skills": [DUPLICATE_SKILLS_MESSAGE.format(names="a")]}),
        ({"skills": "deploy"}, {"skills": ['Expected a list of items but got type "str".']}),
        ({"skills": [""]}, {"skills": {"0": ["This field may not be blank."]}}),
        ({"skills": ["x" * 201]}, {"skills": {"0": ["Ensure this field has no more than 200 characters."]}}),
        ({"skills": ["de\x00ploy"]}, {"skills": {"0": [CONTROL_CHARS_MESSAGE]}}),
        ({"skills": ["ok", 7]}, {"skills": {"1": ["Not a valid string."]}}),
        ({"skills": ["a"], "session_id": ""}, {"session_id": ["This field may not be blank."]}),
        (
            {"skills": ["a"], "turn_id": "t" * 201},
            {"turn_id": ["Ensure this field has no more than 200 characters."]},
        ),
        ({"skills": ["a"], "principal": 42}, {"principal": ["Not a valid string."]}),
        ({"skills": ["a"], "invoking_session_id": "a\nb"}, {"invoking_session_id": [CONTROL_CHARS_MESSAGE]}),
    ],
)
@pytest.mark.parametrize("path", ["/api/v1/skill-decisions", "/api/v1/approval-requests"])
def test_invalid_input_is_400_naming_the_field(
    api: APIClient, path: str, body: dict[str, Any], fields: dict[str, Any]
) -> None:
    response = api.post(path, body, format="json")
    assert (response.status_code, response.json()) == (400, invalid(fields))
    assert not ApprovalRequest.objects.exists()


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/skill-decisions", "session_id"),
        ("/api/v1/approval-requests", "session_id"),
        ("/api/v1/approval-requests", "reason"),
    ],
)
def test_a_lone_surrogate_is_400_not_a_failed_write(api: APIClient, path: str, field: str) -> None:
    raw = json.dumps({"skills": ["ok"], field: "s-\ud800"})  # JSON may carry a lone surrogate escaped
    response = api.post(path, raw, content_type="application/json")
    message = "Surrogate characters are not allowed: U+D800."
    assert (response.status_code, response.json()) == (400, invalid({field: [message]}))
    assert not ApprovalRequest.objects.exists()


@pytest.mark.parametrize(
    ("path", "allowed"),
    [("/api/v1/skill-decisions", DECIDE_FIELDS), ("/api/v1/approval-requests", REQUEST_FIELDS)],
)
def test_a_misspelt_field_is_400_never_read_as_no_session(api: APIClient, path: str, allowed: str) -> None:
    response = api.post(path, {"skills": ["deploy"], "sesion_id": "s-1"}, format="json")
    assert (response.status_code, response.json()) == (400, unknown(["sesion_id"], allowed))
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("path", "allowed"),
    [("/api/v1/skill-decisions", DECIDE_FIELDS), ("/api/v1/approval-requests", REQUEST_FIELDS)],
)
def test_a_runtime_can_never_carry_an_allow_in(api: APIClient, path: str, allowed: str) -> None:  # S11
    body = {
        "skills": ["deploy"],
        "session_id": "s-1",
        "decision": "ALLOW",
        "approved": True,
        "tags": {"ok": 1},
    }
    response = api.post(path, body, format="json")
    assert (response.status_code, response.json()) == (
        400,
        unknown(["approved", "decision", "tags"], allowed),
    )
    assert not Grant.objects.exists()
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "ASK", "DEFAULT")]


def test_no_route_lets_a_runtime_answer(api: APIClient) -> None:  # S11
    request = opened(api, ["deploy"], session_id="s-1")
    for path in (
        f"/api/v1/approval-requests/{request['id']}/answer",
        f"/api/v1/approval-requests/{request['id']}/allow",
    ):
        response = api.post(path, {"decision": "ALLOW"}, format="json")
        assert response.status_code == 404
        assert response.json()["error"] == "not_found"
    for method in ("put", "patch", "delete", "post"):
        response = getattr(api, method)(f"/api/v1/approval-requests/{request['id']}", {"status": "ANSWERED"})
        assert response.status_code == 405
        assert response.json() == {
            "error": "method_not_allowed",
            "detail": f'Method "{method.upper()}" not allowed.',
        }
    assert row(request).status == RequestStatus.PENDING
    assert not Grant.objects.exists()


def test_a_body_that_is_not_an_object_is_400(api: APIClient) -> None:
    response = api.post("/api/v1/skill-decisions", ["deploy"], format="json")
    assert (response.status_code, response.json()) == (
        400,
        invalid({"non_field_errors": ["Invalid data. Expected a dictionary, but got list."]}),
    )


def test_malformed_json_is_400(api: APIClient) -> None:
    response = api.post("/api/v1/skill-decisions", '{"skills": [', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"


def test_a_body_over_one_mib_is_413(api: APIClient) -> None:
    raw = json.dumps({"skills": ["a"], "reason": "x" * (1024 * 1024)})
    response = api.post("/api/v1/approval-requests", raw, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"


def test_a_body_that_is_not_json_is_415(api: APIClient) -> None:
    response = api.post("/api/v1/skill-decisions", "skills=deploy", content_type="text/plain")
    assert (response.status_code, response.json()) == (
        415,
        {"error": "unsupported_media_type", "detail": 'Unsupported media type "text/plain" in request.'},
    )


def test_the_wrong_method_is_405_json(api: APIClient) -> None:
    response = api.get("/api/v1/skill-decisions")
    assert (response.status_code, response.json()) == (
        405,
        {"error": "method_not_allowed", "detail": 'Method "GET" not allowed.'},
    )


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        ({"reason": "r" * 2001}, {"reason": ["Ensure this field has no more than 2000 characters."]}),
        ({"reason": "a\x00b"}, {"reason": ["Null characters are not allowed."]}),
        ({"timeout_seconds": 0}, {"timeout_seconds": ["Ensure this value is greater than or equal to 1."]}),
        (
            {"timeout_seconds": 86401},
            {"timeout_seconds": ["Ensure this value is less than or equal to 86400."]},
        ),
        ({"timeout_seconds": "soon"}, {"timeout_seconds": ["A valid integer is required."]}),
        ({"timeout_seconds": True}, {"timeout_seconds": ["A valid integer is required."]}),
    ],
)
def test_invalid_reason_or_timeout_is_400(
    api: APIClient, extra: dict[str, Any], fields: dict[str, Any]
) -> None:
    response = api_open_skill_request(api, ["deploy"], session_id="s-1", **extra)
    assert (response.status_code, response.json()) == (400, invalid(fields))


@pytest.mark.parametrize(
    ("key", "message"),
    [("", "This field may not be blank."), ("k" * 201, "Ensure this field has no more than 200 characters.")],
)
def test_an_invalid_idempotency_key_is_400_naming_the_header(api: APIClient, key: str, message: str) -> None:
    response = api_open_skill_request(api, ["deploy"], idempotency_key=key)
    assert (response.status_code, response.json()) == (400, invalid({"Idempotency-Key": [message]}))


# --- Authentication and ownership ----------------------------------------------------------------

ENDPOINTS = [
    ("post", "/api/v1/skill-decisions"),
    ("post", "/api/v1/approval-requests"),
    ("get", f"/api/v1/approval-requests/{uuid.UUID(int=1)}"),
    ("get", f"/api/v1/approval-requests/{uuid.UUID(int=1)}?wait=5"),
    ("post", f"/api/v1/approval-requests/{uuid.UUID(int=1)}/cancel"),
    ("post", "/api/v1/sessions/s-1/clear"),
    ("post", "/api/v1/sessions/s-1/revoke"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (None, NO_CREDENTIALS),
        ("Bearer aimon_" + "x" * 43, INVALID_TOKEN_MESSAGE),
        ("Bearer", "Malformed Authorization header: expected 'Bearer <token>'."),
    ],
)
def test_missing_or_bad_tokens_are_401_everywhere(
    runtime: AgentRuntime, method: str, path: str, header: str | None, detail: str
) -> None:
    client = Client()
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    started = time.monotonic()
    response = getattr(client, method)(path, {"skills": ["deploy"]}, content_type="application/json", **extra)
    assert (response.status_code, response.json()) == (401, {"error": "not_authenticated", "detail": detail})
    assert response["WWW-Authenticate"] == 'Bearer realm="aimon"'
    assert time.monotonic() - started < 2  # refused at once, never after a wait


def test_a_revoked_token_is_401_on_the_long_poll(api: APIClient, runtime: AgentRuntime) -> None:
    from aimon_admin.runtimes.models import RuntimeToken
    from aimon_admin.runtimes.services import token_revoke

    request = opened(api, ["deploy"], session_id="s-1")
    token_revoke(token=RuntimeToken.objects.get(runtime=runtime), actor=TEST_ACTOR)
    response = api.get(f"/api/v1/approval-requests/{request['id']}")
    assert (response.status_code, response.json()["detail"]) == (401, INVALID_TOKEN_MESSAGE)


@pytest.mark.parametrize("request_id", ["theirs", str(uuid.uuid4()), "not-a-uuid", "0" * 300])
def test_another_runtimes_or_an_unknown_request_is_404(
    api: APIClient, other_api: APIClient, request_id: str
) -> None:
    theirs = opened(other_api, ["deploy"], session_id="s-1")
    request_id = theirs["id"] if request_id == "theirs" else request_id
    not_found = {"error": "not_found", "detail": NOT_FOUND_MESSAGE}
    for response in (
        api.get(f"/api/v1/approval-requests/{request_id}"),
        api.get(f"/api/v1/approval-requests/{request_id}?wait=2"),
        api.post(f"/api/v1/approval-requests/{request_id}/cancel"),
    ):
        assert (response.status_code, response.json()) == (404, not_found)
    assert row(theirs).status == RequestStatus.PENDING


@pytest.mark.parametrize("wait", ["-1", "61", "1.5", "abc", "", "100", " 5", "5\n", "\u0665"])
def test_a_bad_wait_is_400_naming_it(api: APIClient, wait: str) -> None:
    request = opened(api, ["deploy"], session_id="s-1")
    response = api.get(f"/api/v1/approval-requests/{request['id']}", {"wait": wait})
    assert (response.status_code, response.json()) == (400, invalid({"wait": [WAIT_MESSAGE]}))


# --- Approval requests (S4-S9) -------------------------------------------------------------------


def test_a_new_request_is_201_with_its_whole_body(api: APIClient) -> None:
    response = api_open_skill_request(
        api, ["deploy", "notify"], session_id="s-1", turn_id="t-7", principal="alice", reason="ship it"
    )
    assert response.status_code == 201
    request = ApprovalRequest.objects.get()
    assert response.json() == {
        "id": str(request.pk),
        "status": "PENDING",
        "created_at": iso(request.created_at),
        "expires_at": iso(request.expires_at),
        "items": [
            {"skill": "deploy", "decision": None, "scope": None},
            {"skill": "notify", "decision": None, "scope": None},
        ],
        "answered_by": None,
        "answered_at": None,
    }
    assert response["Location"] == f"/api/v1/approval-requests/{request.pk}"
    assert abs(request.expires_at - request.created_at - dt.timedelta(seconds=300)) < dt.timedelta(seconds=1)
    assert (request.reason, request.principal, request.turn_id) == ("ship it", "alice", "t-7")
    assert request.session.session_id == "s-1"


@pytest.mark.parametrize(
    ("extra", "seconds"), [({"timeout_seconds": 60}, 60), ({"timeout_seconds": None}, 300)]
)
def test_timeout_seconds_sets_the_expiry(api: APIClient, extra: dict[str, Any], seconds: int) -> None:  # S9
    body = opened(api, ["deploy"], session_id="s-1", reason=None, **extra)
    request = row(body)
    expected = dt.timedelta(seconds=seconds)
    assert abs(request.expires_at - request.created_at - expected) < dt.timedelta(seconds=1)
    assert request.reason == ""


def test_the_same_idempotency_key_returns_the_same_request(api: APIClient, other_api: APIClient) -> None:
    first = api_open_skill_request(api, ["deploy"], idempotency_key="k-1", session_id="s-1")
    again = api_open_skill_request(api, ["deploy"], idempotency_key="k-1", session_id="s-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    other_key = api_open_skill_request(api, ["deploy"], idempotency_key="k-2", session_id="s-1")
    assert other_key.status_code == 201
    assert other_key.json()["id"] != first.json()["id"]
    other_runtime = api_open_skill_request(other_api, ["deploy"], idempotency_key="k-1", session_id="s-1")
    assert other_runtime.status_code == 201
    assert other_runtime.json()["id"] != first.json()["id"]
    assert ApprovalRequest.objects.count() == 3


def test_items_the_chain_decides_are_filled_in_at_creation(api: APIClient, approver: User) -> None:  # S2 S4
    answer(opened(api, ["deploy"], session_id="s-1", principal="alice"), approver)
    body = opened(api, ["deploy", "notify"], session_id="s-1")
    assert body["status"] == "PENDING"
    assert body["items"] == [
        {"skill": "deploy", "decision": "ALLOW", "scope": None, "source": "SESSION"},
        {"skill": "notify", "decision": None, "scope": None},
    ]
    assert (body["answered_by"], body["answered_at"]) == (None, None)


def test_a_request_the_chain_decides_wholly_is_answered_from_the_start(
    api: APIClient, operator: User
) -> None:  # S2 S7
    answer(opened(api, ["deploy"], session_id="s-1"), operator, Answer.ALLOW_AGENT)
    rules.rule_create(pattern="drop-*", action="DENY", actor=TEST_ACTOR)
    response = api_open_skill_request(api, ["deploy", "drop-db"], session_id="s-2")
    assert response.status_code == 201
    request = row(response.json())
    assert response.json() == {
        "id": str(request.pk),
        "status": "ANSWERED",
        "created_at": iso(request.created_at),
        "expires_at": iso(request.expires_at),
        "items": [
            {"skill": "deploy", "decision": "ALLOW", "scope": None, "source": "AGENT"},
            {"skill": "drop-db", "decision": "DENY", "scope": None, "source": "RULE"},
        ],
        "answered_by": None,
        "answered_at": iso(request.answered_at),
    }
    assert request.answered_at is not None


def test_an_answered_request_reads_back_decision_scope_and_who(api: APIClient, approver: User) -> None:  # S4
    body = opened(api, ["deploy", "notify"], session_id="s-1", principal="alice")
    answer(body, approver, Answer.ALLOW_SESSION, skills=["deploy"])
    partly = api.get(f"/api/v1/approval-requests/{body['id']}").json()
    assert partly["status"] == "PENDING"
    assert partly["items"] == [
        {"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"},
        {"skill": "notify", "decision": None, "scope": None},
    ]
    answer(body, approver, Answer.DENY, skills=["notify"])
    response = api.get(f"/api/v1/approval-requests/{body['id']}")
    request = row(body)
    assert response.status_code == 200
    assert response.json() == {
        "id": body["id"],
        "status": "ANSWERED",
        "created_at": body["created_at"],
        "expires_at": body["expires_at"],
        "items": [
            {"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"},
            {"skill": "notify", "decision": "DENY", "scope": "SESSION"},
        ],
        "answered_by": "alice",
        "answered_at": iso(request.answered_at),
    }


def test_reading_without_wait_returns_at_once(api: APIClient) -> None:
    body = opened(api, ["deploy"], session_id="s-1")
    started = time.monotonic()
    response = api.get(f"/api/v1/approval-requests/{body['id']}/")  # the trailing slash is optional
    assert time.monotonic() - started < 1
    assert response.json() == body


def test_a_wait_ends_with_the_pending_state(api: APIClient) -> None:
    body = opened(api, ["deploy"], session_id="s-1")
    started = time.monotonic()
    response = api.get(f"/api/v1/approval-requests/{body['id']}", {"wait": "1"})
    assert 1 <= time.monotonic() - started < 3
    assert (response.status_code, response.json()) == (200, body)


# --- Cancel and expiry (S9) -----------------------------------------------------------------------


def test_cancel_denies_each_unanswered_skill_for_the_session(api: APIClient, approver: User) -> None:  # S9
    body = opened(api, ["deploy", "notify"], session_id="s-1", principal="alice")
    answer(body, approver, Answer.ALLOW_SESSION, skills=["deploy"])
    response = api.post(f"/api/v1/approval-requests/{body['id']}/cancel")
    assert response.status_code == 200
    assert response.json() == {
        **body,
        "status": "CANCELLED",
        "items": [
            {"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"},
            {"skill": "notify", "decision": "DENY", "scope": "SESSION"},
        ],
    }
    assert decisions(api, ["deploy", "notify"], session_id="s-1") == [
        ("deploy", "ALLOW", "SESSION"),
        ("notify", "DENY", "SESSION"),
    ]
    # Never agent-wide: another session is still asked.
    assert decisions(api, ["notify"], session_id="s-2") == [("notify", "ASK", "DEFAULT")]
    assert not Grant.objects.filter(scope=GrantScope.AGENT).exists()
    assert AuditEvent.objects.filter(action=AuditAction.SKILL_ABORT_DENIED, subject="notify").count() == 1


def test_a_forks_cancel_denies_on_its_invoking_session(api: APIClient) -> None:  # S4 S9
    api_decide_skills(api, ["deploy"], session_id="s-1")
    body = opened(api, ["deploy"], invoking_session_id="s-1")
    assert api.post(f"/api/v1/approval-requests/{body['id']}/cancel").status_code == 200
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "DENY", "SESSION")]
    assert decisions(api, ["deploy"], invoking_session_id="s-1") == [("deploy", "DENY", "INVOKING_SESSION")]


@pytest.mark.parametrize(("close", "status"), [("answer", "answered"), ("cancel", "cancelled")])
def test_cancelling_a_closed_request_is_409(api: APIClient, approver: User, close: str, status: str) -> None:
    body = opened(api, ["deploy"], session_id="s-1", principal="alice")
    if close == "answer":
        answer(body, approver)
    else:
        api.post(f"/api/v1/approval-requests/{body['id']}/cancel")
    response = api.post(f"/api/v1/approval-requests/{body['id']}/cancel")
    assert (response.status_code, response.json()) == (
        409,
        {"error": "conflict", "detail": f"This request is already {status}."},
    )


def test_cancel_takes_no_fields(api: APIClient) -> None:
    body = opened(api, ["deploy"], session_id="s-1")
    response = api.post(
        f"/api/v1/approval-requests/{body['id']}/cancel", {"decision": "ALLOW"}, format="json"
    )
    assert (response.status_code, response.json()) == (400, unknown(["decision"], "none"))
    assert row(body).status == RequestStatus.PENDING


def test_an_expired_request_reads_as_expired_and_denies_for_the_session(api: APIClient) -> None:  # S9
    body = opened(api, ["deploy"], session_id="s-1", timeout_seconds=1)
    time.sleep(1.1)
    response = api.get(f"/api/v1/approval-requests/{body['id']}")
    assert (response.status_code, response.json()) == (
        200,
        {**body, "status": "EXPIRED", "items": [{"skill": "deploy", "decision": "DENY", "scope": "SESSION"}]},
    )
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "DENY", "SESSION")]
    assert decisions(api, ["deploy"], session_id="s-2") == [("deploy", "ASK", "DEFAULT")]
    response = api.post(f"/api/v1/approval-requests/{body['id']}/cancel")
    assert (response.status_code, response.json()["detail"]) == (409, "This request is already expired.")


def test_an_idempotent_retry_of_an_expired_request_reads_it_expired(api: APIClient) -> None:  # S9
    first = opened(api, ["deploy"], idempotency_key="k-1", session_id="s-1")
    ApprovalRequest.objects.filter(pk=first["id"]).update(expires_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    again = api_open_skill_request(api, ["deploy"], idempotency_key="k-1", session_id="s-1")
    assert (again.status_code, again.json()["status"]) == (200, "EXPIRED")


def test_the_beat_task_expires_due_requests_once(api: APIClient) -> None:  # S9
    due = opened(api, ["deploy"], session_id="s-1")
    fresh = opened(api, ["notify"], session_id="s-1")
    ApprovalRequest.objects.filter(pk=due["id"]).update(expires_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    assert expire_due_requests() == 1
    assert expire_due_requests() == 0  # idempotent
    assert (row(due).status, row(fresh).status) == (RequestStatus.EXPIRED, RequestStatus.PENDING)
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "DENY", "SESSION")]
    assert Grant.objects.filter(skill="deploy").count() == 1


def test_the_expiry_task_runs_every_30_seconds() -> None:
    from aimon_admin.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["approvals-expire-due-requests"]
    assert entry == {"task": EXPIRE_TASK_NAME, "schedule": 30.0}
    assert EXPIRE_TASK_NAME in app.tasks


# --- Session commands (S10) -------------------------------------------------------------------------


@pytest.fixture
def granted(api: APIClient, approver: User, operator: User) -> dict[str, Any]:
    """Session s-1 with a turn ALLOW, a session ALLOW and a session DENY; an agent ALLOW;
    session s-2 with a session ALLOW."""
    answer(
        opened(api, ["once"], session_id="s-1", turn_id="t-1", principal="alice"), approver, Answer.ALLOW_ONCE
    )
    answer(opened(api, ["deploy"], session_id="s-1", principal="alice"), approver)
    answer(opened(api, ["drop-db"], session_id="s-1", principal="alice"), approver, Answer.DENY)
    answer(opened(api, ["notify"], session_id="s-2", principal="alice"), operator, Answer.ALLOW_AGENT)
    answer(opened(api, ["deploy"], session_id="s-2", principal="alice"), approver)
    return {}


def test_clear_drops_the_sessions_approvals_and_denials_only(api: APIClient, granted: dict) -> None:  # S10
    response = api.post("/api/v1/sessions/s-1/clear")
    assert (response.status_code, response.json()) == (200, {"removed": 3})
    assert decisions(api, ["once", "deploy", "drop-db", "notify"], session_id="s-1", turn_id="t-1") == [
        ("once", "ASK", "DEFAULT"),
        ("deploy", "ASK", "DEFAULT"),
        ("drop-db", "ASK", "DEFAULT"),
        ("notify", "ALLOW", "AGENT"),  # agent-wide approvals survive a clear (S5)
    ]
    assert decisions(api, ["deploy"], session_id="s-2") == [("deploy", "ALLOW", "SESSION")]
    assert Grant.objects.filter(revoke_reason=RevokeReason.CLEAR).count() == 3
    event = AuditEvent.objects.filter(action=AuditAction.SESSION_CLEARED).get()
    assert event.details == {"removed": 3}
    assert api.post("/api/v1/sessions/s-1/clear/").json() == {"removed": 0}


def test_revoke_without_agent_keeps_agent_wide_approvals(api: APIClient, granted: dict) -> None:  # S10
    response = api.post("/api/v1/sessions/s-1/revoke", {"agent": False}, format="json")
    assert (response.status_code, response.json()) == (200, {"removed_session": 3, "removed_agent": 0})
    assert decisions(api, ["notify"], session_id="s-1") == [("notify", "ALLOW", "AGENT")]
    assert api.post("/api/v1/sessions/s-2/revoke").json() == {"removed_session": 1, "removed_agent": 0}


def test_revoke_with_agent_drops_the_runtimes_agent_wide_approvals(
    api: APIClient, other_api: APIClient, granted: dict, operator: User
) -> None:  # S10
    answer(opened(other_api, ["notify"], session_id="s-1"), operator, Answer.ALLOW_AGENT)
    response = api.post("/api/v1/sessions/s-1/revoke", {"agent": True}, format="json")
    assert (response.status_code, response.json()) == (200, {"removed_session": 3, "removed_agent": 1})
    assert decisions(api, ["notify", "deploy"], session_id="s-2") == [
        ("notify", "ASK", "DEFAULT"),
        ("deploy", "ALLOW", "SESSION"),
    ]
    assert decisions(other_api, ["notify"], session_id="s-1") == [("notify", "ALLOW", "AGENT")]


def test_a_session_id_in_the_path_is_url_decoded(api: APIClient, approver: User) -> None:
    answer(opened(api, ["deploy"], session_id="team/s 1", principal="alice"), approver)
    assert api.post("/api/v1/sessions/team%2Fs%201/clear").json() == {"removed": 1}


@pytest.mark.parametrize(
    ("session_id", "message"),
    [("s" * 201, "Ensure this field has no more than 200 characters."), ("s%01x", CONTROL_CHARS_MESSAGE)],
)
@pytest.mark.parametrize("verb", ["clear", "revoke"])
def test_a_bad_session_id_in_the_path_is_400_naming_it(
    api: APIClient, session_id: str, message: str, verb: str
) -> None:
    response = api.post(f"/api/v1/sessions/{session_id}/{verb}")
    assert (response.status_code, response.json()) == (400, invalid({"session_id": [message]}))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"agent": "yes"}, invalid({"agent": [NOT_BOOLEAN_MESSAGE]})),
        ({"agent": 1}, invalid({"agent": [NOT_BOOLEAN_MESSAGE]})),
        ({"agent": None}, invalid({"agent": ["This field may not be null."]})),
        ({"agnet": True}, unknown(["agnet"], "agent")),
    ],
)
def test_a_bad_revoke_body_is_400_and_revokes_nothing(
    api: APIClient, granted: dict, body: dict[str, Any], expected: dict[str, Any]
) -> None:
    response = api.post("/api/v1/sessions/s-1/revoke", body, format="json")
    assert (response.status_code, response.json()) == (400, expected)
    assert not Grant.objects.filter(revoked_at__isnull=False).exists()


def test_clear_takes_no_fields(api: APIClient, granted: dict) -> None:
    response = api.post("/api/v1/sessions/s-1/clear", {"agent": True}, format="json")
    assert (response.status_code, response.json()) == (400, unknown(["agent"], "none"))


def test_an_answer_after_a_wait_past_the_idle_ttl_is_what_skill_decisions_say(
    api: APIClient, approver: User, runtime: AgentRuntime, settings: Any
) -> None:  # S7, S12: never the request saying ALLOW/SESSION while the chain says ASK
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = 600
    body = opened(api, ["deploy"], session_id="s-1", principal="alice")
    Session.objects.filter(runtime=runtime, session_id="s-1").update(
        last_seen_at=timezone.now() - dt.timedelta(seconds=900)
    )  # the request waited longer than the idle TTL

    answer(body, approver)

    polled = api.get(f"/api/v1/approval-requests/{body['id']}").json()
    assert polled["items"] == [{"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"}]
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "ALLOW", "SESSION")]
    assert decisions(api, ["deploy"], session_id="s-1") == [("deploy", "ALLOW", "SESSION")]  # the next touch
    assert Grant.objects.get().revoked_at is None


def test_deny_this_request_reads_deny_with_scope_request_and_stores_nothing(
    api: APIClient, approver: User, runtime: AgentRuntime
) -> None:  # S13
    body = opened(api, ["deploy", "notify"], principal="alice")  # no session at all

    answer(body, approver, Answer.DENY_REQUEST)

    polled = api.get(f"/api/v1/approval-requests/{body['id']}?wait=1")
    assert polled.status_code == 200
    got = polled.json()
    assert got["status"] == "ANSWERED"
    assert got["answered_by"] == "alice"
    assert got["items"] == [
        {"skill": "deploy", "decision": "DENY", "scope": "REQUEST"},
        {"skill": "notify", "decision": "DENY", "scope": "REQUEST"},
    ]
    assert not Grant.objects.exists()  # nothing stored in any grant store
    assert decisions(api, ["deploy"]) == [("deploy", "ASK", "DEFAULT")]
    assert decisions(api, ["deploy"], session_id="s-9") == [("deploy", "ASK", "DEFAULT")]


def test_the_openapi_schema_documents_the_request_scope(api: APIClient) -> None:  # S13
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert schema["components"]["schemas"]["ApprovalItemScopeEnum"]["enum"] == [
        "TURN",
        "SESSION",
        "AGENT",
        "REQUEST",
    ]
