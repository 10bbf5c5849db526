"""Runtime tokens: shown once, stored as a hash only, revocable, several per runtime."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import token_authenticate
from aimon_admin.runtimes.services import (
    TokenAlreadyRevokedError,
    runtime_disable,
    token_issue,
    token_revoke,
)
from aimon_admin.runtimes.tokens import token_generate, token_hash, token_looks_valid, token_prefix
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import bearer_client


def test_generated_tokens_are_long_random_and_recognisable() -> None:
    tokens = {token_generate() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert token.startswith("aimon_")
        assert len(token) == len("aimon_") + 43
        assert token_looks_valid(token)
    assert token_prefix("aimon_abcdefghijk") == "aimon_abcdef"


def test_token_hash_is_sha256_hex() -> None:
    assert token_hash("aimon_x") == "e84f29bb2c32f854cf549b6fa906fea87d83fb1984665cddb1c601f99912ed0b"


@pytest.mark.django_db
def test_only_the_hash_of_an_issued_token_is_stored(runtime: AgentRuntime) -> None:
    token, plaintext = token_issue(runtime=runtime, actor=TEST_ACTOR, label="ci")
    row = RuntimeToken.objects.get(pk=token.pk)
    assert row.token_hash == token_hash(plaintext)
    assert row.prefix == plaintext[:12]
    stored = [str(value) for value in RuntimeToken.objects.filter(pk=token.pk).values().first().values()]
    assert plaintext not in stored


@pytest.mark.django_db
def test_token_issue_is_audited_with_prefix_never_the_token(runtime: AgentRuntime) -> None:
    # A1: token issue is an event, and never carries the secret.
    token, plaintext = token_issue(runtime=runtime, actor=TEST_ACTOR, label="ci")
    event = AuditEvent.objects.get(action=AuditAction.TOKEN_ISSUED)
    assert event.runtime == runtime
    assert event.subject == token.prefix
    assert event.details == {"token_id": token.pk, "label": "ci"}
    assert plaintext not in str(event.content())


@pytest.mark.django_db
def test_a_runtime_may_hold_several_active_tokens(runtime: AgentRuntime) -> None:
    first = token_issue(runtime=runtime, actor=TEST_ACTOR)[1]
    second = token_issue(runtime=runtime, actor=TEST_ACTOR)[1]
    assert bearer_client(first).get("/api/v1/runtime").status_code == 200
    assert bearer_client(second).get("/api/v1/runtime").status_code == 200


@pytest.mark.django_db
def test_a_revoked_token_is_refused_at_once_and_the_others_still_work(runtime: AgentRuntime) -> None:
    token, plaintext = token_issue(runtime=runtime, actor=TEST_ACTOR)
    _, other = token_issue(runtime=runtime, actor=TEST_ACTOR)
    assert bearer_client(plaintext).get("/api/v1/runtime").status_code == 200
    token_revoke(token=token, actor=TEST_ACTOR)
    response = bearer_client(plaintext).get("/api/v1/runtime")
    assert response.status_code == 401
    assert response.json() == {
        "error": "not_authenticated",
        "detail": "Invalid, revoked or unknown runtime token.",
    }
    assert bearer_client(other).get("/api/v1/runtime").status_code == 200


@pytest.mark.django_db
def test_revoking_twice_is_refused_and_recorded_once(runtime: AgentRuntime) -> None:
    token, _ = token_issue(runtime=runtime, actor=TEST_ACTOR)
    token_revoke(token=token, actor=TEST_ACTOR)
    with pytest.raises(TokenAlreadyRevokedError):
        token_revoke(token=token, actor=TEST_ACTOR)
    assert AuditEvent.objects.filter(action=AuditAction.TOKEN_REVOKED).count() == 1


@pytest.mark.django_db
def test_revocation_records_who_and_when(runtime: AgentRuntime, operator) -> None:  # type: ignore[no-untyped-def]
    token, _ = token_issue(runtime=runtime, actor=TEST_ACTOR)
    token_revoke(token=token, actor=Actor.for_user(operator))
    token.refresh_from_db()
    assert token.revoked_by == operator
    assert token.revoked_at is not None
    event = AuditEvent.objects.get(action=AuditAction.TOKEN_REVOKED)
    assert event.actor == operator
    assert event.subject == token.prefix


@pytest.mark.django_db
def test_tokens_of_an_inactive_runtime_are_refused(runtime: AgentRuntime) -> None:
    _, plaintext = token_issue(runtime=runtime, actor=TEST_ACTOR)
    runtime_disable(runtime=runtime, actor=TEST_ACTOR)
    assert bearer_client(plaintext).get("/api/v1/runtime").status_code == 401


@pytest.mark.django_db
def test_last_used_at_is_set_on_use_and_refreshed_at_most_once_a_minute(runtime: AgentRuntime) -> None:
    token, plaintext = token_issue(runtime=runtime, actor=TEST_ACTOR)
    assert token.last_used_at is None
    token_authenticate(plaintext)
    token.refresh_from_db()
    first_use = token.last_used_at
    assert first_use is not None
    token_authenticate(plaintext)
    token.refresh_from_db()
    assert token.last_used_at == first_use
    stale = timezone.now() - dt.timedelta(minutes=5)
    RuntimeToken.objects.filter(pk=token.pk).update(last_used_at=stale)
    token_authenticate(plaintext)
    token.refresh_from_db()
    assert token.last_used_at > stale


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer a b",
        "Token aimon_abc",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-token",
        "Bearer aimon_" + "x" * 43,
        "Bearer aimon_\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9",
    ],
)
def test_missing_malformed_and_unknown_tokens_get_401_json(runtime: AgentRuntime, header: str) -> None:
    client = APIClient()
    response = client.get("/api/v1/runtime", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="aimon"'


@pytest.mark.django_db
def test_no_authorization_header_gets_401(runtime: AgentRuntime) -> None:
    response = APIClient().get("/api/v1/runtime")
    assert response.status_code == 401
    assert response.json() == {
        "error": "not_authenticated",
        "detail": "Authentication credentials were not provided.",
    }


@pytest.mark.django_db
def test_a_token_names_its_own_runtime(runtime: AgentRuntime, other_runtime: AgentRuntime) -> None:
    _, mine = token_issue(runtime=runtime, actor=TEST_ACTOR)
    _, theirs = token_issue(runtime=other_runtime, actor=TEST_ACTOR)
    assert bearer_client(mine).get("/api/v1/runtime").json()["name"] == "agent-one"
    assert bearer_client(theirs).get("/api/v1/runtime").json()["name"] == "agent-two"


def test_the_authenticated_token_and_runtime_are_what_the_orm_reads(
    runtime: AgentRuntime, operator: object
) -> None:
    # token_authenticate builds both from one plain-SQL row: every field must match.
    AgentRuntime.objects.filter(pk=runtime.pk).update(owner=operator, description="ünïcode")
    _, raw = token_issue(runtime=runtime, actor=TEST_ACTOR, label="row")
    token = token_authenticate(raw)
    assert token is not None
    stored = RuntimeToken.objects.select_related("runtime").get(pk=token.pk)
    for field in RuntimeToken._meta.concrete_fields:
        assert getattr(token, field.attname) == getattr(stored, field.attname), field.name
    for field in AgentRuntime._meta.concrete_fields:
        assert getattr(token.runtime, field.attname) == getattr(stored.runtime, field.attname), field.name
    assert timezone.is_aware(token.created_at)
    assert timezone.is_aware(token.runtime.created_at)
    assert token.runtime.is_active is True


def test_an_inactive_runtimes_token_is_refused(runtime: AgentRuntime) -> None:
    _, raw = token_issue(runtime=runtime, actor=TEST_ACTOR, label="off")
    AgentRuntime.objects.filter(pk=runtime.pk).update(is_active=False)
    assert token_authenticate(raw) is None
