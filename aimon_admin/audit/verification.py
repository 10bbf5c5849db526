"""Periodic verification of the audit chain, from a checkpoint (A2).

Walking a million events every hour would be wasteful, and the chain alone cannot see rows
cut from its end: a log truncated after event k still verifies from the genesis hash. So
each verification run leaves a checkpoint, in two places:

* in the log itself, as an AUDIT_CHAIN_VERIFIED event (AUDIT_CHAIN_BROKEN at WARNING when it
  found a problem) whose details record `verified_through_seq` and `verified_through_hash`,
  the counts, the duration and the problem. The auditor's home page reads the newest one
  (`last_verification`). These events are chain events like any other, so the next run
  verifies them too.
* outside the log, in the shared cache (Redis in production): the same checkpoint plus the
  seq and hash of the verification event itself, written only once that event has
  committed. Someone who can rewrite or truncate the audit table can also remove the
  verification events in it; they cannot reach this copy.

The next run starts from the newest checkpoint: it first checks that the checkpoint's
event (and, with the cache copy, the verification event after it) still exists with the
same hash — if not, the log was truncated or rewritten — and then verifies forward from
there to the current head, with the rules of `aimon_admin.audit.chain`. A full run walks
from the genesis hash instead, and still checks the checkpoint.

What no verifier can see: events written after the last verification and removed before
the next one. The shorter the interval, the smaller that window.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.cache import cache
from django.db import connection, transaction

from aimon_admin.audit import chain
from aimon_admin.audit.checkpoints import signed_tail_problem
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent, format_timestamp
from aimon_admin.audit.services import audit_record
from aimon_admin.core import metrics
from aimon_admin.core.actors import Actor

VERIFICATION_ACTIONS = (AuditAction.AUDIT_CHAIN_VERIFIED, AuditAction.AUDIT_CHAIN_BROKEN)
BATCH = 5000
TASK_ACTOR_LABEL = "audit-verifier"

# Problem texts (tests import them).
CHECKPOINT_MISSING = "missing, though verified on {when}: the log was truncated or rewritten since"
CHECKPOINT_CHANGED = "no longer has the hash verified on {when}: the log was rewritten since"

_VALUES = ("pk", *chain.CONTENT_FIELDS, "hash")


# --- Walking the database chain ---------------------------------------------------------------


def _rows(after_seq: int, through_seq: int) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(event id, content, stored hash) for seq in (after_seq, through_seq], in seq order.

    Keyset batches over the unique seq, plain values rather than model instances: the
    same on both databases and a fraction of the cost at a million rows.
    """
    last = after_seq
    while last < through_seq:
        batch = list(
            AuditEvent.objects.filter(seq__gt=last, seq__lte=through_seq)
            .order_by("seq")
            .values_list(*_VALUES)[:BATCH]
        )
        if not batch:
            return
        for pk, seq, created_at, *middle, prev_hash, stored_hash in batch:
            content = dict(
                zip(
                    chain.CONTENT_FIELDS, (seq, format_timestamp(created_at), *middle, prev_hash), strict=True
                )
            )
            yield pk, content, stored_hash
        last = batch[-1][1]


@dataclass
class Walk:
    """How far a walk got: the last good event, how many it read, and the first problem."""

    through_seq: int
    through_hash: str
    read: int = 0
    problem: chain.ChainProblem | None = None


def walk(
    events: Iterator[tuple[int | None, dict[str, Any], str]], *, after_seq: int, after_hash: str
) -> Walk:
    """`chain.verify_chain` from a known good event, noting how far it got and how much it read."""
    state = Walk(through_seq=after_seq, through_hash=after_hash)
    # The event being checked; it becomes the last good one when the next is asked for.
    checking: tuple[int, str] | None = None

    def counted() -> Iterator[tuple[int | None, dict[str, Any], str]]:
        nonlocal checking
        for event in events:
            if checking is not None:
                state.through_seq, state.through_hash = checking
            state.read += 1
            checking = (event[1].get("seq"), event[2])
            yield event
        if checking is not None:
            state.through_seq, state.through_hash = checking

    state.problem = chain.verify_chain(counted(), after_seq=after_seq, after_hash=after_hash)
    return state


# --- Checkpoints ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A point of the chain a verification found good, and where it was recorded.

    `event_seq`/`event_hash` name the verification event that recorded it; `source` says
    whether it was read from the log ("log") or from the copy outside it ("cache").
    """

    seq: int
    hash: str
    event_seq: int | None
    event_hash: str
    verified_at: str
    source: str

    def as_cache_value(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "hash": self.hash,
            "event_seq": self.event_seq,
            "event_hash": self.event_hash,
            "verified_at": self.verified_at,
        }


def _cache_key() -> str:
    # One per database: several databases may share one Redis.
    return f"aimon:audit:checkpoint:{connection.vendor}:{connection.settings_dict['NAME']}"


def checkpoint_from_cache() -> Checkpoint | None:
    value = cache.get(_cache_key())
    if not isinstance(value, dict):
        return None
    try:
        return Checkpoint(
            seq=int(value["seq"]),
            hash=str(value["hash"]),
            event_seq=int(value["event_seq"]) if value.get("event_seq") is not None else None,
            event_hash=str(value.get("event_hash") or ""),
            verified_at=str(value.get("verified_at") or ""),
            source="cache",
        )
    except (KeyError, TypeError, ValueError):
        return None


def checkpoint_forget() -> None:
    """Drop the copy outside the log (a new, empty database; the tests)."""
    cache.delete(_cache_key())


def checkpoint_from_log() -> Checkpoint | None:
    """The newest AUDIT_CHAIN_VERIFIED event's checkpoint (index audit_action_seq)."""
    event = (
        AuditEvent.objects.filter(action=AuditAction.AUDIT_CHAIN_VERIFIED)
        .order_by("-seq")
        .values_list("seq", "hash", "created_at", "details")
        .first()
    )
    if event is None:
        return None
    seq, event_hash, created_at, details = event
    try:
        return Checkpoint(
            seq=int(details["verified_through_seq"]),
            hash=str(details["verified_through_hash"]),
            event_seq=seq,
            event_hash=event_hash,
            verified_at=format_timestamp(created_at),
            source="log",
        )
    except (KeyError, TypeError, ValueError):
        return None


def _stored_hash(seq: int) -> tuple[int | None, str | None]:
    row = AuditEvent.objects.filter(seq=seq).values_list("pk", "hash").first()
    return row if row else (None, None)


def _check_checkpoint(checkpoint: Checkpoint) -> chain.ChainProblem | None:
    """The checkpoint's events must still be there with the hashes they had."""
    points = [(checkpoint.seq, checkpoint.hash)]
    if checkpoint.event_seq is not None and checkpoint.event_hash:
        points.append((checkpoint.event_seq, checkpoint.event_hash))
    for seq, expected in points:
        if seq == 0:
            continue
        event_id, stored = _stored_hash(seq)
        if stored is None:
            return chain.ChainProblem(seq, None, CHECKPOINT_MISSING.format(when=checkpoint.verified_at))
        if stored != expected:
            return chain.ChainProblem(seq, event_id, CHECKPOINT_CHANGED.format(when=checkpoint.verified_at))
    return None


# --- A verification run -----------------------------------------------------------------------


@dataclass
class Verification:
    """The outcome of one run over the database chain."""

    full: bool
    started_after_seq: int
    head_seq: int
    verified_through_seq: int
    verified_through_hash: str
    events_read: int
    duration_ms: int
    problem: chain.ChainProblem | None
    checkpoint: Checkpoint | None
    event: AuditEvent | None = field(default=None)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def event_count(self) -> int:
        """How many events the chain holds up to the point found good."""
        return self.verified_through_seq

    def details(self) -> dict[str, Any]:
        return {
            "mode": "full" if self.full else "from checkpoint",
            "started_after_seq": self.started_after_seq,
            "head_seq": self.head_seq,
            "verified_through_seq": self.verified_through_seq,
            "verified_through_hash": self.verified_through_hash,
            "events_read": self.events_read,
            "event_count": self.event_count,
            "duration_ms": self.duration_ms,
            "checkpoint_source": self.checkpoint.source if self.checkpoint else "",
            "problem": str(self.problem) if self.problem else "",
            "problem_seq": self.problem.seq if self.problem else None,
        }


def audit_chain_check(*, full: bool = False) -> Verification:
    """Verify the database chain up to its current head; write nothing.

    From the newest checkpoint (the cache's copy first, else the log's), or from the
    genesis hash when `full` or when there is none. The checkpoint is checked either way.
    """
    started = time.monotonic()
    head_seq = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    checkpoint = checkpoint_from_cache() or checkpoint_from_log()
    after_seq, after_hash = 0, chain.GENESIS_HASH
    problem = _check_checkpoint(checkpoint) if checkpoint is not None else None
    # A4: a cut tail still chains; the signed checkpoints (the published one outside) see it.
    problem = problem or signed_tail_problem(head_seq)
    if problem is None and checkpoint is not None and not full:
        after_seq, after_hash = checkpoint.seq, checkpoint.hash
    state = Walk(through_seq=after_seq, through_hash=after_hash)
    if problem is None:
        state = walk(_rows(after_seq, head_seq), after_seq=after_seq, after_hash=after_hash)
        problem = state.problem
        if problem is None and state.through_seq != head_seq:
            # Rows vanished between reading the head and walking to it.
            problem = chain.ChainProblem(
                head_seq, None, f"expected seq {state.through_seq + 1}: events missing"
            )
    return Verification(
        full=full or checkpoint is None,
        started_after_seq=after_seq,
        head_seq=head_seq,
        verified_through_seq=state.through_seq,
        verified_through_hash=state.through_hash,
        events_read=state.read,
        duration_ms=int((time.monotonic() - started) * 1000),
        problem=problem,
        checkpoint=checkpoint,
    )


def audit_chain_verification_record(*, result: Verification, actor: Actor) -> AuditEvent:
    """Write the outcome as an event; once it commits, keep the new checkpoint outside the log.

    A broken chain writes AUDIT_CHAIN_BROKEN at WARNING and leaves the last good checkpoint
    where it was, so every later run finds the same problem again.
    """
    with transaction.atomic():
        event = audit_record(
            action=AuditAction.AUDIT_CHAIN_VERIFIED if result.ok else AuditAction.AUDIT_CHAIN_BROKEN,
            actor=actor,
            level=AuditLevel.INFO if result.ok else AuditLevel.WARNING,
            subject_type="audit_chain",
            subject=f"through seq {result.verified_through_seq}",
            details=result.details(),
        )
        metrics.count_on_commit(metrics.AUDIT_VERIFICATIONS, "OK" if result.ok else "BROKEN")
        if result.ok:
            checkpoint = Checkpoint(
                seq=result.verified_through_seq,
                hash=result.verified_through_hash,
                event_seq=event.seq,
                event_hash=event.hash,
                verified_at=format_timestamp(event.created_at),
                source="cache",
            )
            key = _cache_key()
            transaction.on_commit(lambda: cache.set(key, checkpoint.as_cache_value(), timeout=None))
    result.event = event
    return event


def audit_chain_verify(*, actor: Actor, full: bool = False) -> Verification:
    """Check the chain and record the outcome as an event (the beat task, `verify_audit --record`)."""
    result = audit_chain_check(full=full)
    audit_chain_verification_record(result=result, actor=actor)
    return result


# --- What the auditor's home page shows -------------------------------------------------------


@dataclass(frozen=True)
class LastVerification:
    verified_at: dt.datetime
    ok: bool
    event_count: int
    problem: str
    event_seq: int


def last_verification() -> LastVerification | None:
    """The newest verification event, or None if the chain was never verified.

    One index read per kind of outcome, on (action, seq): an `action IN (…)` ordered by seq
    led PostgreSQL to walk the whole log backwards by seq looking for one (1.2 s at a million
    events when none was there yet, as on a new installation; as many rows as were written
    since the last verification otherwise)."""
    rows = [
        AuditEvent.objects.filter(action=action)
        .order_by("-seq")
        .values_list("seq", "created_at", "action", "details")
        .first()
        for action in VERIFICATION_ACTIONS
    ]
    found = [row for row in rows if row is not None]
    if not found:
        return None
    seq, created_at, action, details = max(found, key=lambda row: row[0])
    details = details if isinstance(details, dict) else {}
    ok = action == AuditAction.AUDIT_CHAIN_VERIFIED
    count = details.get("event_count", details.get("verified_through_seq", 0))
    return LastVerification(
        verified_at=created_at,
        ok=ok,
        event_count=count if isinstance(count, int) else 0,
        problem="" if ok else str(details.get("problem") or "the chain was found broken"),
        event_seq=seq,
    )


# --- An exported JSON Lines file --------------------------------------------------------------

EXPORT_KEYS = frozenset((*chain.CONTENT_FIELDS, "hash"))


class ExportLineError(ValueError):
    """A line of an export that is not an event in the export format."""


@dataclass(frozen=True)
class LineProblem:
    line: int
    seq: int | None
    problem: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" (seq={self.seq})" if self.seq is not None else "")
        return f"{where}: {self.problem}"


@dataclass
class FileVerification:
    """What a JSON Lines export holds, and the first problem in it."""

    events: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str = ""
    gaps: int = 0
    first_gaps: list[tuple[int, int]] = field(default_factory=list)
    problem: LineProblem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def filtered(self) -> bool:
        """The file is a subset of the chain: it has gaps, or does not start at seq 1."""
        return self.gaps > 0 or (self.first_seq is not None and self.first_seq != 1)


def _parse_line(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportLineError(f"not a JSON object ({exc})") from exc
    if not isinstance(value, dict):
        raise ExportLineError("not a JSON object")
    keys = set(value)
    if keys != EXPORT_KEYS:
        missing, extra = sorted(EXPORT_KEYS - keys), sorted(keys - EXPORT_KEYS)
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unexpected {', '.join(extra)}"] if extra else []
        )
        raise ExportLineError(f"not an exported event ({'; '.join(parts)})")
    seq = value["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ExportLineError("seq is not a positive whole number")
    if not isinstance(value["hash"], str) or not isinstance(value["prev_hash"], str):
        raise ExportLineError("hash and prev_hash must be strings")
    return value


def verify_export_file(path: Path, *, max_gaps_listed: int = 5) -> FileVerification:
    """Verify an export (`event.content()` plus "hash", one per line, by seq) outside the database.

    Each line's hash is recomputed from its content. Where seqs are consecutive, prev_hash
    must be the line before's hash; a jump in seq is a gap (a filtered export), not a
    failure; a file that starts at seq 1 must start from the genesis hash. Streams the
    file, so its size does not matter.
    """
    result = FileVerification()
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                result.problem = LineProblem(number, None, "blank line")
                return result
            try:
                event = _parse_line(raw)
            except ExportLineError as exc:
                result.problem = LineProblem(number, None, str(exc))
                return result
            seq, stored_hash = event["seq"], event.pop("hash")
            if result.last_seq is None:
                if seq == 1 and event["prev_hash"] != chain.GENESIS_HASH:
                    result.problem = LineProblem(
                        number, seq, "the first event does not link to the genesis hash"
                    )
                    return result
                result.first_seq = seq
            elif seq <= result.last_seq:
                result.problem = LineProblem(
                    number, seq, f"seq {seq} after seq {result.last_seq}: lines out of order or repeated"
                )
                return result
            elif seq == result.last_seq + 1:
                if event["prev_hash"] != result.last_hash:
                    result.problem = LineProblem(number, seq, "prev_hash does not match the line before it")
                    return result
            else:
                result.gaps += 1
                if len(result.first_gaps) < max_gaps_listed:
                    result.first_gaps.append((result.last_seq + 1, seq - 1))
            if chain.compute_hash(event) != stored_hash:
                result.problem = LineProblem(number, seq, "hash does not match the content (event altered)")
                return result
            result.events += 1
            result.last_seq, result.last_hash = seq, stored_hash
    return result
