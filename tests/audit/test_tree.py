"""The log's Merkle tree in the database (A4): kept with every event, read in O(log n)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from aimon_admin.audit import merkle, tree
from aimon_admin.audit.models import AuditEvent, AuditTreeNode
from tests.audit.helpers import execute, record_events

pytestmark = pytest.mark.django_db


def leaves() -> list[bytes]:
    return [merkle.event_leaf(event.content()) for event in AuditEvent.objects.order_by("seq")]


def stored_nodes() -> dict[tuple[int, int], bytes]:
    return {(n.level, n.position): bytes(n.hash) for n in AuditTreeNode.objects.all()}


def test_every_event_adds_its_leaf_and_completed_subtrees(db: None) -> None:  # A4
    record_events(13)
    frontier, expected = merkle.Frontier(), {}
    for leaf in leaves():
        expected.update(frontier.push(leaf))
    assert stored_nodes() == expected
    assert len(expected) == 13 + 6 + 3 + 1  # the leaves, then 6 pairs, 3 fours, 1 eight
    for size in range(1, 14):
        frontier = merkle.Frontier()
        for leaf in leaves()[:size]:
            frontier.push(leaf)
        assert tree.root(size) == frontier.root()


def test_proofs_from_stored_nodes_verify(db: None) -> None:  # A4
    record_events(11)
    all_leaves = leaves()
    for size in (1, 4, 7, 11):
        root = tree.root(size)
        for seq in range(1, size + 1):
            proof = tree.inclusion_proof(seq, size)
            assert merkle.verify_inclusion(seq - 1, size, all_leaves[seq - 1], proof, root)
        for old in range(1, size + 1):
            proof = tree.consistency_proof(old, size)
            assert merkle.verify_consistency(old, size, tree.root(old), root, proof)


def test_a_proof_is_one_query(db: None, django_assert_num_queries) -> None:  # A4: O(log n) reads, at once
    record_events(21)
    with django_assert_num_queries(1):
        tree.inclusion_proof(5, 21)
    with django_assert_num_queries(1):
        tree.consistency_proof(6, 21)


def test_rebuild_builds_the_same_tree_as_the_appends(db: None, triggers_dropped: None) -> None:  # A4
    record_events(9)
    before = stored_nodes()
    execute("DELETE FROM audit_audittreenode")
    assert tree.rebuild(AuditEvent, AuditTreeNode, batch=4) == 9
    assert stored_nodes() == before


@pytest.mark.parametrize(
    "sql", ["UPDATE audit_audittreenode SET hash = hash", "DELETE FROM audit_audittreenode"]
)
def test_tree_nodes_are_append_only(db: None, sql: str) -> None:  # A2, A4
    record_events(2)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        execute(sql)


def test_a_missing_node_is_named(db: None, triggers_dropped: None) -> None:  # A4
    record_events(4)
    execute("DELETE FROM audit_audittreenode WHERE level = 2")
    with pytest.raises(tree.TreeNodeMissingError, match=r"\(2, 0\) is missing"):
        tree.root(4)
    assert connection.vendor in ("sqlite", "postgresql")


def test_catch_up_adds_events_written_around_the_writer(db: None, triggers_dropped: None) -> None:  # A4
    record_events(6)
    before = stored_nodes()
    execute("DELETE FROM audit_audittreenode WHERE position * (1 << level) + (1 << level) > 3")
    assert tree.size() == 3
    assert tree.catch_up(batch=2) == 6
    assert stored_nodes() == before
