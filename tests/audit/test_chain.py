"""The hash chain as pure functions (A2): canonical form, hashing, verification. No database."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
from collections.abc import Mapping
from typing import Any

import pytest

from aimon_admin.audit.chain import (
    CONTENT_FIELDS,
    GENESIS_HASH,
    ChainProblem,
    NotCanonicalError,
    canonical_json,
    compute_hash,
    normalize,
    verify_chain,
)

Event = tuple[int | None, dict[str, Any], str]


def content(seq: int, prev_hash: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "seq": seq,
        "created_at": f"2026-01-01T00:00:{seq:02d}.000000+00:00",
        "actor_id": 7,
        "actor_label": "olivia",
        "channel": "BROWSER",
        "action": "RUNTIME_SETTINGS_CHANGED",
        "level": "INFO",
        "runtime_id": 3,
        "session_key": "",
        "subject_type": "runtime",
        "subject": f"agent-{seq}",
        "details": {"changed": ["ceiling"], "number": seq},
        "request_id": f"req-{seq}",
        "prev_hash": prev_hash,
    }
    base.update(fields)
    return base


def build_chain(length: int) -> list[Event]:
    """A valid chain: (event id, content, stored hash), ids 101, 102, …"""
    events: list[Event] = []
    prev = GENESIS_HASH
    for seq in range(1, length + 1):
        body = content(seq, prev)
        digest = compute_hash(body)
        events.append((100 + seq, body, digest))
        prev = digest
    return events


def rehash(body: Mapping[str, Any]) -> str:
    return compute_hash(body)


# --- canonical JSON -------------------------------------------------------------------------


def test_canonical_json_sorts_keys_at_every_depth_and_has_no_whitespace() -> None:  # A2
    assert canonical_json({"b": 1, "a": {"d": [1, 2], "c": None}}) == '{"a":{"c":null,"d":[1,2]},"b":1}'


def test_canonical_json_writes_non_ascii_as_utf8_not_escapes() -> None:  # A2
    assert canonical_json({"name": "ünïcode ✓"}) == '{"name":"ünïcode ✓"}'


def test_canonical_json_does_not_depend_on_insertion_order() -> None:  # A2
    assert canonical_json({"x": 1, "y": {"p": 1, "q": 2}}) == canonical_json({"y": {"q": 2, "p": 1}, "x": 1})


# --- compute_hash -----------------------------------------------------------------------------


def test_compute_hash_is_sha256_of_prev_hash_newline_canonical_json() -> None:  # A2
    body = content(1, GENESIS_HASH)
    expected = hashlib.sha256((GENESIS_HASH + "\n" + canonical_json(body)).encode("utf-8")).hexdigest()
    assert compute_hash(body) == expected


def test_compute_hash_pins_the_documented_formula_on_a_literal() -> None:  # A2 (exports verify outside)
    body = {"prev_hash": "ab", "seq": 1}
    literal = 'ab\n{"prev_hash":"ab","seq":1}'
    assert compute_hash(body) == hashlib.sha256(literal.encode()).hexdigest()


def test_compute_hash_is_deterministic_and_independent_of_key_order() -> None:  # A2
    body = content(4, "f" * 64)
    reordered = dict(reversed(list(body.items())))
    assert compute_hash(body) == compute_hash(dict(body)) == compute_hash(reordered)
    assert len(compute_hash(body)) == 64


@pytest.mark.parametrize("field", CONTENT_FIELDS)
def test_compute_hash_changes_when_any_content_field_changes(field: str) -> None:  # A2
    body = content(2, "a" * 64)
    changed = dict(body, **{field: "something else"})
    assert compute_hash(changed) != compute_hash(body)


# --- normalize --------------------------------------------------------------------------------


def test_normalize_keeps_plain_json_values_and_turns_tuples_into_lists() -> None:  # A2
    value = {"s": "x", "i": 3, "big": 2**70, "t": True, "f": False, "n": None, "l": [1, ("a", "b")]}
    assert normalize(value) == {
        "s": "x",
        "i": 3,
        "big": 2**70,
        "t": True,
        "f": False,
        "n": None,
        "l": [1, ["a", "b"]],
    }


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        {"ratio": 0.25},
        {"nested": {"deep": [1, 2.0]}},
        [float("nan")],
    ],
    ids=["top-level", "in-dict", "nested-in-list", "nan"],
)
def test_normalize_refuses_floats_anywhere(value: Any) -> None:  # A2: jsonb may rewrite floats
    with pytest.raises(NotCanonicalError, match="float"):
        normalize(value)


@pytest.mark.parametrize("key", [1, None, ("a",), True], ids=["int", "none", "tuple", "bool"])
def test_normalize_refuses_non_string_keys(key: Any) -> None:  # A2
    with pytest.raises(NotCanonicalError, match="keys must be strings"):
        normalize({"ok": 1, "nested": {key: "v"}})


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        decimal.Decimal("1.0"),
        {"a", "b"},
        b"bytes",
        object(),
    ],
    ids=["datetime", "decimal", "set", "bytes", "object"],
)
def test_normalize_refuses_objects_that_are_not_plain_json(value: Any) -> None:  # A2
    with pytest.raises(NotCanonicalError, match="cannot hold"):
        normalize({"value": value})


@pytest.mark.parametrize(
    "value",
    [
        {"description": "a\x00b"},
        {"tools": ["ok", "nul\x00"]},
        {"key\x00": "v"},
        {"name": "\ud800"},
        {"\udfff": 1},
    ],
    ids=["nul-value", "nul-in-list", "nul-key", "surrogate-value", "surrogate-key"],
)
def test_normalize_refuses_text_that_cannot_be_stored_or_hashed_alike_everywhere(value: Any) -> None:  # A2
    # PostgreSQL's jsonb refuses NUL where SQLite would keep it; a lone surrogate has no UTF-8.
    with pytest.raises(NotCanonicalError):
        normalize(value)


# --- verify_chain: what passes ----------------------------------------------------------------


def test_verify_chain_accepts_a_valid_chain() -> None:  # A2
    assert verify_chain(build_chain(6)) is None


def test_verify_chain_accepts_an_empty_log() -> None:  # A2
    assert verify_chain([]) is None


def test_verify_chain_accepts_a_generator() -> None:  # A2: the command streams events
    assert verify_chain(event for event in build_chain(3)) is None


def test_first_event_links_to_the_genesis_hash_of_64_zeros() -> None:  # A2
    assert GENESIS_HASH == "0" * 64
    assert build_chain(1)[0][1]["prev_hash"] == GENESIS_HASH


# --- verify_chain: what it catches ------------------------------------------------------------


def problem_of(events: list[Event]) -> ChainProblem:
    problem = verify_chain(events)
    assert problem is not None, "verify_chain accepted a tampered chain"
    return problem


def test_verify_chain_detects_edited_content() -> None:  # A2
    events = build_chain(5)
    event_id, body, digest = events[2]
    events[2] = (event_id, dict(body, details={"changed": ["owner"], "number": 3}), digest)

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (3, 103)
    assert "altered" in problem.problem


def test_verify_chain_detects_an_edited_hash() -> None:  # A2
    events = build_chain(5)
    event_id, body, _ = events[1]
    events[1] = (event_id, body, "e" * 64)

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (2, 102)
    assert "altered" in problem.problem


def test_verify_chain_detects_edited_content_whose_hash_was_recomputed() -> None:  # A2
    # The forger fixes the edited event's own hash; the next event's link gives it away.
    events = build_chain(5)
    event_id, body, _ = events[1]
    forged = dict(body, subject="someone-else")
    events[1] = (event_id, forged, rehash(forged))

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (3, 103)
    assert "prev_hash" in problem.problem


def test_verify_chain_detects_a_deleted_middle_event() -> None:  # A2
    events = build_chain(5)
    del events[2]

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (4, 104)
    assert "missing or reordered" in problem.problem


def test_verify_chain_detects_a_deleted_first_event() -> None:  # A2
    events = build_chain(4)[1:]

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (2, 102)
    assert "expected seq 1" in problem.problem


def test_verify_chain_detects_a_deleted_middle_event_with_later_seqs_renumbered() -> None:  # A2
    events = build_chain(5)
    del events[2]
    renumbered: list[Event] = []
    for event_id, body, digest in events:
        if body["seq"] > 3:
            body = dict(body, seq=body["seq"] - 1)
            digest = rehash(body)
        renumbered.append((event_id, body, digest))

    problem = problem_of(renumbered)

    assert (problem.seq, problem.event_id) == (3, 104)
    assert "prev_hash" in problem.problem


def test_verify_chain_detects_reordered_events() -> None:  # A2
    events = build_chain(5)
    events[1], events[2] = events[2], events[1]

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (3, 103)
    assert "expected seq 2" in problem.problem


def test_verify_chain_detects_reordered_events_with_their_seqs_swapped() -> None:  # A2
    events = build_chain(5)
    (id2, body2, hash2), (id3, body3, hash3) = events[1], events[2]
    events[1] = (id3, dict(body3, seq=2), hash3)
    events[2] = (id2, dict(body2, seq=3), hash2)

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (2, 103)


def test_verify_chain_detects_an_inserted_event_with_a_self_consistent_hash() -> None:  # A2
    events = build_chain(4)
    forged = content(3, events[1][2], subject="forged", details={"granted": "everything"})
    events.insert(2, (None, forged, rehash(forged)))

    problem = problem_of(events)

    # The forged event itself checks out; the real event 3 after it no longer does.
    assert (problem.seq, problem.event_id) == (3, 103)


def test_verify_chain_detects_an_inserted_event_when_later_events_are_renumbered() -> None:  # A2
    events = build_chain(4)
    forged = content(3, events[1][2], subject="forged")
    shifted: list[Event] = []
    for event_id, body, _ in events[2:]:
        moved = dict(body, seq=body["seq"] + 1)
        shifted.append((event_id, moved, rehash(moved)))
    tampered = [*events[:2], (None, forged, rehash(forged)), *shifted]

    problem = problem_of(tampered)

    assert (problem.seq, problem.event_id) == (4, 103)
    assert "prev_hash" in problem.problem


def test_verify_chain_detects_an_appended_event_with_a_wrong_hash() -> None:  # A2
    events = build_chain(3)
    forged = content(4, events[-1][2], subject="forged")
    events.append((None, forged, hashlib.sha256(canonical_json(forged).encode()).hexdigest()))

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (4, None)
    assert "altered" in problem.problem


def test_verify_chain_detects_a_wrong_genesis() -> None:  # A2
    body = content(1, "1" * 64)
    events: list[Event] = [(101, body, rehash(body))]

    problem = problem_of(events)

    assert (problem.seq, problem.event_id) == (1, 101)
    assert "prev_hash" in problem.problem


def test_verify_chain_reports_only_the_first_problem() -> None:  # A2
    events = build_chain(6)
    for index in (1, 4):
        event_id, body, digest = events[index]
        events[index] = (event_id, dict(body, subject="edited"), digest)

    assert problem_of(events).seq == 2


def test_chain_problem_names_the_seq_and_the_event_id() -> None:  # A2
    assert str(ChainProblem(3, 42, "hash does not match")) == "event seq=3 (id 42): hash does not match"
    assert str(ChainProblem(3, None, "x")) == "event seq=3: x"


# --- verify_chain from a starting point (a verification checkpoint) -------------------------


def test_verify_chain_from_a_known_good_event_accepts_the_rest_of_a_valid_chain() -> None:  # A2
    events = build_chain(6)

    assert verify_chain(events[3:], after_seq=3, after_hash=events[2][2]) is None
    assert verify_chain([], after_seq=3, after_hash=events[2][2]) is None


def test_verify_chain_from_a_known_good_event_checks_the_link_to_it() -> None:  # A2
    events = build_chain(6)

    wrong_hash = verify_chain(events[3:], after_seq=3, after_hash="f" * 64)
    wrong_seq = verify_chain(events[4:], after_seq=3, after_hash=events[2][2])

    assert wrong_hash == ChainProblem(4, 104, "prev_hash does not match the event before it")
    assert wrong_seq == ChainProblem(5, 105, "expected seq 4: events missing or reordered")


def test_verify_chain_from_a_known_good_event_still_catches_an_edit_after_it() -> None:  # A2
    events = build_chain(6)
    event_id, body, digest = events[4]
    events[4] = (event_id, dict(body, subject="edited"), digest)

    problem = verify_chain(events[3:], after_seq=3, after_hash=events[2][2])

    assert problem == ChainProblem(5, 105, "hash does not match the content (event altered)")
