"""Runtime settings (T6 ceiling, T7 gate threshold) and their audit events."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import RuntimeExistsError, runtime_create, runtime_update_settings
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db


def test_a_new_runtime_defaults_to_mutating_ceiling_and_read_only_threshold() -> None:
    # T6/T7 defaults: ceiling MUTATING, exempt_at_or_below READ_ONLY.
    runtime = runtime_create(name="fresh", actor=TEST_ACTOR)
    assert (runtime.ceiling, runtime.exempt_at_or_below) == ("MUTATING", "READ_ONLY")
    event = AuditEvent.objects.get(action=AuditAction.RUNTIME_CREATED)
    assert event.runtime == runtime
    assert event.details["ceiling"] == "MUTATING"


def test_runtime_names_are_unique_and_checked() -> None:
    runtime_create(name="fresh", actor=TEST_ACTOR)
    with pytest.raises(RuntimeExistsError):
        runtime_create(name="fresh", actor=TEST_ACTOR)
    with pytest.raises(ValidationError):
        runtime_create(name="Has Spaces", actor=TEST_ACTOR)


def test_an_unknown_level_is_refused_not_defaulted() -> None:
    with pytest.raises(ValueError, match="WRITE"):
        runtime_create(name="fresh", ceiling="WRITE", actor=TEST_ACTOR)
    assert not AgentRuntime.objects.filter(name="fresh").exists()


def test_settings_change_records_before_and_after(runtime: AgentRuntime, operator: User) -> None:
    # A1: runtime setting changes are events with what changed.
    changed = runtime_update_settings(
        runtime=runtime,
        ceiling="READ_ONLY",
        exempt_at_or_below="READ_ONLY",
        owner=operator,
        description="",
        actor=TEST_ACTOR,
    )
    assert changed is True
    runtime.refresh_from_db()
    assert runtime.ceiling == "READ_ONLY"
    event = AuditEvent.objects.get(action=AuditAction.RUNTIME_SETTINGS_CHANGED)
    assert event.details == {
        "changed": ["ceiling", "owner"],
        "before": {"ceiling": "MUTATING", "owner": None},
        "after": {"ceiling": "READ_ONLY", "owner": "olivia"},
    }


def test_saving_unchanged_settings_records_nothing(runtime: AgentRuntime) -> None:
    changed = runtime_update_settings(
        runtime=runtime,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        owner=None,
        description="",
        actor=TEST_ACTOR,
    )
    assert changed is False
    assert not AuditEvent.objects.filter(action=AuditAction.RUNTIME_SETTINGS_CHANGED).exists()


@pytest.mark.parametrize("column", ["ceiling", "exempt_at_or_below"])
def test_the_database_refuses_an_unknown_level(runtime: AgentRuntime, column: str) -> None:
    runtime.__dict__[column] = "SOMETIMES"
    with pytest.raises(ValidationError):
        runtime.full_clean()
    table = AgentRuntime._meta.db_table
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s", ["SOMETIMES", runtime.pk])
