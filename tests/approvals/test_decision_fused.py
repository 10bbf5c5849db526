"""`POST /api/v1/skill-decisions` looks its token up in the decision's own read (one round
trip in the common case): authentication answers exactly as on every endpoint, the
answers are those of the token looked up first, and nothing outlives a revoke (S2, S3, S12;
docs/api.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, RevokeReason, RuleAction
from aimon_admin.approvals.models import Grant, Session
from aimon_admin.approvals.services import (
    SkillCall,
    decide_for_token,
    decide_skills,
    request_answer,
)
from aimon_admin.runtimes.authentication import (
    INVALID_TOKEN_MESSAGE,
    MALFORMED_HEADER_MESSAGE,
    RUNTIME_DISABLED_MESSAGE,
)
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import LAST_USED_RESOLUTION
from aimon_admin.runtimes.services import runtime_disable, token_revoke
from tests.approvals.factories import api_decide_skills, open_skill_request
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

PATH = "/api/v1/skill-decisions"
CHALLENGE = 'Bearer realm="aimon"'
UNKNOWN = "aimon_not-a-real-token-at-all-000000000000"


def client(token: str | None = None, header: str | None = None) -> APIClient:
    api = APIClient()
    if header is not None:
        api.credentials(HTTP_AUTHORIZATION=header)
    elif token is not None:
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


def answers(response: Any) -> list[tuple[str, str, str]]:
    assert response.status_code == 200, response.content
    return [(d["skill"], d["decision"], d["source"]) for d in response.json()["decisions"]]


def granted(runtime: AgentRuntime, approver: User, skill: str, session_id: str, how: Answer) -> None:
    request = open_skill_request(runtime, skill, session_id=session_id, principal="alice")
    assert not request_answer(request=request, user=approver, answer=how).failed


def token_row(raw: str) -> RuntimeToken:
    return RuntimeToken.objects.get(prefix=raw[:12])


def unauthorized(response: Any, detail: str = INVALID_TOKEN_MESSAGE, api: APIClient | None = None) -> None:
    assert response.status_code == 401
    assert response.json() == {"error": "not_authenticated", "detail": detail}
    assert response["WWW-Authenticate"] == CHALLENGE
    if api is not None:  # the very answer of a DRF endpoint to the same credentials
        drf = api.post("/api/v1/approval-requests", {"skills": ["deploy"]}, format="json")
        assert (drf.status_code, drf.json(), drf["WWW-Authenticate"]) == (
            401,
            response.json(),
            response["WWW-Authenticate"],
        )


# --- One round trip, the same answers -------------------------------------------------------------


def test_a_decision_with_a_fresh_session_is_one_query_token_included(
    runtime: AgentRuntime,
    runtime_token: str,
    approver: User,
    operator: User,
    django_assert_num_queries: Callable,
) -> None:  # S2, S3: every layer answers from the one read
    granted(runtime, approver, "deploy", "s-1", Answer.ALLOW_SESSION)
    granted(runtime, approver, "notify", "s-0", Answer.DENY)
    granted(runtime, operator, "wipe", "s-1", Answer.ALLOW_AGENT)
    rules.rule_create(pattern="read-*", action=RuleAction.ALLOW, actor=TEST_ACTOR)
    api = client(runtime_token)
    body = {"session_id": "s-1", "invoking_session_id": "s-0", "principal": "alice", "turn_id": "t-1"}
    skills = ["deploy", "notify", "wipe", "read-file", "other"]
    api_decide_skills(api, skills, **body)  # warm: the token used, the rule index built

    with django_assert_num_queries(1):
        got = answers(api_decide_skills(api, skills, **body))

    assert got == [
        ("deploy", "ALLOW", "SESSION"),
        ("notify", "DENY", "INVOKING_SESSION"),
        ("wipe", "ALLOW", "AGENT"),
        ("read-file", "ALLOW", "RULE"),
        ("other", "ASK", "DEFAULT"),
    ]


def test_a_fork_is_one_query_and_reads_its_invoking_session(
    runtime: AgentRuntime, runtime_token: str, approver: User, django_assert_num_queries: Callable
) -> None:  # S3: a fork inherits approvals and denials, and never creates the session
    granted(runtime, approver, "deploy", "s-0", Answer.ALLOW_SESSION)
    granted(runtime, approver, "notify", "s-0", Answer.DENY)
    api = client(runtime_token)
    api_decide_skills(api, ["deploy"], invoking_session_id="s-0")

    with django_assert_num_queries(1):
        got = answers(api_decide_skills(api, ["deploy", "notify"], invoking_session_id="s-0"))
    assert got == [("deploy", "ALLOW", "INVOKING_SESSION"), ("notify", "DENY", "INVOKING_SESSION")]
    # An invoking session never seen is a 400 naming the field, on this path too.
    refused = api_decide_skills(api, ["deploy"], invoking_session_id="s-unseen")
    assert refused.status_code == 400
    assert list(refused.json()["fields"]) == ["invoking_session_id"]
    assert answers(api_decide_skills(api, ["deploy"])) == [("deploy", "ASK", "DEFAULT")]
    assert not Session.objects.filter(session_id="s-unseen").exists()


def test_an_unseen_session_is_created_with_its_principal_then_fixed(
    runtime: AgentRuntime, runtime_token: str
) -> None:  # S12: created from the read that found it absent
    api = client(runtime_token)
    assert answers(api_decide_skills(api, ["deploy"], session_id="s-new", principal="alice")) == [
        ("deploy", "ASK", "DEFAULT")
    ]
    assert Session.objects.get(runtime=runtime, session_id="s-new").principal == "alice"

    response = api_decide_skills(api, ["deploy"], session_id="s-new", principal="bob")
    assert response.status_code == 409
    assert "'alice'" in response.json()["detail"]


def test_a_session_seen_over_a_minute_ago_is_touched(
    runtime: AgentRuntime, runtime_token: str
) -> None:  # S12
    api = client(runtime_token)
    api_decide_skills(api, ["deploy"], session_id="s-1")
    before = timezone.now() - dt.timedelta(minutes=2)
    Session.objects.filter(session_id="s-1").update(last_seen_at=before)

    answers(api_decide_skills(api, ["deploy"], session_id="s-1"))
    assert Session.objects.get(session_id="s-1").last_seen_at > before + dt.timedelta(minutes=1)


def test_a_session_idle_past_its_ttl_loses_its_approvals_first(
    runtime: AgentRuntime, runtime_token: str, approver: User, settings: Any
) -> None:  # S12
    granted(runtime, approver, "deploy", "s-1", Answer.ALLOW_SESSION)
    api = client(runtime_token)
    assert answers(api_decide_skills(api, ["deploy"], session_id="s-1")) == [("deploy", "ALLOW", "SESSION")]
    idle = dt.timedelta(seconds=settings.AIMON_SESSION_IDLE_TTL_SECONDS + 60)
    Session.objects.filter(session_id="s-1").update(last_seen_at=timezone.now() - idle)

    assert answers(api_decide_skills(api, ["deploy"], session_id="s-1")) == [("deploy", "ASK", "DEFAULT")]
    assert Grant.objects.get(skill="deploy").revoke_reason == RevokeReason.EXPIRED


# --- Authentication: as on every endpoint --------------------------------------------------------------


def test_a_revoked_token_is_401_on_the_next_call_and_writes_nothing(
    runtime: AgentRuntime, runtime_token: str
) -> None:  # nothing cached across requests
    api = client(runtime_token)
    answers(api_decide_skills(api, ["deploy"], session_id="s-1"))
    token_revoke(token=token_row(runtime_token), actor=TEST_ACTOR)

    unauthorized(api_decide_skills(api, ["deploy"], session_id="s-unseen", principal="alice"), api=api)
    assert not Session.objects.filter(session_id="s-unseen").exists()  # no decision's writes


def test_a_token_of_a_disabled_runtime_is_401_saying_so(runtime: AgentRuntime, runtime_token: str) -> None:
    # The fused read refuses it as the authentication class does, in the same words.
    api = client(runtime_token)
    answers(api_decide_skills(api, ["deploy"], session_id="s-1"))
    runtime_disable(runtime=runtime, actor=TEST_ACTOR)

    unauthorized(
        api_decide_skills(api, ["deploy"], session_id="s-1"), detail=RUNTIME_DISABLED_MESSAGE, api=api
    )


def test_another_runtimes_session_is_not_read(
    other_runtime: AgentRuntime, runtime_token: str, approver: User, operator: User
) -> None:  # S12: sessions are keyed by (runtime, session_id)
    granted(other_runtime, operator, "deploy", "s-1", Answer.ALLOW_AGENT)
    granted(other_runtime, approver, "notify", "s-1", Answer.ALLOW_SESSION)
    api = client(runtime_token)
    api_decide_skills(api, ["deploy"], session_id="s-1")
    assert answers(api_decide_skills(api, ["deploy", "notify"], session_id="s-1")) == [
        ("deploy", "ASK", "DEFAULT"),
        ("notify", "ASK", "DEFAULT"),
    ]


@pytest.mark.parametrize("raw", ["not-a-token", "aimon_short", "aimon_" + "x" * 300])
def test_a_token_of_the_wrong_shape_is_401_without_a_query(
    raw: str, django_assert_num_queries: Callable
) -> None:
    with django_assert_num_queries(0):
        unauthorized(api_decide_skills(client(raw), ["deploy"], session_id="s-1"))
    unauthorized(api_decide_skills(client(raw), ["deploy"]), api=client(raw))


@pytest.mark.parametrize("header", ["Bearer", "Bearer a b", "Token aimon_x", "bearer"])
def test_a_malformed_header_is_401_naming_the_form(header: str) -> None:
    api = client(header=header)
    unauthorized(api_decide_skills(api, ["deploy"]), MALFORMED_HEADER_MESSAGE, api=api)


def test_a_non_ascii_token_is_401(db: None) -> None:
    response = client().post(
        PATH,
        {"skills": ["deploy"]},
        format="json",
        HTTP_AUTHORIZATION="Bearer aimon_\u00e9t\u00e9-0000000000000000",
    )
    unauthorized(response)


@pytest.mark.parametrize(
    "body", [{"skills": []}, {"skills": ["deploy"], "decision": "ALLOW"}, {"skills": "deploy"}, [1]]
)
def test_authentication_comes_before_the_body(body: Any, runtime_token: str) -> None:
    # An unknown token with a bad body is a 401, as on every endpoint; only an
    # authenticated caller is told what is wrong with its body.
    unauthorized(client(UNKNOWN).post(PATH, body, format="json"), api=client(UNKNOWN))
    response = client().post(PATH, body, format="json")
    assert (response.status_code, response.json()["error"]) == (401, "not_authenticated")
    response = client(runtime_token).post(PATH, body, format="json")
    assert (response.status_code, response.json()["error"]) == (400, "invalid")


def test_last_used_is_kept_as_every_authentication_keeps_it(
    runtime_token: str, django_assert_num_queries: Callable
) -> None:
    api = client(runtime_token)
    stale = timezone.now() - LAST_USED_RESOLUTION - dt.timedelta(seconds=5)
    RuntimeToken.objects.filter(pk=token_row(runtime_token).pk).update(last_used_at=stale)
    api_decide_skills(api, ["deploy"], session_id="s-1")  # creates the session
    refreshed = token_row(runtime_token).last_used_at
    assert refreshed is not None
    assert refreshed > stale + dt.timedelta(seconds=4)

    RuntimeToken.objects.filter(pk=token_row(runtime_token).pk).update(last_used_at=stale)
    with django_assert_num_queries(2):  # the read, and last_used_at written: stale again
        answers(api_decide_skills(api, ["deploy"], session_id="s-1"))
    assert token_row(runtime_token).last_used_at > stale  # type: ignore[operator]


# --- PostgreSQL: the fused read is a prepared statement ----------------------------------------------


def _fused_prepared() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'WITH tok(%%'")
        return cursor.fetchone()[0]


@pytest.mark.postgres
def test_the_fused_read_is_prepared_once_and_django_keeps_its_setting(
    runtime_token: str, django_assert_num_queries: Callable
) -> None:
    api = client(runtime_token)
    api_decide_skills(api, ["deploy"], session_id="s-1")
    api_decide_skills(api, ["deploy"], session_id="s-1")
    assert _fused_prepared() == 1  # one statement, kept on the connection, reused
    assert connection.connection.prepare_threshold is None  # Django's: off for every other query
    with django_assert_num_queries(1):  # counted and logged as any query
        assert answers(api_decide_skills(api, ["deploy"], session_id="s-1")) == [("deploy", "ASK", "DEFAULT")]


@pytest.mark.postgres
def test_a_granted_skill_reads_through_the_prepared_statement_at_once(
    runtime: AgentRuntime, runtime_token: str, approver: User
) -> None:  # no decision outlives a write: only the plan is kept
    api = client(runtime_token)
    api_decide_skills(api, ["deploy"], session_id="s-1", principal="alice")
    assert answers(api_decide_skills(api, ["deploy"], session_id="s-1")) == [("deploy", "ASK", "DEFAULT")]
    granted(runtime, approver, "deploy", "s-1", Answer.ALLOW_SESSION)
    assert answers(api_decide_skills(api, ["deploy"], session_id="s-1")) == [("deploy", "ALLOW", "SESSION")]
    token_revoke(token=token_row(runtime_token), actor=TEST_ACTOR)
    unauthorized(api_decide_skills(api, ["deploy"], session_id="s-1"))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_prepared_statement_gone_from_the_server_is_read_unprepared(
    runtime: AgentRuntime, runtime_token: str
) -> None:
    # As a pooler or a DISCARD ALL that psycopg did not see would leave it: psycopg still
    # names the statement, the server no longer has it. (The service itself, so that the
    # whole test runs on one connection of the pool.)
    def decided() -> list[tuple[str, str]]:
        found = decide_for_token(
            runtime_token,
            SkillCall(
                skills=["deploy"], session_id="s-1", invoking_session_id=None, principal=None, turn_id=None
            ),
            decide_skills,
        )
        assert found is not None
        return [(str(v.decision), str(v.source)) for v in found[1]]

    decided()  # creates the session
    assert decided() == [("ASK", "DEFAULT")]
    assert _fused_prepared() == 1
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    assert _fused_prepared() == 0

    assert decided() == [("ASK", "DEFAULT")]  # unprepared, once
    assert decided() == [("ASK", "DEFAULT")]
    assert _fused_prepared() == 1  # prepared again
