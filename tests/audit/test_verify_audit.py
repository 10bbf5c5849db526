"""`manage.py verify_audit` passes an intact log and names the first bad event of a tampered one (A2).

The tampering is done the way an attacker with database access would: raw SQL, with the
append-only triggers dropped first (the `triggers_dropped` fixture re-installs them).
Every tamper test first shows the same log verifying clean, so a command that skipped
verification would fail it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from aimon_admin.audit import chain, triggers
from aimon_admin.audit.models import AuditEvent
from tests.audit.helpers import (
    database_for_new_process,
    event_row,
    execute,
    json_param,
    raw_insert,
    record_events,
    run_in_new_process,
)

EVENTS = 5


def verify() -> str:
    out = StringIO()
    call_command("verify_audit", stdout=out)
    return out.getvalue()


def assert_clean(count: int = EVENTS) -> None:
    assert f"audit chain OK: {count} events verified" in verify()


def assert_broken_at(seq: int) -> str:
    with pytest.raises(CommandError, match=rf"audit chain BROKEN at event seq={seq} ") as raised:
        verify()
    return str(raised.value)


@pytest.fixture
def log(five_events: list[AuditEvent]) -> list[AuditEvent]:
    assert_clean()
    return five_events


# --- an intact log ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_verify_audit_passes_an_empty_log() -> None:  # A2
    assert_clean(0)


@pytest.mark.django_db
def test_verify_audit_passes_an_intact_log_and_counts_its_events(five_events: list[AuditEvent]) -> None:  # A2
    assert verify().strip() == "audit chain OK: 5 events verified"

    record_events(2, prefix="more")

    assert_clean(7)


# --- tampering caught ---------------------------------------------------------------------------

COLUMN_EDITS: list[tuple[str, str]] = [
    ("subject", "someone-else"),
    ("actor_label", "mallory"),
    ("action", "LOGOUT"),
    ("level", "WARNING"),
    ("channel", "CLI"),
    ("session_key", "another-session"),
    ("request_id", "req-forged"),
]


@pytest.mark.parametrize(("column", "value"), COLUMN_EDITS, ids=[column for column, _ in COLUMN_EDITS])
def test_an_edited_column_is_caught_at_its_event(
    log: list[AuditEvent], triggers_dropped: None, column: str, value: str
) -> None:  # A2
    assert execute(f"UPDATE audit_auditevent SET {column} = %s WHERE seq = 3", [value]) == 1

    message = assert_broken_at(3)

    assert f"(id {log[2].pk})" in message
    assert "altered" in message


def test_edited_details_are_caught(log: list[AuditEvent], triggers_dropped: None) -> None:  # A2
    forged = json.dumps({**log[1].details, "number": 200})
    assert execute(f"UPDATE audit_auditevent SET details = {json_param()} WHERE seq = 2", [forged]) == 1

    assert_broken_at(2)


def test_an_edited_timestamp_is_caught(log: list[AuditEvent], triggers_dropped: None) -> None:  # A2
    earlier = connection.ops.adapt_datetimefield_value(log[3].created_at.replace(year=2020))
    assert execute("UPDATE audit_auditevent SET created_at = %s WHERE seq = 4", [earlier]) == 1

    assert_broken_at(4)


def test_an_edited_hash_is_caught(log: list[AuditEvent], triggers_dropped: None) -> None:  # A2
    assert execute("UPDATE audit_auditevent SET hash = %s WHERE seq = 2", ["e" * 64]) == 1

    assert "hash does not match" in assert_broken_at(2)


def test_an_edit_with_its_hash_recomputed_is_caught_at_the_next_event(
    log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2: knowing the formula is not enough to rewrite history
    event = AuditEvent.objects.get(seq=2)
    event.subject = "someone-else"
    rehashed = chain.compute_hash(event.content())
    sql = "UPDATE audit_auditevent SET subject = %s, hash = %s WHERE seq = 2"
    assert execute(sql, [event.subject, rehashed]) == 1

    assert "prev_hash" in assert_broken_at(3)


def test_a_deleted_middle_event_is_caught(log: list[AuditEvent], triggers_dropped: None) -> None:  # A2
    assert execute("DELETE FROM audit_auditevent WHERE seq = 3") == 1

    assert "expected seq 3" in assert_broken_at(4)


def test_a_deleted_first_event_is_caught(log: list[AuditEvent], triggers_dropped: None) -> None:  # A2
    assert execute("DELETE FROM audit_auditevent WHERE seq = 1") == 1

    assert "expected seq 1" in assert_broken_at(2)


def test_a_deleted_middle_event_with_later_seqs_closed_up_is_caught(
    log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    assert execute("DELETE FROM audit_auditevent WHERE seq = 3") == 1
    # Two steps so no intermediate row collides with the unique seq.
    assert execute("UPDATE audit_auditevent SET seq = seq + 1000 WHERE seq > 3") == 2
    assert execute("UPDATE audit_auditevent SET seq = seq - 1001 WHERE seq > 1000") == 2

    assert "prev_hash" in assert_broken_at(3)


def test_two_events_with_their_seqs_swapped_are_caught(
    log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    assert execute("UPDATE audit_auditevent SET seq = 1000 WHERE seq = 2") == 1
    assert execute("UPDATE audit_auditevent SET seq = 2 WHERE seq = 3") == 1
    assert execute("UPDATE audit_auditevent SET seq = 3 WHERE seq = 1000") == 1

    assert_broken_at(2)


def test_a_forged_event_appended_with_a_plausible_hash_is_caught(
    log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    head = log[-1]
    forged = event_row(head, seq=6, subject="forged", prev_hash=head.hash)
    # A well-formed SHA-256 over the content, but not the chain's formula.
    forged["hash"] = hashlib.sha256(
        json.dumps({**forged, "created_at": str(head.created_at)}).encode()
    ).hexdigest()
    assert raw_insert(forged) == 1

    message = assert_broken_at(6)

    assert "(6 events read)" in message


def test_a_forged_event_cannot_take_a_real_events_link(
    log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    # Splicing an event in after seq 2 means reusing event 2's hash as prev_hash, which
    # event 3 already holds: the unique prev_hash refuses the second link (no fork).
    forged = event_row(log[1], seq=1000, subject="forged", prev_hash=log[1].hash, hash="f" * 64)

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_insert(forged)

    assert_clean()


def test_a_forged_event_spliced_into_the_middle_is_caught(
    log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    # The forger makes room at seq 3, re-points the old event 3 at the forgery and writes the
    # forgery with a hash that is correct for its own content: only the chain after it tells.
    assert execute("UPDATE audit_auditevent SET seq = seq + 1000 WHERE seq >= 3") == 3
    assert execute("UPDATE audit_auditevent SET seq = seq - 999 WHERE seq > 1000") == 3
    forged_event = AuditEvent.objects.get(seq=2)
    forged_event.seq = 3
    forged_event.subject = "forged"
    forged_event.prev_hash = log[1].hash
    forged_hash = chain.compute_hash(forged_event.content())
    assert execute("UPDATE audit_auditevent SET prev_hash = %s WHERE seq = 4", [forged_hash]) == 1
    assert raw_insert(event_row(forged_event, hash=forged_hash)) == 1

    assert_broken_at(4)


# --- through manage.py, as an operator or a cron job runs it -------------------------------------


def manage_py_verify_audit(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `manage.py verify_audit` in a new process against what this test committed."""
    return run_in_new_process(["manage.py", "verify_audit"], database_for_new_process(tmp_path))


@pytest.mark.django_db(transaction=True)
def test_manage_py_verify_audit_exits_zero_when_intact_and_non_zero_naming_the_bad_event(
    tmp_path: Path,
) -> None:  # A2
    record_events(4)

    intact = manage_py_verify_audit(tmp_path)
    assert intact.returncode == 0, intact.stderr
    assert "audit chain OK: 4 events verified" in intact.stdout

    triggers.drop(connection)
    try:
        assert execute("UPDATE audit_auditevent SET subject = 'someone-else' WHERE seq = 2") == 1
    finally:
        triggers.install(connection)

    broken = manage_py_verify_audit(tmp_path)
    assert broken.returncode != 0
    assert "audit chain BROKEN at event seq=2 " in broken.stderr
    assert "OK" not in broken.stdout
