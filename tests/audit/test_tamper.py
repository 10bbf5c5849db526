"""Every kind of tampering, done by raw SQL with the append-only triggers dropped, is caught (A2).

Edit, delete, reorder, insert, plus cutting the tail and re-chaining everything after an
edit, each checked by a run from the last checkpoint and by a full run, on whichever database
the suite runs on (SQLite and PostgreSQL). The log is 5 events, a verification (seq 6, whose
checkpoint is also kept outside the log), then 5 more (7..11): the tampering lands after the
checkpoint, where a run from it must look.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aimon_admin.audit import chain
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import audit_chain_check, audit_chain_verify, checkpoint_forget
from tests.audit.helpers import event_row, execute, json_param, raw_insert, record_events
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db


@pytest.fixture
def verified_log(
    five_events: list[AuditEvent], django_capture_on_commit_callbacks: Callable[..., Any]
) -> Iterator[list[AuditEvent]]:
    checkpoint_forget()
    with django_capture_on_commit_callbacks(execute=True):
        audit_chain_verify(actor=TEST_ACTOR)
    events = [*five_events, AuditEvent.objects.get(seq=6), *record_events(5, prefix="later")]
    assert [e.seq for e in events] == list(range(1, 12))
    assert audit_chain_check().ok
    assert audit_chain_check(full=True).ok
    yield events
    checkpoint_forget()


def edit_a_column(events: list[AuditEvent]) -> int:
    return execute("UPDATE audit_auditevent SET actor_label = 'mallory' WHERE seq = 8")


def edit_details(events: list[AuditEvent]) -> int:
    forged = json.dumps({**events[8].details, "changed": ["owner"]})
    return execute(f"UPDATE audit_auditevent SET details = {json_param()} WHERE seq = 9", [forged])


def delete_one(events: list[AuditEvent]) -> int:
    return execute("DELETE FROM audit_auditevent WHERE seq = 8")


def delete_and_close_the_gap(events: list[AuditEvent]) -> int:
    execute("DELETE FROM audit_auditevent WHERE seq = 8")
    execute("UPDATE audit_auditevent SET seq = seq + 1000 WHERE seq > 8")
    return execute("UPDATE audit_auditevent SET seq = seq - 1001 WHERE seq > 1000")


def reorder_by_swapping_seqs(events: list[AuditEvent]) -> int:
    execute("UPDATE audit_auditevent SET seq = 1000 WHERE seq = 8")
    execute("UPDATE audit_auditevent SET seq = 8 WHERE seq = 9")
    return execute("UPDATE audit_auditevent SET seq = 9 WHERE seq = 1000")


def insert_in_the_middle(events: list[AuditEvent]) -> int:
    # Room at seq 8, the old 8 re-pointed at a forgery whose own hash is right for its content.
    execute("UPDATE audit_auditevent SET seq = seq + 1000 WHERE seq >= 8")
    execute("UPDATE audit_auditevent SET seq = seq - 999 WHERE seq > 1000")
    forged = AuditEvent.objects.get(seq=7)
    forged.seq, forged.subject, forged.prev_hash = 8, "forged", events[6].hash
    forged_hash = chain.compute_hash(forged.content())
    execute("UPDATE audit_auditevent SET prev_hash = %s WHERE seq = 9", [forged_hash])
    return raw_insert(event_row(forged, hash=forged_hash))


def truncate_the_tail(events: list[AuditEvent]) -> int:
    return execute("DELETE FROM audit_auditevent WHERE seq >= 5")


def rechain_after_an_edit(events: list[AuditEvent]) -> int:
    """Edit event 4, then recompute every hash after it, checkpoint event included."""
    hashes = {3: events[2].hash}
    for event in AuditEvent.objects.filter(seq__gte=4).order_by("seq"):
        body = event.content()
        body["prev_hash"] = hashes[event.seq - 1]
        if event.seq == 4:
            body["subject"] = "rewritten"
        if event.action == AuditAction.AUDIT_CHAIN_VERIFIED:
            body["details"] = {**body["details"], "verified_through_hash": hashes[5]}
        hashes[event.seq] = chain.compute_hash(body)
        execute(
            f"UPDATE audit_auditevent SET subject = %s, prev_hash = %s, hash = %s, details = {json_param()} "
            "WHERE seq = %s",
            [body["subject"], body["prev_hash"], hashes[event.seq], json.dumps(body["details"]), event.seq],
        )
    return len(hashes) - 1


TAMPERING = [
    (edit_a_column, 8),
    (edit_details, 9),
    (delete_one, 9),
    (delete_and_close_the_gap, 8),
    (reorder_by_swapping_seqs, 8),
    (insert_in_the_middle, 9),
    (truncate_the_tail, 5),
    (rechain_after_an_edit, 5),
]


@pytest.mark.parametrize(("tamper", "first_bad_seq"), TAMPERING, ids=[t.__name__ for t, _ in TAMPERING])
@pytest.mark.parametrize("full", [False, True], ids=["from-checkpoint", "full"])
def test_tampering_is_caught_and_recorded_as_broken(
    verified_log: list[AuditEvent], triggers_dropped: None, tamper: Callable, first_bad_seq: int, full: bool
) -> None:  # A2
    assert tamper(verified_log) >= 1

    result = audit_chain_verify(actor=TEST_ACTOR, full=full)

    assert not result.ok
    assert result.problem is not None
    assert result.problem.seq == first_bad_seq
    assert result.event is not None
    assert (result.event.action, result.event.level) == (AuditAction.AUDIT_CHAIN_BROKEN, AuditLevel.WARNING)
    assert result.event.details["problem_seq"] == first_bad_seq


def test_the_same_log_untouched_verifies(
    verified_log: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    # The control for the table above: without tampering, both runs pass.
    assert audit_chain_verify(actor=TEST_ACTOR).ok
    assert audit_chain_verify(actor=TEST_ACTOR, full=True).ok
