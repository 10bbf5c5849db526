"""Runtime constraints: text a person fills has a limit, in the form, full_clean() and the
database."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from aimon_admin.runtimes.forms import RuntimeCreateForm
from aimon_admin.runtimes.models import RUNTIME_DESCRIPTION_MAX, AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

MESSAGE = f"A description is at most {RUNTIME_DESCRIPTION_MAX} characters."


def test_a_description_at_the_limit_is_kept_and_one_past_it_refused_by_full_clean(
    runtime: AgentRuntime,
) -> None:
    runtime.description = "d" * RUNTIME_DESCRIPTION_MAX
    runtime.full_clean()
    runtime.description += "d"
    with pytest.raises(ValidationError) as refused:
        runtime.full_clean()
    assert MESSAGE in refused.value.messages


def test_the_service_refuses_a_description_past_the_limit() -> None:
    # A 100,000-character description was once saved.
    with pytest.raises(ValidationError):
        runtime_create(name="wordy", description="d" * 100_000, actor=TEST_ACTOR)
    assert not AgentRuntime.objects.filter(name="wordy").exists()


def test_the_database_refuses_a_description_past_the_limit(runtime: AgentRuntime) -> None:
    with pytest.raises(IntegrityError) as refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {AgentRuntime._meta.db_table} SET description = %s WHERE id = %s",  # nosec B608
            ["d" * (RUNTIME_DESCRIPTION_MAX + 1), runtime.pk],
        )
    assert "runtime_description_length" in str(refused.value)


def test_the_form_refuses_a_description_past_the_limit() -> None:
    form = RuntimeCreateForm(
        {
            "name": "wordy",
            "ceiling": "MUTATING",
            "exempt_at_or_below": "READ_ONLY",
            "description": "d" * (RUNTIME_DESCRIPTION_MAX + 1),
        }
    )
    too_long = RUNTIME_DESCRIPTION_MAX + 1
    assert form.errors["description"] == [
        f"Ensure this value has at most {RUNTIME_DESCRIPTION_MAX} characters (it has {too_long})."
    ]
