"""A runtime disabled, enabled and retired: each a row change with its audit event (A1, A3);
never a deleted row; a retired runtime's tokens revoked at once.

Disabled: its tokens are refused until it is enabled again (reversible).
Retired: disabled for good, its tokens revoked, its settings frozen, its name kept.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import token_authenticate
from aimon_admin.runtimes.services import (
    RuntimeRetiredError,
    runtime_disable,
    runtime_enable,
    runtime_retire,
    runtime_update_settings,
    token_issue,
    token_revoke,
)
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


def test_disable_refuses_the_tokens_and_records_it(runtime: AgentRuntime, operator: User) -> None:
    # A1: a runtime disabled is an event naming who and how many tokens it stopped.
    _, raw = token_issue(runtime=runtime, actor=TEST_ACTOR)
    assert token_authenticate(raw) is not None

    assert runtime_disable(runtime=runtime, actor=Actor.for_user(operator)) is True

    runtime.refresh_from_db()
    assert runtime.is_active is False
    assert runtime.retired_at is None
    assert token_authenticate(raw) is None
    [event] = events(AuditAction.RUNTIME_DISABLED)
    assert (event.actor, event.runtime, event.subject, event.level) == (
        operator,
        runtime,
        "agent-one",
        AuditLevel.WARNING,
    )
    assert event.details == {"active_tokens": 1}


def test_disabling_twice_records_once(runtime: AgentRuntime) -> None:
    assert runtime_disable(runtime=runtime, actor=TEST_ACTOR) is True
    assert runtime_disable(runtime=runtime, actor=TEST_ACTOR) is False
    assert len(events(AuditAction.RUNTIME_DISABLED)) == 1


def test_enable_accepts_the_same_tokens_again(runtime: AgentRuntime, operator: User) -> None:
    # Disabled is reversible: the tokens were never revoked.
    _, raw = token_issue(runtime=runtime, actor=TEST_ACTOR)
    runtime_disable(runtime=runtime, actor=TEST_ACTOR)

    assert runtime_enable(runtime=runtime, actor=Actor.for_user(operator)) is True

    assert token_authenticate(raw) is not None
    [event] = events(AuditAction.RUNTIME_ENABLED)
    assert (event.actor, event.runtime, event.level) == (operator, runtime, AuditLevel.INFO)
    assert runtime_enable(runtime=runtime, actor=TEST_ACTOR) is False
    assert len(events(AuditAction.RUNTIME_ENABLED)) == 1


def test_retire_revokes_every_token_and_keeps_the_row(runtime: AgentRuntime, operator: User) -> None:
    # A retired runtime's tokens stop at once, and stay stopped: they are revoked.
    live, raw = token_issue(runtime=runtime, actor=TEST_ACTOR, label="live")
    spare, _ = token_issue(runtime=runtime, actor=TEST_ACTOR, label="spare")
    old, _ = token_issue(runtime=runtime, actor=TEST_ACTOR, label="old")
    token_revoke(token=old, actor=TEST_ACTOR)

    revoked = runtime_retire(runtime=runtime, actor=Actor.for_user(operator))

    assert [token.pk for token in revoked] == [live.pk, spare.pk]
    runtime.refresh_from_db()
    assert (runtime.is_active, runtime.retired_by) == (False, operator)
    assert runtime.retired_at is not None
    assert token_authenticate(raw) is None
    for token in (live, spare):
        token.refresh_from_db()
        assert (token.revoked_by, token.revoked_at) == (operator, runtime.retired_at)
    old.refresh_from_db()
    assert old.revoked_by is None  # revoked before, by the test's system actor: left as it was
    [event] = events(AuditAction.RUNTIME_RETIRED)
    assert (event.actor, event.runtime, event.level) == (operator, runtime, AuditLevel.WARNING)
    assert event.details == {
        "was_active": True,
        "tokens_revoked": [
            {"token_id": live.pk, "prefix": live.prefix, "label": "live"},
            {"token_id": spare.pk, "prefix": spare.prefix, "label": "spare"},
        ],
    }
    assert AgentRuntime.objects.filter(name="agent-one").exists()


def test_a_disabled_runtime_can_be_retired_and_says_it_was_not_active(runtime: AgentRuntime) -> None:
    runtime_disable(runtime=runtime, actor=TEST_ACTOR)
    runtime_retire(runtime=runtime, actor=TEST_ACTOR)
    [event] = events(AuditAction.RUNTIME_RETIRED)
    assert event.details["was_active"] is False


def test_a_retired_runtime_is_never_enabled_changed_or_given_a_token(runtime: AgentRuntime) -> None:
    runtime_retire(runtime=runtime, actor=TEST_ACTOR)
    before = AuditEvent.objects.count()
    with pytest.raises(RuntimeRetiredError):
        runtime_enable(runtime=runtime, actor=TEST_ACTOR)
    with pytest.raises(RuntimeRetiredError):
        runtime_disable(runtime=runtime, actor=TEST_ACTOR)
    with pytest.raises(RuntimeRetiredError):
        runtime_retire(runtime=runtime, actor=TEST_ACTOR)
    with pytest.raises(RuntimeRetiredError):
        token_issue(runtime=runtime, actor=TEST_ACTOR)
    with pytest.raises(RuntimeRetiredError):
        runtime_update_settings(
            runtime=runtime,
            ceiling="READ_ONLY",
            exempt_at_or_below="READ_ONLY",
            owner=None,
            description="again",
            actor=TEST_ACTOR,
        )
    runtime.refresh_from_db()
    assert (runtime.is_active, runtime.ceiling, runtime.description) == (False, "MUTATING", "")
    assert not RuntimeToken.objects.filter(runtime=runtime).exists()
    assert AuditEvent.objects.count() == before


def test_saving_settings_never_enables_a_disabled_runtime(runtime: AgentRuntime) -> None:
    # Whether tokens are accepted is not a setting: the settings form cannot undo a disable.
    runtime_disable(runtime=runtime, actor=TEST_ACTOR)
    runtime_update_settings(
        runtime=runtime,
        ceiling="READ_ONLY",
        exempt_at_or_below="READ_ONLY",
        owner=None,
        description="",
        actor=TEST_ACTOR,
    )
    runtime.refresh_from_db()
    assert (runtime.is_active, runtime.ceiling) == (False, "READ_ONLY")


def test_a_retired_runtime_is_inactive_by_constraint(runtime: AgentRuntime) -> None:
    runtime.retired_at = timezone.now()
    with pytest.raises(ValidationError, match="A retired runtime cannot be active"):
        runtime.full_clean()
    table = AgentRuntime._meta.db_table
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET retired_at = %s, is_active = %s WHERE id = %s",
            [timezone.now(), True, runtime.pk],
        )


def test_who_retired_needs_when(runtime: AgentRuntime, operator: User) -> None:
    runtime.is_active = False
    runtime.retired_by = operator
    with pytest.raises(ValidationError, match="once it is retired"):
        runtime.full_clean()
    table = AgentRuntime._meta.db_table
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET is_active = %s, retired_by_id = %s WHERE id = %s",
            [False, operator.pk, runtime.pk],
        )
