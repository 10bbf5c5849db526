"""Fixtures for the audit tests: a short chain of real events, and the triggers stepped aside."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from aimon_admin.audit import triggers
from aimon_admin.audit.models import AuditEvent
from tests.audit.helpers import record_events


@pytest.fixture
def five_events(db: None) -> list[AuditEvent]:
    """A log of exactly five events, seq 1..5 (the test database starts with none)."""
    assert not AuditEvent.objects.exists(), "the audit tests expect an empty log to start from"
    events = record_events(5)
    assert [event.seq for event in events] == [1, 2, 3, 4, 5]
    return events


@pytest.fixture
def triggers_dropped(db: None) -> Iterator[None]:
    """The append-only triggers removed for one test (to tamper behind their back), then restored."""
    triggers.drop(connection)
    try:
        yield
    finally:
        triggers.install(connection)
