"""Proved exports (A4): events with the signed checkpoint they end at and, on request, their
inclusion proofs, in the form the offline verifier reads (clients/verifier/aimon_verify_audit.py).

A proved export is JSON Lines: first `{"aimon_audit_export": 1, "checkpoint": {…}}`, the signed
checkpoint (aimon_admin.audit.checkpoints); then one event per line as the plain export writes
it (`export.jsonl_record`: the hashed content and "hash"), in seq order, each with
`"inclusion": [hex, …]` when proofs were asked for. A whole export (seq 1 to the checkpoint's
size) needs no proofs: the verifier rebuilds the signed root from the events. A part of the
log (`first`..`last`, or one event's *Download proof*) carries a proof on every line.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings

from aimon_admin.audit import checkpoints, export, tree
from aimon_admin.audit.models import AuditCheckpoint, AuditEvent

EXPORT_VERSION = 1
# A part of the log carries a proof per event, one read each: kept to a size a request serves.
MAX_PROVED_EVENTS = 10_000

# Words people see (tests import these).
NO_CHECKPOINT = "No checkpoint is signed yet, so nothing can be proved: {reason}"
PAST_CHECKPOINT = "Event #{seq} is newer than the newest checkpoint ({size} events): {reason}"
BAD_RANGE = "Choose events from 1 to {size}, at most {most} at once, the first not after the last."


class ProofUnavailableError(Exception):
    """No proof can be given now; the text says why."""


def header_line(checkpoint: AuditCheckpoint) -> str:
    header = {"aimon_audit_export": EXPORT_VERSION, "checkpoint": checkpoint.document}
    return json.dumps(header, sort_keys=True) + "\n"


def event_line(event: AuditEvent, proof: list[bytes] | None = None) -> str:
    record = export.jsonl_record(event.content(), event.hash)
    if proof is not None:
        record["inclusion"] = [value.hex() for value in proof]
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"


def checkpoint_covering(seq: int = 0) -> AuditCheckpoint:
    """The newest checkpoint, signed now when the log has grown past it (and the key allows);
    it must cover event `seq`. ProofUnavailableError says why there is none."""
    newest = checkpoints.newest()
    head = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    reason = ""
    if newest is None or newest.tree_size < head:
        try:
            return checkpoints.checkpoint_sign()
        except checkpoints.CheckpointRefusedError as exc:
            reason = str(exc)
    if newest is None:
        raise ProofUnavailableError(NO_CHECKPOINT.format(reason=reason))
    if seq > newest.tree_size:
        raise ProofUnavailableError(PAST_CHECKPOINT.format(seq=seq, size=newest.tree_size, reason=reason))
    return newest


@dataclass(frozen=True)
class Span:
    """Which events a proved export holds, and whether each carries its proof."""

    first: int
    last: int
    proofs: bool


def span_for(checkpoint: AuditCheckpoint, first: int | None, last: int | None, proofs: bool) -> Span:
    size = checkpoint.tree_size
    start, end = first or 1, last or size
    whole = start == 1 and end == size
    too_many = (proofs or not whole) and end - start + 1 > MAX_PROVED_EVENTS
    if not 1 <= start <= end <= size or too_many:
        raise ProofUnavailableError(BAD_RANGE.format(size=size, most=MAX_PROVED_EVENTS))
    return Span(start, end, proofs or not whole)


def chunks(checkpoint: AuditCheckpoint, span: Span) -> Iterator[str]:
    """The export, in keyset chunks of EXPORT_CHUNK_SIZE events (one chunk in memory at a time)."""
    yield header_line(checkpoint)
    after = span.first - 1
    while after < span.last:
        events = list(
            AuditEvent.objects.filter(seq__gt=after, seq__lte=span.last)
            .order_by("seq")
            .select_related(None)[: export.EXPORT_CHUNK_SIZE]
        )
        if not events:
            return
        yield "".join(
            event_line(event, tree.inclusion_proof(event.seq, checkpoint.tree_size) if span.proofs else None)
            for event in events
        )
        after = events[-1].seq


def event_proof(seq: int) -> str:
    """One event's *Download proof*: the checkpoint and the event with its inclusion proof."""
    event = AuditEvent.objects.get(seq=seq)
    checkpoint = checkpoint_covering(seq)
    return header_line(checkpoint) + event_line(event, tree.inclusion_proof(seq, checkpoint.tree_size))


def sign_if_due_without_beat() -> None:
    """Where no beat runs (make run: Celery eager), a page that shows checkpoints signs the one
    owed first. Only with a key configured; a refusal is kept for the page to show."""
    if not getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False) or not checkpoints.signing.key_path():
        return
    if checkpoints.due() and AuditEvent.objects.exists():
        with contextlib.suppress(checkpoints.CheckpointRefusedError):
            checkpoints.checkpoint_sign()
