"""Concurrent writers must not fork the audit chain (A2).

audit_record() serialises writers on the chain head (an advisory lock on PostgreSQL), and
the unique prev_hash refuses a fork even if two writers ever read the same head.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from aimon_admin.audit.services import audit_chain_head, audit_verify_chain
from tests.audit.helpers import (
    assert_one_unforked_chain,
    event_row,
    raw_insert,
    record_events,
    run_writers,
)

THREADS = 8
EVENTS_PER_THREAD = 25


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_do_not_fork_the_chain() -> None:  # A2
    # Each writer thread its own connection: on PostgreSQL they queue on the advisory lock,
    # on SQLite (a file, as the product runs it) on BEGIN IMMEDIATE within the busy timeout.
    record_events(3, prefix="before")
    existing = audit_chain_head()[0]

    errors = run_writers(THREADS, EVENTS_PER_THREAD)

    assert errors == []
    assert_one_unforked_chain(existing + THREADS * EVENTS_PER_THREAD, THREADS, EVENTS_PER_THREAD)


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
