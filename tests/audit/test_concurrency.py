"""Concurrent writers must not fork the audit chain (A2).

audit_record() serialises writers on the chain head (an advisory lock on PostgreSQL), and
the unique prev_hash refuses a fork even if two writers ever read the same head.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import IntegrityError, transaction

from aimon_admin.audit.services import audit_chain_head, audit_verify_chain
from tests.audit.helpers import (
    assert_one_unforked_chain,
    database_for_new_process,
    event_row,
    raw_insert,
    record_events,
    run_in_new_process,
    run_writers,
)

THREADS = 8
EVENTS_PER_THREAD = 25


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_do_not_fork_the_chain_on_postgresql() -> None:  # A2
    record_events(3, prefix="before")
    existing = audit_chain_head()[0]

    errors = run_writers(THREADS, EVENTS_PER_THREAD)

    assert errors == []
    assert_one_unforked_chain(existing + THREADS * EVENTS_PER_THREAD, THREADS, EVENTS_PER_THREAD)


# The same writers in a new process, against a database file on SQLite. Django's SQLite
# test database is in memory with a shared cache, where a writer that finds the table
# locked fails at once ("database table is locked") instead of waiting out the busy
# timeout; the product runs SQLite from a file (WAL, BEGIN IMMEDIATE, 20 s timeout), which
# is what the new process gets. On PostgreSQL it uses the test database itself.
WRITERS_IN_A_NEW_PROCESS = """
import sys

import django

django.setup()

from tests.audit.helpers import assert_one_unforked_chain, run_writers

threads, per_thread, expected = (int(arg) for arg in sys.argv[1:])
errors = run_writers(threads, per_thread)
assert errors == [], [repr(error) for error in errors[:5]]
assert_one_unforked_chain(expected, threads, per_thread)
print("chain intact")
"""


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_in_a_new_process_do_not_fork_the_chain(tmp_path: Path) -> None:  # A2
    record_events(3, prefix="before")
    expected = audit_chain_head()[0] + THREADS * EVENTS_PER_THREAD

    child = run_in_new_process(
        ["-c", WRITERS_IN_A_NEW_PROCESS, str(THREADS), str(EVENTS_PER_THREAD), str(expected)],
        database_for_new_process(tmp_path),
    )

    assert child.returncode == 0, child.stderr[-3000:]
    assert "chain intact" in child.stdout


@pytest.mark.django_db
def test_a_second_event_on_the_same_prev_hash_is_refused() -> None:  # A2
    # A fork is two events claiming the same predecessor; the database refuses the second.
    first, second = record_events(2)
    fork = event_row(second, seq=3, subject="fork", hash="c" * 64)  # prev_hash: first.hash, taken

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_insert(fork)

    assert first.hash == second.prev_hash
    assert audit_verify_chain() == (2, None)


@pytest.mark.django_db
def test_a_second_event_on_the_same_seq_is_refused() -> None:  # A2
    [only] = record_events(1)
    duplicate = event_row(only, prev_hash="d" * 64, hash="e" * 64)  # seq 1, taken

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_insert(duplicate)

    assert audit_verify_chain() == (1, None)
