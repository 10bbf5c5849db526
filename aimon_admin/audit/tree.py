"""The log's Merkle tree in the database (A4): appended with each event, read for roots and proofs.

`append` runs inside audit_record(), after the event's insert and under the chain's lock, so
the tree always holds exactly the committed events. It adds the leaf and every subtree the
leaf completes: on average two rows, at most log2(n) + 1, reading only the left siblings.
On PostgreSQL that is one round trip (a function that hashes with the server's sha256()); on
SQLite a read of the siblings and one insert.

Appending never fails the change it records. Only a log rewritten behind the triggers can
make the tree and the events disagree (a node already there for a new event, a sibling
missing); then the tree keeps what it held and stops where a node is missing, and the next
checkpoint refuses to be signed, saying why (aimon_admin.audit.checkpoints).

A root, an inclusion proof or a consistency proof reads the O(log n) stored nodes it needs in
one query (`merkle.ranges_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

from aimon_admin.audit import merkle
from aimon_admin.audit.models import AuditEvent, AuditTreeNode

_POSTGRES_INSTALL = """
CREATE OR REPLACE FUNCTION aimon_audit_tree_append(leaf_index bigint, leaf bytea)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lvl smallint := 0;
    pos bigint := leaf_index;
    value bytea := leaf;
    sibling bytea;
BEGIN
    INSERT INTO audit_audittreenode (level, position, hash) VALUES (0, pos, value) ON CONFLICT DO NOTHING;
    WHILE pos % 2 = 1 LOOP
        SELECT n.hash INTO sibling FROM audit_audittreenode AS n WHERE n.level = lvl AND n.position = pos - 1;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        value := sha256('\\x01'::bytea || sibling || value);
        lvl := lvl + 1;
        pos := pos / 2;
        INSERT INTO audit_audittreenode (level, position, hash) VALUES (lvl, pos, value)
        ON CONFLICT DO NOTHING;
    END LOOP;
END
$$;
"""
_POSTGRES_DROP = "DROP FUNCTION IF EXISTS aimon_audit_tree_append(bigint, bytea);"


class TreeNodeMissingError(RuntimeError):
    """A node the tree should hold is not there: the tree table was cut or rewritten."""


def install(conn: BaseDatabaseWrapper) -> None:
    """The append function (PostgreSQL). The table's append-only triggers are the events'
    (aimon_admin/audit/triggers.py)."""
    if conn.vendor == "postgresql":
        with conn.cursor() as cursor:
            cursor.execute(_POSTGRES_INSTALL)


def drop(conn: BaseDatabaseWrapper) -> None:
    if conn.vendor == "postgresql":
        with conn.cursor() as cursor:
            cursor.execute(_POSTGRES_DROP)


def append(leaf_index: int, leaf: bytes) -> None:
    """Add leaf `leaf_index` (event seq leaf_index + 1) and the subtrees it completes."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT aimon_audit_tree_append(%s, %s)", [leaf_index, leaf])
        return
    wanted = merkle.parents_on_append(leaf_index)
    try:
        siblings = read_nodes(wanted)
    except TreeNodeMissingError:
        siblings = {}
    rows = [((0, leaf_index), leaf)]
    if len(siblings) == len(wanted):
        rows = merkle.nodes_on_append(leaf_index, leaf, siblings)
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO audit_audittreenode (level, position, hash) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [(level, position, value) for (level, position), value in rows],
        )


def read_nodes(nodes: Sequence[merkle.Node]) -> dict[merkle.Node, bytes]:
    """The stored hashes of `nodes`, in one query; TreeNodeMissingError names one that is not there."""
    if not nodes:
        return {}
    # A row-value IN on the primary key: a fifth of the time of the ORM's OR of pairs.
    pairs = ", ".join(["(%s, %s)"] * len(nodes))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT level, position, hash FROM audit_audittreenode WHERE (level, position) IN ({pairs})",  # noqa: S608 - placeholders only # nosec B608
            [value for node in nodes for value in node],
        )
        found = {(level, position): bytes(value) for level, position, value in cursor.fetchall()}
    for node in nodes:
        if node not in found:
            raise TreeNodeMissingError(
                f"the audit tree's node {node} is missing: its table was cut or rewritten"
            )
    return found


def _hashes(ranges: Iterable[merkle.Range]) -> list[bytes]:
    ranges = list(ranges)
    nodes = read_nodes(merkle.ranges_nodes(ranges))
    return [merkle.range_hash(start, end, nodes) for start, end in ranges]


def root(size: int) -> bytes:
    """The root of the tree of the first `size` events."""
    return _hashes([(0, size)])[0] if size else merkle.EMPTY_ROOT


def inclusion_proof(seq: int, size: int) -> list[bytes]:
    """Event `seq`'s inclusion proof in the tree of the first `size` events."""
    return _hashes(merkle.inclusion_ranges(seq - 1, size))


def consistency_proof(old: int, new: int) -> list[bytes]:
    """The proof that the tree of `new` events extends the tree of `old`."""
    return _hashes(merkle.consistency_ranges(old, new))


def size(node_model: type = AuditTreeNode) -> int:
    """How many leaves the tree holds (one index read: the last leaf's position)."""
    last = node_model.objects.filter(level=0).order_by("-position").values_list("position", flat=True).first()
    return 0 if last is None else last + 1


def catch_up(event_model: type = AuditEvent, node_model: type = AuditTreeNode, *, batch: int = 5000) -> int:
    """Add to the tree every event past its last leaf, in seq order, and return the tree's
    size. For events written around audit_record(): the migration that brings in the tree
    (the events before it) and the benchmark's bulk generator. Streams, O(log n) memory;
    run it where no other writer appends (the migration, or under the chain's lock)."""
    from aimon_admin.audit import chain
    from aimon_admin.audit.models import format_timestamp

    frontier = merkle.Frontier.resume(size(node_model), read_nodes)
    last = frontier.size
    while True:
        rows = list(
            event_model.objects.filter(seq__gt=last)
            .order_by("seq")
            .values_list(*chain.CONTENT_FIELDS)[:batch]
        )
        if not rows:
            return frontier.size
        pending = []
        for row in rows:
            content = dict(zip(chain.CONTENT_FIELDS, row, strict=True))
            if content["seq"] != frontier.size + 1:
                raise TreeNodeMissingError(
                    f"the audit log has no event seq {frontier.size + 1}: cannot build its tree"
                )
            content["created_at"] = format_timestamp(content["created_at"])
            for (level, position), value in frontier.push(merkle.event_leaf(content)):
                pending.append(node_model(level=level, position=position, hash=value))
        node_model.objects.bulk_create(pending)
        last = rows[-1][0]


def rebuild(event_model: type, node_model: type, *, batch: int = 5000) -> int:
    """The tree of every event there is, on an empty tree table (the migration)."""
    return catch_up(event_model, node_model, batch=batch)
