"""`manage.py verify_audit` passes an intact log and names the first bad event of a tampered one (A2);
with --file it does the same for an exported JSON Lines file, outside the database.

The tampering is done the way an attacker with database access would: raw SQL, with the
append-only triggers dropped first (the `triggers_dropped` fixture re-installs them).
Every tamper test first shows the same log verifying clean, so a command that skipped
verification would fail it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from aimon_admin.audit import chain, triggers
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import checkpoint_forget
from aimon_admin.core.context import Channel
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
    return run_in_new_process(["manage.py", "verify_audit"], database_for_new_process())


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


# --- --record and --from-checkpoint ---------------------------------------------------------------


@pytest.fixture
def no_checkpoint_outside_the_log() -> Iterator[None]:
    checkpoint_forget()
    yield
    checkpoint_forget()


def test_record_writes_the_outcome_as_a_command_line_event(
    log: list[AuditEvent], no_checkpoint_outside_the_log: None
) -> None:  # A2
    out = StringIO()
    call_command("verify_audit", "--record", stdout=out)

    event = AuditEvent.objects.get(seq=6)
    assert "recorded as event seq=6 (AUDIT_CHAIN_VERIFIED)" in out.getvalue()
    assert "audit chain OK: 5 events verified" in out.getvalue()
    assert (event.action, event.channel, event.details["verified_through_seq"]) == (
        AuditAction.AUDIT_CHAIN_VERIFIED,
        Channel.CLI,
        5,
    )
    assert event.actor_label.startswith("cli:")


def test_record_on_a_broken_chain_writes_a_warning_and_still_exits_non_zero(
    log: list[AuditEvent], triggers_dropped: None, no_checkpoint_outside_the_log: None
) -> None:  # A2
    assert execute("UPDATE audit_auditevent SET subject = 'someone-else' WHERE seq = 3") == 1

    with pytest.raises(CommandError, match=r"audit chain BROKEN at event seq=3 "):
        call_command("verify_audit", "--record", stdout=StringIO())

    event = AuditEvent.objects.get(seq=6)
    assert (event.action, event.level, event.details["problem_seq"]) == (
        AuditAction.AUDIT_CHAIN_BROKEN,
        AuditLevel.WARNING,
        3,
    )


def test_from_checkpoint_reads_only_what_came_after_it(
    log: list[AuditEvent], no_checkpoint_outside_the_log: None
) -> None:  # A2
    call_command("verify_audit", "--record", stdout=StringIO())  # seq 6, checkpoint at 5
    record_events(2, prefix="later")  # 7, 8
    out = StringIO()

    call_command("verify_audit", "--from-checkpoint", stdout=out)

    assert "audit chain OK: 8 events verified (3 read after the checkpoint at seq=5)" in out.getvalue()


# --- --file: an exported JSON Lines file ----------------------------------------------------------


def export_line(event: AuditEvent | dict[str, object], **overrides: object) -> str:
    """One line of the export format: `content()` plus "hash", sorted keys, UTF-8 as is."""
    body = {**event.content(), "hash": event.hash} if isinstance(event, AuditEvent) else dict(event)
    body.update(overrides)
    return json.dumps(body, ensure_ascii=False, sort_keys=True)


def write_export(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def verify_file(path: Path) -> str:
    out = StringIO()
    call_command("verify_audit", "--file", str(path), stdout=out)
    return out.getvalue()


def assert_file_broken_at(path: Path, where: str) -> str:
    with pytest.raises(CommandError, match=rf"export .* BROKEN at {re.escape(where)}") as raised:
        verify_file(path)
    return str(raised.value)


@pytest.fixture
def events(five_events: list[AuditEvent]) -> list[AuditEvent]:
    return five_events


def test_a_complete_export_verifies_as_a_chain_from_genesis(
    events: list[AuditEvent], tmp_path: Path
) -> None:  # A2
    path = write_export(tmp_path / "all.jsonl", [export_line(e) for e in events])

    out = verify_file(path)

    assert "OK: 5 events, seq 1..5, a complete chain from genesis" in out
    assert "ünïcode ✓" in path.read_text(encoding="utf-8")


def test_a_filtered_export_reports_its_gaps_not_a_failure(
    events: list[AuditEvent], tmp_path: Path
) -> None:  # A2
    path = write_export(tmp_path / "filtered.jsonl", [export_line(events[i]) for i in (0, 1, 3)])

    out = verify_file(path)

    assert "OK: 3 events, seq 1..4, a filtered subset of the chain" in out
    assert "1 gap (seqs not in the file: 3)" in out  # it once said "1 gaps"


def test_an_export_starting_after_seq_1_is_a_subset_whose_first_link_is_not_checked(
    events: list[AuditEvent], tmp_path: Path
) -> None:  # A2
    path = write_export(tmp_path / "tail.jsonl", [export_line(e) for e in events[2:]])

    out = verify_file(path)

    assert "OK: 3 events, seq 3..5, a filtered subset" in out
    assert "starts at seq 3" in out


def test_an_empty_export_is_ok(tmp_path: Path, db: None) -> None:  # A2
    path = write_export(tmp_path / "empty.jsonl", [])

    assert "OK: empty" in verify_file(path)


def test_an_edited_line_is_caught_naming_its_line(events: list[AuditEvent], tmp_path: Path) -> None:  # A2
    lines = [export_line(e) for e in events]
    lines[2] = export_line(events[2], subject="someone-else")
    path = write_export(tmp_path / "edited.jsonl", lines)

    message = assert_file_broken_at(path, "line 3 (seq=3): hash does not match")

    assert "(2 good lines before it)" in message


def test_an_edited_line_with_its_hash_recomputed_is_caught_at_the_next_line(
    events: list[AuditEvent], tmp_path: Path
) -> None:  # A2
    forged = dict(events[1].content(), subject="someone-else")
    lines = [export_line(e) for e in events]
    lines[1] = export_line(forged, hash=chain.compute_hash(forged))
    path = write_export(tmp_path / "rehashed.jsonl", lines)

    assert_file_broken_at(path, "line 3 (seq=3): prev_hash does not match the line before it")


def test_lines_out_of_order_are_caught(events: list[AuditEvent], tmp_path: Path) -> None:  # A2
    lines = [export_line(e) for e in events]
    lines[1], lines[2] = lines[2], lines[1]
    path = write_export(tmp_path / "swapped.jsonl", lines)

    assert_file_broken_at(path, "line 3 (seq=2): seq 2 after seq 3")


def test_a_forged_first_event_not_linked_to_genesis_is_caught(
    events: list[AuditEvent], tmp_path: Path
) -> None:  # A2
    forged = dict(events[0].content(), prev_hash="1" * 64)
    path = write_export(tmp_path / "genesis.jsonl", [export_line(forged, hash=chain.compute_hash(forged))])

    assert_file_broken_at(path, "line 1 (seq=1): the first event does not link to the genesis hash")


def test_a_forged_line_inserted_between_two_events_is_caught(
    events: list[AuditEvent], tmp_path: Path
) -> None:  # A2
    forged = dict(events[1].content(), seq=3, subject="forged", prev_hash=events[1].hash)
    renumbered = [export_line(e, seq=e.seq + 1) for e in events[2:]]
    lines = [
        export_line(events[0]),
        export_line(events[1]),
        export_line(forged, hash=chain.compute_hash(forged)),
    ]
    path = write_export(tmp_path / "inserted.jsonl", [*lines, *renumbered])

    assert_file_broken_at(path, "line 4 (seq=4): prev_hash does not match")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        ('{"seq": 1}', "missing"),
        ("", "blank line"),
    ],
    ids=["text", "array", "missing-keys", "blank"],
)
def test_a_line_that_is_not_an_exported_event_is_caught(
    events: list[AuditEvent], tmp_path: Path, line: str, problem: str
) -> None:  # A2
    path = write_export(tmp_path / "bad.jsonl", [export_line(events[0]), line, export_line(events[1])])

    assert problem in assert_file_broken_at(path, "line 2: ")


def test_an_extra_key_is_caught(events: list[AuditEvent], tmp_path: Path) -> None:  # A2
    path = write_export(tmp_path / "extra.jsonl", [export_line(events[0], note="hi")])

    assert "unexpected note" in assert_file_broken_at(path, "line 1: ")


def test_a_missing_file_is_a_clear_error(tmp_path: Path, db: None) -> None:  # A2
    with pytest.raises(CommandError, match="cannot read"):
        verify_file(tmp_path / "nope.jsonl")


def test_file_refuses_record(tmp_path: Path, db: None) -> None:  # A2
    with pytest.raises(CommandError, match="--file verifies a file only"):
        call_command("verify_audit", "--file", str(tmp_path / "x.jsonl"), "--record")


@pytest.mark.django_db
def test_manage_py_verify_audit_file_exits_non_zero_naming_the_bad_line(
    five_events: list[AuditEvent], tmp_path: Path
) -> None:  # A2: verified outside the product's database
    good = write_export(tmp_path / "good.jsonl", [export_line(e) for e in five_events])
    bad_lines = [export_line(e) for e in five_events]
    bad_lines[3] = export_line(five_events[3], level="INFO", action="LOGOUT")
    bad = write_export(tmp_path / "bad.jsonl", bad_lines)
    empty_database = f"sqlite:///{tmp_path / 'unused.sqlite3'}"

    ok = run_in_new_process(["manage.py", "verify_audit", "--file", str(good)], empty_database)
    broken = run_in_new_process(["manage.py", "verify_audit", "--file", str(bad)], empty_database)

    assert ok.returncode == 0, ok.stderr
    assert "a complete chain from genesis" in ok.stdout
    assert broken.returncode == 1
    assert "line 4 (seq=4): hash does not match the content" in broken.stderr
