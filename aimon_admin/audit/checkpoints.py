"""Signed checkpoints of the audit log (A4): tree size, root, time, the previous checkpoint's
hash, the key id; signed with Ed25519 and published outside the database.

A checkpoint is this JSON object (published as canonical JSON, aimon_admin.audit.publication):

    format      "aimon-audit-checkpoint/1"
    log_id      the hash of event seq 1: which log this is
    tree_size   how many events the tree holds
    root_hash   the Merkle root of those events (hex; aimon_admin.audit.merkle)
    time        when it was signed (ISO 8601, UTC)
    previous    the hash of the checkpoint before it ("" for the first)
    key_id      the signing key (aimon_admin.audit.signing)
    signature   Ed25519 over "aimon-audit-checkpoint/1\\n" + canonical JSON of the fields above
    consistency the proof that this tree extends the previous checkpoint's (hex hashes)

Its hash (what the next one names as `previous`) is the SHA-256 of the canonical JSON of every
field but `consistency`.

Before signing, the product checks its own log against the checkpoints it signed before, the
database's newest and the newest published ones, the directory's and the bucket's (which the
database's owner cannot reach): the same log, no fewer events, the same root at their size,
and the newest event still the tree's last leaf. If any of that fails, the directory's cannot
be read, or the key cannot be used, it refuses to sign, keeps the reason where the auditor's
home shows it (`refusal`), and tries again at the next interval.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from aimon_admin.audit import chain, chain_head, merkle, publication, signing, tree
from aimon_admin.audit.models import AuditCheckpoint, AuditEvent, format_timestamp
from aimon_admin.core import hooks

FORMAT = "aimon-audit-checkpoint/1"
SIGNED_FIELDS = ("format", "log_id", "tree_size", "root_hash", "time", "previous", "key_id")

# Words people see (tests import these).
EMPTY_LOG = "The audit log is empty: there is nothing to sign yet."
OTHER_LOG = "The {which} checkpoint is of another log (its first event differs): the log was replaced."
FEWER_EVENTS = (
    "The log holds {head} events, fewer than the {size} the {which} checkpoint of {time} signed: "
    "events {first}..{size} were removed."
)
OTHER_ROOT = (
    "The log's first {size} events no longer have the root the {which} checkpoint of {time} "
    "signed: they were rewritten."
)
TAIL_CUT = "The tree holds an event past the log's newest (seq {head}): events after it were removed."
HEAD_CHANGED = "The log's newest event (seq {head}) is not the one its tree holds: it was rewritten."
CLOCK_BACK = "This server's clock reads {now}, before the {which} checkpoint's time {time}: fix the clock."
NOT_PUBLISHED = "Signed, but could not be written to {where}: {problem}"


class CheckpointRefusedError(Exception):
    """No checkpoint was signed; the text says why."""


def signed_message(document: dict[str, Any]) -> bytes:
    signed = {field: document[field] for field in SIGNED_FIELDS}
    return FORMAT.encode() + b"\n" + chain.canonical_json(signed).encode()


def document_hash(document: dict[str, Any]) -> str:
    body = {key: value for key, value in document.items() if key != "consistency"}
    return hashlib.sha256(chain.canonical_json(body).encode()).hexdigest()


def newest() -> AuditCheckpoint | None:
    return AuditCheckpoint.objects.order_by("-signed_at", "-pk").first()


def interval() -> dt.timedelta:
    return dt.timedelta(minutes=int(settings.AIMON_AUDIT_CHECKPOINT_MINUTES))


def due(now: dt.datetime | None = None) -> bool:
    """A checkpoint is owed: none yet, or the newest is an interval old."""
    last = newest()
    return last is None or last.signed_at <= (now or timezone.now()) - interval()


# --- Why signing stopped, kept for the auditor's home -----------------------------------------


def _refusal_key() -> str:
    return f"aimon:audit:checkpoint-refused:{connection.vendor}:{connection.settings_dict['NAME']}"


@dataclass(frozen=True)
class Refusal:
    reason: str
    at: dt.datetime


def refusal() -> Refusal | None:
    value = cache.get(_refusal_key())
    if not isinstance(value, dict):
        return None
    try:
        return Refusal(reason=str(value["reason"]), at=dt.datetime.fromisoformat(value["at"]))
    except (KeyError, TypeError, ValueError):
        return None


def _refuse(reason: str) -> CheckpointRefusedError:
    cache.set(_refusal_key(), {"reason": reason, "at": timezone.now().isoformat()}, timeout=None)
    return CheckpointRefusedError(reason)


def refusal_forget() -> None:
    cache.delete(_refusal_key())


# --- Signing ----------------------------------------------------------------------------------


def _locked_head() -> int:
    """The newest event's seq, read under the chain's lock (held to the transaction's end), so
    no event commits between reading the head and its tree."""
    if connection.vendor == "postgresql":
        head = chain_head.locked_head(connection)
    else:  # SQLite: this transaction took the write lock when it began (IMMEDIATE)
        head = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    return head[0] if head else 0


def _check_log(head: int, log_id: str, earlier: list[tuple[str, dict[str, Any]]], now: dt.datetime) -> None:
    """The log still holds what each earlier checkpoint signed; raise the refusal otherwise."""
    stored = tree.read_nodes([(0, head - 1)])[(0, head - 1)]
    head_event = AuditEvent.objects.get(seq=head)
    if merkle.event_leaf(head_event.content()) != stored:
        raise CheckpointRefusedError(HEAD_CHANGED.format(head=head))
    try:
        tree.read_nodes([(0, head)])
    except tree.TreeNodeMissingError:
        pass
    else:
        raise CheckpointRefusedError(TAIL_CUT.format(head=head))
    for which, document in earlier:
        size, time = int(document["tree_size"]), document["time"]
        if document["log_id"] != log_id:
            raise CheckpointRefusedError(OTHER_LOG.format(which=which))
        if size > head:
            raise CheckpointRefusedError(
                FEWER_EVENTS.format(head=head, size=size, which=which, time=time, first=head + 1)
            )
        if tree.root(size).hex() != document["root_hash"]:
            raise CheckpointRefusedError(OTHER_ROOT.format(size=size, which=which, time=time))
        if dt.datetime.fromisoformat(time) > now:
            raise CheckpointRefusedError(CLOCK_BACK.format(now=format_timestamp(now), which=which, time=time))


def checkpoint_sign(*, now: dt.datetime | None = None) -> AuditCheckpoint:
    """Sign a checkpoint of the log as it stands and publish it; CheckpointRefusedError says why not."""
    try:
        key = signing.signing_key()
        published = publication.latest_published(bucket_must_answer=False)
    except (signing.SigningKeyError, publication.PublishedUnreadableError) as exc:
        raise _refuse(str(exc)) from exc
    public = key.public_key()
    try:
        with transaction.atomic():
            head = _locked_head()
            # After the lock: every event the checkpoint covers was written before its time.
            now = now or timezone.now()
            if head == 0:
                raise CheckpointRefusedError(EMPTY_LOG)
            log_id = AuditEvent.objects.values_list("hash", flat=True).get(seq=1)
            previous = newest()
            earlier = list(published)
            if previous is not None:
                earlier.append(("previous", previous.document))
            _check_log(head, log_id, earlier, now)
            document: dict[str, Any] = {
                "format": FORMAT,
                "log_id": log_id,
                "tree_size": head,
                "root_hash": tree.root(head).hex(),
                "time": format_timestamp(now),
                "previous": previous.checkpoint_hash if previous else "",
                "key_id": signing.key_id(public),
            }
            document["signature"] = base64.b64encode(key.sign(signed_message(document))).decode()
            document["consistency"] = (
                [value.hex() for value in tree.consistency_proof(previous.tree_size, head)]
                if previous
                else []
            )
            checkpoint = AuditCheckpoint.objects.create(
                tree_size=head,
                root_hash=document["root_hash"],
                signed_at=now,
                key_id=document["key_id"],
                checkpoint_hash=document_hash(document),
                document=document,
            )
            # Owed to the webhooks that witness the log from this commit on (core.hooks).
            hooks.announce_after_commit(hooks.CHECKPOINT_SIGNED, checkpoint.pk)
    except (CheckpointRefusedError, tree.TreeNodeMissingError, AuditEvent.DoesNotExist) as exc:
        reason = (
            str(exc) if not isinstance(exc, AuditEvent.DoesNotExist) else "The log's first event is missing."
        )
        raise _refuse(reason) from exc
    _publish(checkpoint, signing.public_pem(public))
    refusal_forget()
    return checkpoint


def _publish(checkpoint: AuditCheckpoint, public_pem: str) -> None:
    """To the directory and the bucket; one line for each place it went, and for each it did not."""
    written, failed = publication.publish(checkpoint.document, public_pem)
    checkpoint.published_to = "\n".join(written)
    checkpoint.publish_problem = "\n".join(
        NOT_PUBLISHED.format(where=where, problem=problem) for where, problem in failed.items()
    )
    checkpoint.save(update_fields=["published_to", "publish_problem"])


# --- What the chain verification asks -------------------------------------------------------

SIGNED_TAIL_CUT = (
    "missing: the {which} checkpoint signed at {time} covers {size} events, the log holds {head}: "
    "events {first}..{size} were removed"
)


def signed_tail_problem(head: int) -> chain.ChainProblem | None:
    """What the chain walk cannot see: fewer events than a signed checkpoint covers (the
    database's newest, and the newest published outside it: the directory's and the bucket's).
    None when there is no such checkpoint or the log holds them all."""
    try:
        published = publication.latest_published()
    except publication.PublishedUnreadableError as exc:
        return chain.ChainProblem(None, None, str(exc))
    last = newest()
    for which, document in [*published, ("newest", last.document if last else None)]:
        if document and int(document["tree_size"]) > head:
            size = int(document["tree_size"])
            words = {"which": which, "time": document["time"], "size": size, "head": head, "first": head + 1}
            return chain.ChainProblem(head + 1, None, SIGNED_TAIL_CUT.format(**words))
    return None


# --- What the auditor's pages show ------------------------------------------------------------

OVERDUE = (
    "Signing is overdue: the newest checkpoint is {age} minutes old, and one is due every {every} "
    "minutes. Is Celery beat running?"
)
NEVER_SIGNED = "No checkpoint has been signed yet."
REFUSED = "Signing refused at {at}: {reason}"


@dataclass(frozen=True)
class SigningStatus:
    newest: AuditCheckpoint | None
    key_id: str
    public_pem: str
    problems: list[str]


def signing_status(now: dt.datetime | None = None) -> SigningStatus:
    """The newest checkpoint, the key's public half, and every reason signing is not keeping up."""
    now = now or timezone.now()
    last, problems, key_id, public_pem = newest(), [], "", ""
    try:
        public = signing.signing_key().public_key()
        key_id, public_pem = signing.key_id(public), signing.public_pem(public)
    except signing.SigningKeyError as exc:
        problems.append(str(exc))
    refused = refusal()
    unseen = refused is not None and refused.reason not in problems
    if refused is not None and unseen and (last is None or refused.at > last.signed_at):
        problems.append(REFUSED.format(at=format_timestamp(refused.at), reason=refused.reason))
    if last is None:
        if not problems:
            problems.append(NEVER_SIGNED)
    else:
        problems.extend(last.publish_problem.splitlines())
        age = now - last.signed_at
        if age > 2 * interval():
            minutes = int(age.total_seconds() // 60)
            problems.append(OVERDUE.format(age=minutes, every=int(interval().total_seconds() // 60)))
    return SigningStatus(newest=last, key_id=key_id, public_pem=public_pem, problems=problems)
