#!/usr/bin/env python3
"""Verify an AIMON Admin audit export and its signed checkpoints offline (A4).

Needs Python 3.11+ and the `cryptography` package, nothing else: no Django, no database,
no network. Two uses:

    aimon_verify_audit.py --key audit-public.pem EXPORT.jsonl [--checkpoint OLDER.json ...]
    aimon_verify_audit.py --key audit-public.pem --checkpoints DIRECTORY

The first checks a proved export (the auditor's page, "Export with proof", or one event's
"Download proof"): the signature of the checkpoint it ends at; every event's hash and its
link to the one before; that the events rebuild the signed Merkle root (a whole export) or
that each carries an inclusion proof into it (a part of the log); and that each older
checkpoint you kept is of the same log and is extended by this one (nothing removed from
its end, nothing rewritten before it). The second checks a directory of published
checkpoints: signatures, each naming the one before, each extending it (consistency
proofs), time never going back.

Exit status 0 when everything holds, 1 naming the first failure, 2 for a wrong command line.
The formats and hashes are RFC 9162's (leaf SHA-256(0x00 || canonical event JSON), node
SHA-256(0x01 || left || right)); docs/operations.md describes them.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import itertools
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

FORMAT = "aimon-audit-checkpoint/1"
EXPORT_VERSION = 1
GENESIS_HASH = "0" * 64
SIGNED_FIELDS = ("format", "log_id", "tree_size", "root_hash", "time", "previous", "key_id")
CHECKPOINT_KEYS = frozenset((*SIGNED_FIELDS, "signature", "consistency"))
CONTENT_FIELDS = (
    "seq", "created_at", "actor_id", "actor_label", "channel", "action", "level", "runtime_id",
    "session_key", "subject_type", "subject", "details", "request_id", "prev_hash",
)  # fmt: skip
EVENT_KEYS = frozenset((*CONTENT_FIELDS, "hash"))
KEY_ROTATED = "AUDIT_SIGNING_KEY_ROTATED"
ROTATION_FORMAT = "aimon-audit-key-rotation/1"
# Clocks of several web nodes may disagree by this much.
CLOCK_SKEW = dt.timedelta(minutes=5)


class Failure(Exception):
    """What does not hold, and where."""


# --- Hashing (RFC 9162) --------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def event_leaf(content: dict[str, Any]) -> bytes:
    return hashlib.sha256(b"\x00" + canonical_json(content).encode()).digest()


def chain_hash(content: dict[str, Any]) -> str:
    return hashlib.sha256(f"{content['prev_hash']}\n{canonical_json(content)}".encode()).hexdigest()


class Frontier:
    """The tree built leaf by leaf in O(log n) memory."""

    def __init__(self) -> None:
        self.size = 0
        self.stack: list[tuple[int, bytes]] = []

    def push(self, leaf: bytes) -> None:
        level, value = 0, leaf
        while self.stack and self.stack[-1][0] == level:
            value = node_hash(self.stack.pop()[1], value)
            level += 1
        self.stack.append((level, value))
        self.size += 1

    def root(self) -> bytes:
        if not self.stack:
            return hashlib.sha256(b"").digest()
        value = self.stack[-1][1]
        for _level, left in reversed(self.stack[:-1]):
            value = node_hash(left, value)
        return value


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, value = index, size - 1, leaf
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            value = node_hash(sibling, value)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            value = node_hash(value, sibling)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and value == root


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 2.1.4.2."""
    if old == 0:
        return not proof
    if old == new:
        return not proof and old_root == new_root
    if old > new or not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for value in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(value, fr), node_hash(value, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, value)
        fn, sn = fn >> 1, sn >> 1
    return fr == old_root and sr == new_root and sn == 0


# --- Keys and checkpoints ----------------------------------------------------------------------


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(key.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()[:16]


def load_key(path: Path) -> Ed25519PublicKey:
    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise Failure(f"{path}: not a PEM public key ({exc})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise Failure(f"{path}: not an Ed25519 public key")
    return key


def _hex(value: Any, size: int) -> bytes:
    if not isinstance(value, str) or len(value) != size * 2:
        raise ValueError
    return bytes.fromhex(value)


def _time(value: Any) -> dt.datetime:
    moment = dt.datetime.fromisoformat(value) if isinstance(value, str) else None
    if moment is None or moment.tzinfo is None:
        raise ValueError
    return moment


class Checkpoint:
    """A signed checkpoint, checked for form and signature when read."""

    def __init__(self, doc: Any, where: str, keys: dict[str, Ed25519PublicKey] | None) -> None:
        """Read `doc`; check its signature now unless `keys` is None (then `verify` later)."""
        self.where = where
        if not isinstance(doc, dict) or set(doc) != CHECKPOINT_KEYS or doc.get("format") != FORMAT:
            raise Failure(f"{where}: not an AIMON audit checkpoint ({FORMAT})")
        try:
            self.size = doc["tree_size"]
            if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 1:
                raise ValueError
            self.root = _hex(doc["root_hash"], 32)
            self.log_id = doc["log_id"]
            _hex(self.log_id, 32)
            self.time = _time(doc["time"])
            self.previous = doc["previous"]
            if self.previous:
                _hex(self.previous, 32)
            self.consistency = [_hex(value, 32) for value in doc["consistency"]]
            self.signature = base64.b64decode(doc["signature"], validate=True)
        except (ValueError, TypeError) as exc:
            raise Failure(f"{where}: a field is malformed (edited by hand?)") from exc
        self.key_id = doc["key_id"]
        self.doc = doc
        if keys is not None:
            self.verify(keys)

    def verify(self, keys: dict[str, Ed25519PublicKey]) -> None:
        if self.key_id not in keys:
            raise Failure(
                f"{self.where}: signed with key {self.key_id!r}, which is not one of the keys given"
            )
        message = FORMAT.encode() + b"\n" + canonical_json({k: self.doc[k] for k in SIGNED_FIELDS}).encode()
        try:
            keys[self.key_id].verify(self.signature, message)
        except InvalidSignature as exc:
            raise Failure(
                f"{self.where}: the signature does not verify with key {self.key_id}: forged or edited"
            ) from exc

    @property
    def hash(self) -> str:
        return hashlib.sha256(
            canonical_json({k: v for k, v in self.doc.items() if k != "consistency"}).encode()
        ).hexdigest()

    def __str__(self) -> str:
        return f"{self.where} (size {self.size}, signed {self.time.isoformat()})"


def read_checkpoint(path: Path, keys: dict[str, Ed25519PublicKey] | None) -> Checkpoint:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Failure(f"{path}: not a JSON checkpoint ({exc})") from exc
    return Checkpoint(doc, str(path), keys)


def check_extends(old: Checkpoint, new: Checkpoint) -> None:
    """`new` is of the same log as `old` and extends it (with the consistency proof it carries)."""
    if old.log_id != new.log_id:
        raise Failure(f"{old.where} is for another log (log id {old.log_id[:16]}…, not {new.log_id[:16]}…)")
    if new.time < old.time:
        raise Failure(f"{new}: dated before {old}: the signer's clock went back, or it is forged")
    if new.previous != old.hash:
        raise Failure(f"{new} does not name {old.where} as the checkpoint before it")
    if not verify_consistency(old.size, new.size, old.root, new.root, new.consistency):
        raise Failure(f"{new} does not extend {old}: the log was rewritten or cut in between")


def verify_checkpoints(directory: Path, keys: dict[str, Ed25519PublicKey]) -> str:
    paths = sorted(p for p in directory.glob("checkpoint-*.json"))
    if not paths:
        raise Failure(f"{directory}: no checkpoint-*.json files")
    series = [read_checkpoint(path, keys) for path in paths]
    series.sort(key=lambda c: (c.time, c.size))
    for old, new in itertools.pairwise(series):
        if new.size < old.size:
            raise Failure(f"{new} has fewer events than {old}: the log's tail was cut")
        check_extends(old, new)
    return f"{len(series)} checkpoints, each signed and extending the one before; newest: {series[-1]}"


def learn_rotation(record: dict[str, Any], keys: dict[str, Ed25519PublicKey], where: str) -> None:
    """A key rotation event: the new key counts once the old (trusted) one signed it."""
    details = record["details"]
    try:
        old_id, new_id = details["old_key_id"], details["new_key_id"]
        announced = {field: details[field] for field in ("old_key_id", "new_key_id", "new_public_key")}
        signature = base64.b64decode(details["signature"], validate=True)
        new_key = load_pem_public_key(details["new_public_key"].encode())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Failure(f"{where}: a key rotation whose details cannot be read") from exc
    if old_id not in keys:
        return  # announced by a key not trusted here: it teaches nothing
    message = ROTATION_FORMAT.encode() + b"\n" + canonical_json(announced).encode()
    try:
        keys[old_id].verify(signature, message)
    except InvalidSignature as exc:
        raise Failure(f"{where}: a key rotation not signed by the key it names as old ({old_id})") from exc
    if not isinstance(new_key, Ed25519PublicKey) or key_id(new_key) != new_id:
        raise Failure(f"{where}: a key rotation whose new key is not the one it names ({new_id})")
    keys[new_id] = new_key


# --- An export ----------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise Failure(f"{path}: cannot be read ({exc})") from exc
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise Failure(f"line {number}: not JSON, the export is cut or damaged ({exc})") from exc


def verify_export(path: Path, keys: dict[str, Ed25519PublicKey], older: list[Checkpoint]) -> str:
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise Failure(f"{path}: empty")
    header = first[1]
    if (
        not isinstance(header, dict)
        or header.get("aimon_audit_export") != EXPORT_VERSION
        or set(header)
        != {
            "aimon_audit_export",
            "checkpoint",
        }
    ):
        raise Failure("line 1: not a proved AIMON audit export (its checkpoint line is missing)")
    keys = dict(keys)  # key rotations in the export add to it
    signed = Checkpoint(header["checkpoint"], "the export's checkpoint", None)
    # Checked now when their key is known; a key announced by a rotation in the export, at the end.
    pending = []
    for checkpoint in (signed, *older):
        if checkpoint.key_id in keys:
            checkpoint.verify(keys)
        else:
            pending.append(checkpoint)
    for old in older:
        if old.log_id != signed.log_id:
            raise Failure(
                f"{old.where} is for another log (log id {old.log_id[:16]}…, not {signed.log_id[:16]}…)"
            )
        if old.size > signed.size:
            raise Failure(
                f"missing tail: {old} covers {old.size} events, the export ends at {signed.size}: "
                f"events {signed.size + 1}..{old.size} were removed"
            )
    due = sorted(older, key=lambda c: c.size)
    frontier: Frontier | None = Frontier()
    expected, prev_hash, events, proved = 1, GENESIS_HASH, 0, 0
    for number, record in lines:
        where = f"line {number}"
        if not isinstance(record, dict) or not EVENT_KEYS <= set(record) <= EVENT_KEYS | {"inclusion"}:
            raise Failure(f"{where}: not an exported event")
        seq = record["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise Failure(f"{where}: seq is not a positive whole number")
        where = f"line {number} (seq {seq})"
        content = {field: record[field] for field in CONTENT_FIELDS}
        if chain_hash(content) != record["hash"]:
            raise Failure(f"{where}: the hash does not match its content: the event was altered")
        if seq > signed.size:
            raise Failure(f"{where}: past the {signed.size} events its checkpoint signed")
        try:
            created = _time(record["created_at"])
        except ValueError as exc:
            raise Failure(f"{where}: created_at is not a time") from exc
        if created > signed.time + CLOCK_SKEW:
            raise Failure(
                f"{where}: written at {created.isoformat()}, after its checkpoint was signed "
                f"({signed.time.isoformat()}): the signer's clock is wrong or the checkpoint forged"
            )
        leaf = event_leaf(content)
        if seq < expected:
            raise Failure(f"{where}: after seq {expected - 1}: events out of order or repeated")
        if seq == expected and record["prev_hash"] != prev_hash:
            raise Failure(f"{where}: prev_hash is not the hash of the event before it (seq {seq - 1})")
        if seq > expected and "inclusion" not in record:
            missing = f"event {expected} is" if seq == expected + 1 else f"events {expected}..{seq - 1} are"
            raise Failure(
                f"{where}: expected seq {expected}: {missing} missing or out of order, "
                "and this line carries no inclusion proof"
            )
        if "inclusion" in record:
            try:
                proof = [_hex(value, 32) for value in record["inclusion"]]
            except (ValueError, TypeError) as exc:
                raise Failure(f"{where}: the inclusion proof is malformed") from exc
            if not verify_inclusion(seq - 1, signed.size, leaf, proof, signed.root):
                raise Failure(f"{where}: not included in the tree its checkpoint signed")
            proved += 1
        if seq != expected:
            frontier = None  # a part of the log: each event stands on its own proof
        if frontier is not None:
            frontier.push(leaf)
            while due and due[0].size == frontier.size:
                old = due.pop(0)
                if frontier.root() != old.root:
                    raise Failure(f"{old}: the export's first {old.size} events are not the ones it signed")
        if record["action"] == KEY_ROTATED:
            learn_rotation(record, keys, where)
        expected, prev_hash, events = seq + 1, record["hash"], events + 1
    for checkpoint in pending:
        checkpoint.verify(keys)
    if frontier is not None:
        if frontier.size != signed.size:
            raise Failure(
                f"the export ends at seq {frontier.size} but its checkpoint signed {signed.size} events: "
                f"events {frontier.size + 1}..{signed.size} are missing (tail cut)"
            )
        if frontier.root() != signed.root:
            raise Failure("the events do not rebuild the signed root: events were changed, added or removed")
    for old in due:
        if signed.previous == old.hash and verify_consistency(
            old.size, signed.size, old.root, signed.root, signed.consistency
        ):
            continue
        raise Failure(f"{old}: a part of the log cannot show it extends this checkpoint; use a whole export")
    kind = "whole log" if frontier is not None else f"part of the log, {proved} inclusion proofs"
    return f"{events} events ({kind}) verified against {signed}; {len(older)} older checkpoints extended"


# --- Command line ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key", action="append", type=Path, required=True, help="a trusted public key (PEM)")
    parser.add_argument(
        "--checkpoint", action="append", type=Path, default=[], help="an older checkpoint you kept"
    )
    parser.add_argument("--checkpoints", type=Path, help="a directory of published checkpoints")
    parser.add_argument("export", nargs="?", type=Path, help="a proved export (JSON Lines)")
    args = parser.parse_args(argv)
    if (args.export is None) == (args.checkpoints is None):
        parser.error("give an export file or --checkpoints DIRECTORY")
    try:
        keys = {key_id(key): key for key in (load_key(path) for path in args.key)}
        if args.checkpoints is not None:
            summary = verify_checkpoints(args.checkpoints, keys)
        else:
            older = [read_checkpoint(path, None) for path in args.checkpoint]
            summary = verify_export(args.export, keys, older)
    except Failure as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"OK: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
