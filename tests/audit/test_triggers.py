"""The database itself refuses to change or remove audit events, on SQLite and PostgreSQL (A2).

Each refused statement runs in its own atomic block, so on PostgreSQL its failure rolls
back to a savepoint instead of poisoning the test's transaction.
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from aimon_admin.audit import triggers
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from tests.audit.helpers import execute, json_param, record_events

pytestmark = pytest.mark.django_db

REFUSED = "append-only"


def snapshot() -> list[tuple[object, ...]]:
    return list(AuditEvent.objects.order_by("seq").values_list("seq", "subject", "details", "hash"))


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_auditevent SET subject = 'rewritten' WHERE seq = 2",
        "UPDATE audit_auditevent SET level = 'INFO'",
        "UPDATE audit_auditevent SET seq = seq WHERE seq = 1",
        "UPDATE audit_auditevent SET hash = prev_hash WHERE seq = 3",
    ],
    ids=["one-column", "every-row", "no-op-value", "hash"],
)
def test_raw_update_is_refused(five_events: list[AuditEvent], sql: str) -> None:  # A2
    before = snapshot()

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(sql)

    assert snapshot() == before


def test_raw_update_of_details_is_refused(five_events: list[AuditEvent]) -> None:  # A2
    before = snapshot()

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(f"UPDATE audit_auditevent SET details = {json_param()} WHERE seq = 2", ['{"forged": 1}'])

    assert snapshot() == before


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM audit_auditevent WHERE seq = 3",
        "DELETE FROM audit_auditevent WHERE seq = 5",
        "DELETE FROM audit_auditevent",
    ],
    ids=["middle", "last", "all"],
)
def test_raw_delete_is_refused(five_events: list[AuditEvent], sql: str) -> None:  # A2
    before = snapshot()

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(sql)

    assert snapshot() == before
    assert audit_verify_chain() == (5, None)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_truncate_is_refused_on_postgresql() -> None:  # A2
    # Committed first: inside the events' own transaction PostgreSQL would refuse the TRUNCATE
    # for another reason (pending foreign-key checks), which would prove nothing.
    record_events(5)

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute("TRUNCATE audit_auditevent")
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute("TRUNCATE audit_auditevent CASCADE")

    assert AuditEvent.objects.count() == 5


def test_the_refusal_comes_from_the_triggers(five_events: list[AuditEvent]) -> None:  # A2
    # Without the triggers the same statement goes through; installed again, it is refused.
    sql = "UPDATE audit_auditevent SET subject = 'rewritten' WHERE seq = 2"
    triggers.drop(connection)
    try:
        assert execute(sql) == 1
    finally:
        triggers.install(connection)
    assert AuditEvent.objects.get(seq=2).subject == "rewritten"

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute("UPDATE audit_auditevent SET subject = 'again' WHERE seq = 2")
    assert AuditEvent.objects.get(seq=2).subject == "rewritten"
