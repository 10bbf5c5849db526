"""The hash chain of the audit log (A2), as pure functions.

Each event's hash is SHA-256 over the previous event's hash and the canonical JSON of
its own content. The canonical form is also what exports carry, so a chain can be
verified outside the product with nothing but this module's rules:

    hash = sha256(prev_hash + "\\n" + canonical_json(content)).hexdigest()

where `content` holds every stored field but `hash` itself, and canonical JSON is
UTF-8, keys sorted, no insignificant whitespace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENESIS_HASH = "0" * 64

# The fields that make up an event's content, in the form exports carry them.
CONTENT_FIELDS = (
    "seq",
    "created_at",
    "actor_id",
    "actor_label",
    "channel",
    "action",
    "level",
    "runtime_id",
    "session_key",
    "subject_type",
    "subject",
    "details",
    "request_id",
    "prev_hash",
)


class NotCanonicalError(ValueError):
    """A value that cannot be written to the audit log as canonical JSON."""


def _text(value: str) -> str:
    # PostgreSQL's jsonb refuses NUL (SQLite would keep it: the two must agree), and a lone
    # surrogate has no UTF-8 form to hash.
    if "\x00" in value:
        raise NotCanonicalError("audit details cannot hold NUL characters")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise NotCanonicalError("audit details must be valid Unicode (no lone surrogates)") from exc
    return value


def normalize(value: Any) -> Any:
    """Return `value` as plain JSON types that survive a database round trip unchanged.

    Floats are refused: PostgreSQL's jsonb may rewrite them, which would break the
    hash. Callers pass numbers as ints and anything else as strings. Strings holding NUL
    or lone surrogates are refused too: PostgreSQL cannot store the first, UTF-8 cannot
    hash the second.
    """
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonicalError(f"audit detail keys must be strings, not {key!r}")
            out[_text(key)] = normalize(item)
        return out
    if isinstance(value, (list, tuple)):
        return [normalize(item) for item in value]
    raise NotCanonicalError(f"audit details cannot hold {type(value).__name__} values")


def canonical_json(content: Mapping[str, Any]) -> str:
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compute_hash(content: Mapping[str, Any]) -> str:
    prev_hash = content["prev_hash"]
    payload = f"{prev_hash}\n{canonical_json(content)}".encode()
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True)
class ChainProblem:
    seq: int | None
    event_id: int | None
    problem: str

    def __str__(self) -> str:
        where = f"event seq={self.seq}" + (f" (id {self.event_id})" if self.event_id else "")
        return f"{where}: {self.problem}"


def verify_chain(
    events: Iterable[tuple[int | None, Mapping[str, Any], str]],
    *,
    after_seq: int = 0,
    after_hash: str = GENESIS_HASH,
) -> ChainProblem | None:
    """Walk (event id, content, stored hash) in seq order; return the first problem or None.

    Catches an edited event (its hash no longer matches), a deleted or reordered one
    (a gap in seq, or a prev_hash that is not the hash before it) and an inserted one.
    By default the walk starts from the genesis; `after_seq` and `after_hash` start it
    after a known good event instead (a verification checkpoint), whose successor must
    link to it.
    """
    expected_prev = after_hash
    expected_seq = after_seq + 1
    for event_id, content, stored_hash in events:
        seq = content.get("seq")
        if seq != expected_seq:
            return ChainProblem(seq, event_id, f"expected seq {expected_seq}: events missing or reordered")
        if content.get("prev_hash") != expected_prev:
            return ChainProblem(seq, event_id, "prev_hash does not match the event before it")
        if compute_hash(content) != stored_hash:
            return ChainProblem(seq, event_id, "hash does not match the content (event altered)")
        expected_prev = stored_hash
        expected_seq += 1
    return None
