"""Periodic verification from a checkpoint, its events, and the beat task (A2).

Tampering is done by raw SQL with the append-only triggers dropped (`triggers_dropped`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from aimon_admin.audit import chain, tasks
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_record
from aimon_admin.audit.verification import (
    CHECKPOINT_CHANGED,
    CHECKPOINT_MISSING,
    TASK_ACTOR_LABEL,
    audit_chain_check,
    audit_chain_verify,
    checkpoint_from_cache,
    last_verification,
    walk,
)
from aimon_admin.core.context import Channel, bound
from tests.audit.helpers import execute, json_param, record_events, run_in_new_process
from tests.audit.test_chain import Event, build_chain, content, rehash
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

OnCommit = Callable[..., Any]


def verify_and_commit(on_commit: OnCommit, *, full: bool = False) -> AuditEvent:
    """Run a recorded verification and let its commit hook keep the checkpoint outside the log."""
    with bound(channel=Channel.SYSTEM), on_commit(execute=True):
        result = audit_chain_verify(actor=TEST_ACTOR, full=full)
    assert result.event is not None
    return result.event


def tamper_truncate(from_seq: int) -> int:
    return execute("DELETE FROM audit_auditevent WHERE seq >= %s", [from_seq])


# --- walk() is verify_chain() with a starting point -----------------------------------------------


def _edited(events: list[Event]) -> list[Event]:
    event_id, body, digest = events[2]
    events[2] = (event_id, dict(body, subject="edited"), digest)
    return events


def _deleted(events: list[Event]) -> list[Event]:
    del events[1]
    return events


def _swapped(events: list[Event]) -> list[Event]:
    events[1], events[2] = events[2], events[1]
    return events


def _inserted(events: list[Event]) -> list[Event]:
    forged = content(3, events[1][2], subject="forged")
    events.insert(2, (None, forged, rehash(forged)))
    return events


@pytest.mark.parametrize(
    "tamper",
    [lambda e: e, _edited, _deleted, _swapped, _inserted],
    ids=["intact", "edited", "deleted", "swapped", "inserted"],
)
def test_walk_from_genesis_reports_exactly_what_verify_chain_reports(tamper: Callable) -> None:  # A2
    events = tamper(build_chain(6))

    state = walk(iter(events), after_seq=0, after_hash=chain.GENESIS_HASH)

    assert state.problem == chain.verify_chain(events)


@pytest.mark.parametrize(
    ("tamper", "read", "through_seq"),
    [(lambda e: e, 4, 6), (_edited, 1, 2), (_deleted, 1, 2), (_swapped, 1, 2), (_inserted, 2, 3)],
    ids=["intact", "edited", "deleted", "swapped", "inserted"],
)
def test_walk_from_a_checkpoint_reports_what_verify_chain_reports_and_where_it_stopped(
    tamper: Callable, read: int, through_seq: int
) -> None:  # A2
    # Checkpoint at seq 2: the walk reads from the third event on. The forged seq 3 links to
    # seq 2 and hashes right, so it passes; the real seq 3 after it does not.
    checkpoint_hash = build_chain(2)[1][2]
    events = tamper(build_chain(6))
    walked = events[2:]

    state = walk(iter(walked), after_seq=2, after_hash=checkpoint_hash)

    problem = chain.verify_chain(walked, after_seq=2, after_hash=checkpoint_hash)
    assert state.problem == problem
    good = walked[: read - (problem is not None)]
    assert (state.read, state.through_seq, state.through_hash) == (
        read,
        through_seq,
        good[-1][2] if good else checkpoint_hash,
    )


def test_walk_from_a_checkpoint_checks_the_link_to_it() -> None:  # A2
    events = build_chain(6)

    good = walk(iter(events[3:]), after_seq=3, after_hash=events[2][2])
    wrong_link = walk(iter(events[3:]), after_seq=3, after_hash="f" * 64)
    wrong_start = walk(iter(events[4:]), after_seq=3, after_hash=events[2][2])

    assert (good.problem, good.through_seq, good.through_hash, good.read) == (None, 6, events[5][2], 3)
    assert wrong_link.problem is not None
    assert (wrong_link.problem.seq, "prev_hash" in wrong_link.problem.problem) == (4, True)
    assert wrong_start.problem is not None
    assert "expected seq 4" in wrong_start.problem.problem


# --- a run and its event --------------------------------------------------------------------------


def test_last_verification_is_none_before_any_run(five_events: list[AuditEvent]) -> None:  # A2
    assert last_verification() is None


def test_a_run_on_an_intact_log_writes_a_verified_event_with_its_checkpoint(
    five_events: list[AuditEvent],
) -> None:  # A2
    with bound(channel=Channel.CLI, request_id="verify-1"):
        result = audit_chain_verify(actor=TEST_ACTOR)

    event = AuditEvent.objects.get(seq=6)
    assert result.ok
    assert result.event == event
    assert (event.action, event.level, event.channel, event.actor_label) == (
        AuditAction.AUDIT_CHAIN_VERIFIED,
        AuditLevel.INFO,
        Channel.CLI,
        "pytest",
    )
    details = event.details
    assert details["verified_through_seq"] == 5
    assert details["verified_through_hash"] == five_events[-1].hash
    assert (details["events_read"], details["event_count"], details["problem"]) == (5, 5, "")
    assert details["mode"] == "full"
    assert isinstance(details["duration_ms"], int)
    last = last_verification()
    assert last is not None
    assert (last.ok, last.event_count, last.problem, last.event_seq) == (True, 5, "", 6)
    assert last.verified_at == event.created_at


def test_the_next_run_starts_from_the_checkpoint_and_verifies_the_verification_event(
    five_events: list[AuditEvent],
) -> None:  # A2
    audit_chain_verify(actor=TEST_ACTOR)  # seq 6, checkpoint at 5 (in the log only: no commit here)
    record_events(3, prefix="later")  # seq 7..9

    result = audit_chain_verify(actor=TEST_ACTOR)

    assert result.ok
    assert (result.started_after_seq, result.events_read, result.verified_through_seq) == (5, 4, 9)
    assert result.checkpoint is not None
    assert result.checkpoint.source == "log"
    assert AuditEvent.objects.get(seq=10).details["mode"] == "from checkpoint"
    assert last_verification().event_count == 9  # type: ignore[union-attr]


def test_a_full_run_walks_from_the_genesis_hash_even_with_a_checkpoint(
    five_events: list[AuditEvent],
) -> None:  # A2
    audit_chain_verify(actor=TEST_ACTOR)

    result = audit_chain_check(full=True)

    assert (result.ok, result.started_after_seq, result.events_read, result.verified_through_seq) == (
        True,
        0,
        6,
        6,
    )


def test_the_checkpoint_outside_the_log_is_kept_only_once_the_event_commits(
    five_events: list[AuditEvent], django_capture_on_commit_callbacks: OnCommit
) -> None:  # A2
    with django_capture_on_commit_callbacks(execute=False) as hooks:
        audit_chain_verify(actor=TEST_ACTOR)
    assert checkpoint_from_cache() is None  # rolled back would mean never kept

    for hook in hooks:
        hook()
    kept = checkpoint_from_cache()
    event = AuditEvent.objects.get(seq=6)
    assert kept is not None
    assert (kept.seq, kept.hash, kept.event_seq, kept.event_hash) == (5, five_events[-1].hash, 6, event.hash)


def test_an_edit_behind_the_checkpoint_needs_a_full_run(
    five_events: list[AuditEvent], triggers_dropped: None
) -> None:  # A2: what a run from the checkpoint reads, and what it leaves to a full run
    audit_chain_verify(actor=TEST_ACTOR)
    execute("UPDATE audit_auditevent SET subject = 'rewritten' WHERE seq = 2")

    from_checkpoint = audit_chain_check()
    full = audit_chain_check(full=True)

    assert from_checkpoint.ok
    assert from_checkpoint.events_read == 1
    assert not full.ok
    assert full.problem is not None
    assert (full.problem.seq, "altered" in full.problem.problem) == (2, True)


# --- broken chains ------------------------------------------------------------------------------


def test_a_broken_chain_writes_a_warning_and_stays_broken_on_every_later_run(
    five_events: list[AuditEvent], triggers_dropped: None
) -> None:  # A2
    audit_chain_verify(actor=TEST_ACTOR)  # checkpoint at 5
    record_events(3, prefix="later")  # 7..9
    assert execute("UPDATE audit_auditevent SET subject = 'rewritten' WHERE seq = 8") == 1

    first = audit_chain_verify(actor=TEST_ACTOR)
    second = audit_chain_verify(actor=TEST_ACTOR)

    for result, seq in ((first, 10), (second, 11)):
        event = AuditEvent.objects.get(seq=seq)
        assert not result.ok
        assert (event.action, event.level) == (AuditAction.AUDIT_CHAIN_BROKEN, AuditLevel.WARNING)
        assert event.details["problem_seq"] == 8
        assert "event seq=8" in event.details["problem"]
        assert "altered" in event.details["problem"]
        assert event.details["verified_through_seq"] == 7
    # A broken run is not a checkpoint: the second run started where the first did.
    assert second.started_after_seq == first.started_after_seq == 5
    last = last_verification()
    assert last is not None
    assert (last.ok, last.event_seq) == (False, 11)
    assert "event seq=8" in last.problem


def test_tail_truncation_is_caught_by_the_checkpoint_kept_outside_the_log(
    five_events: list[AuditEvent], triggers_dropped: None, django_capture_on_commit_callbacks: OnCommit
) -> None:  # A2: what is left still chains from the genesis hash
    verify_and_commit(django_capture_on_commit_callbacks)  # seq 6, checkpoint at 5
    record_events(2, prefix="later")  # 7, 8
    verify_and_commit(django_capture_on_commit_callbacks)  # seq 9, checkpoint at 8
    assert audit_chain_check().ok

    assert tamper_truncate(7) == 3  # the events since seq 6 and the verification that saw them

    for full in (False, True):
        result = audit_chain_check(full=full)
        assert not result.ok
        assert result.problem is not None
        assert result.problem.seq == 8
        assert result.problem.problem.startswith(CHECKPOINT_MISSING.split("{")[0])
    # The chain alone is content with what is left.
    assert chain.verify_chain((e.pk, e.content(), e.hash) for e in AuditEvent.objects.order_by("seq")) is None


def test_tail_truncation_that_removes_every_verification_since_is_still_caught(
    five_events: list[AuditEvent], triggers_dropped: None, django_capture_on_commit_callbacks: OnCommit
) -> None:  # A2
    verify_and_commit(django_capture_on_commit_callbacks)  # seq 6
    record_events(2, prefix="later")  # 7, 8
    verify_and_commit(django_capture_on_commit_callbacks)  # seq 9: checkpoint at 8

    assert tamper_truncate(6) == 4  # back to before the first verification: the log has none left

    result = audit_chain_verify(actor=TEST_ACTOR)
    assert not result.ok
    assert result.problem is not None
    assert result.problem.seq == 8
    assert AuditEvent.objects.order_by("-seq").first().action == AuditAction.AUDIT_CHAIN_BROKEN  # type: ignore[union-attr]


def test_a_whole_rewrite_with_every_hash_recomputed_is_caught_by_the_checkpoint(
    five_events: list[AuditEvent], triggers_dropped: None, django_capture_on_commit_callbacks: OnCommit
) -> None:  # A2: knowing the formula, a forger can re-chain everything after an edit
    verify_and_commit(django_capture_on_commit_callbacks)  # seq 6, checkpoint at 5 outside the log
    new_hashes = {1: AuditEvent.objects.get(seq=1).hash}
    for event in AuditEvent.objects.filter(seq__gte=2).order_by("seq"):
        body = event.content()
        body["prev_hash"] = new_hashes[event.seq - 1]
        if event.seq == 2:
            body["subject"] = "rewritten"
        if event.action == AuditAction.AUDIT_CHAIN_VERIFIED:
            # The forger rewrites the checkpoint the log keeps, too.
            body["details"] = {**body["details"], "verified_through_hash": new_hashes[5]}
        new_hashes[event.seq] = chain.compute_hash(body)
        sql = (
            "UPDATE audit_auditevent SET subject = %s, prev_hash = %s, hash = %s, "
            f"details = {json_param()} WHERE seq = %s"
        )
        params = [body["subject"], body["prev_hash"], new_hashes[event.seq], json.dumps(body["details"])]
        assert execute(sql, [*params, event.seq]) == 1

    assert chain.verify_chain((e.pk, e.content(), e.hash) for e in AuditEvent.objects.order_by("seq")) is None
    result = audit_chain_check(full=True)
    assert not result.ok
    assert result.problem is not None
    assert result.problem.seq == 5
    assert result.problem.problem == CHECKPOINT_CHANGED.format(when=result.checkpoint.verified_at)  # type: ignore[union-attr]


# --- the beat task ------------------------------------------------------------------------------


def test_the_task_verifies_and_records_as_a_background_task(five_events: list[AuditEvent]) -> None:  # A2
    assert tasks.verify_chain.apply().get() == AuditAction.AUDIT_CHAIN_VERIFIED

    event = AuditEvent.objects.get(seq=6)
    assert (event.action, event.channel, event.actor_label, event.actor_id) == (
        AuditAction.AUDIT_CHAIN_VERIFIED,
        Channel.TASK,
        TASK_ACTOR_LABEL,
        None,
    )
    assert event.request_id.startswith("task-")


def test_the_task_run_twice_verifies_twice_each_from_the_last_checkpoint(
    five_events: list[AuditEvent],
) -> None:  # A2: idempotent
    tasks.verify_chain.apply()
    tasks.verify_chain.apply()

    second = AuditEvent.objects.get(seq=7)
    assert second.action == AuditAction.AUDIT_CHAIN_VERIFIED
    assert (second.details["started_after_seq"], second.details["events_read"]) == (5, 1)


def test_the_task_stands_aside_while_another_run_is_going(five_events: list[AuditEvent]) -> None:  # A2
    assert cache.add(tasks._RUNNING_KEY, "1", timeout=60)
    try:
        assert tasks.verify_chain.apply().get() is None
    finally:
        cache.delete(tasks._RUNNING_KEY)

    assert AuditEvent.objects.count() == 5
    assert tasks.verify_chain.apply().get() == AuditAction.AUDIT_CHAIN_VERIFIED


def test_the_task_is_on_the_beat_schedule_hourly_by_default() -> None:  # A2
    entry = settings.CELERY_BEAT_SCHEDULE["audit-verify-chain"]
    assert entry["task"] == tasks.VERIFY_TASK_NAME == "audit.verify_chain"
    assert entry["schedule"] == float(os.environ.get("AIMON_AUDIT_VERIFY_INTERVAL_SECONDS", 3600))


def test_the_beat_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:  # A2
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.CELERY_BEAT_SCHEDULE['audit-verify-chain']['schedule'])"
    )
    monkeypatch.setenv("AIMON_AUDIT_VERIFY_INTERVAL_SECONDS", "120")

    done = run_in_new_process(["-c", code], os.environ.get("DATABASE_URL", "sqlite:///:memory:"))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "120.0"


def test_the_last_verification_is_the_newest_of_either_outcome(db: None) -> None:  # A2
    # Read one kind at a time (each through the action index): the newer one wins, either way.
    def record(action: str) -> int:
        with transaction.atomic():
            return audit_record(action=action, actor=TEST_ACTOR, details={"event_count": 1}).seq

    broken = record(AuditAction.AUDIT_CHAIN_BROKEN)
    assert (last_verification().ok, last_verification().event_seq) == (False, broken)  # type: ignore[union-attr]
    verified = record(AuditAction.AUDIT_CHAIN_VERIFIED)
    assert (last_verification().ok, last_verification().event_seq) == (True, verified)  # type: ignore[union-attr]
    again = record(AuditAction.AUDIT_CHAIN_BROKEN)
    assert (last_verification().ok, last_verification().event_seq) == (False, again)  # type: ignore[union-attr]
