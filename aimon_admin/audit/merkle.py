"""The audit log as a Merkle tree, RFC 9162's hashing (A4), as pure functions.

Leaf i is event seq i + 1. Its hash is SHA-256(0x00 || canonical bytes), the canonical bytes
being the UTF-8 of `chain.canonical_json(event.content())` (what an export line holds, less
its "hash"); an inner node is SHA-256(0x01 || left || right). The tree of n leaves is RFC
9162's MTH: split at the largest power of two below n, recursively.

Stored, the tree is its complete subtrees: node (level, index) covers the 2**level leaves
from index * 2**level. Any range the RFC's recursion asks for (a subtree, or the incomplete
right edge) is a handful of such nodes, so a root, an inclusion proof or a consistency
proof is O(log n) stored hashes, read at once (`ranges_nodes`).

The verification functions are RFC 9162 sections 2.1.3.2 and 2.1.4.2; the standalone
verifier (clients/verifier/aimon_verify_audit.py) carries the same ones, so that it needs
nothing of the product.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aimon_admin.audit import chain

EMPTY_ROOT = hashlib.sha256(b"").digest()
Range = tuple[int, int]  # leaves [start, end)
Node = tuple[int, int]  # (level, index)


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def event_leaf(content: Mapping[str, Any]) -> bytes:
    """The leaf hash of one event, from its hashed content (`AuditEvent.content()`)."""
    return leaf_hash(chain.canonical_json(content).encode())


def _split(size: int) -> int:
    """The largest power of two smaller than `size` (> 1)."""
    return 1 << ((size - 1).bit_length() - 1)


def range_nodes(start: int, end: int) -> list[Node]:
    """The complete subtrees that make up leaves [start, end), left to right.

    For the ranges RFC 9162's recursion produces, folding their hashes from the right
    (`fold`) is that range's MTH.
    """
    nodes: list[Node] = []
    while start < end:
        level = (end - start).bit_length() - 1
        while start % (1 << level):
            level -= 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def fold(hashes: Sequence[bytes]) -> bytes:
    """MTH of consecutive complete subtrees, largest first: H(a, H(b, H(c, …)))."""
    if not hashes:
        return EMPTY_ROOT
    value = hashes[-1]
    for left in reversed(hashes[:-1]):
        value = node_hash(left, value)
    return value


def inclusion_ranges(leaf_index: int, size: int) -> list[Range]:
    """The ranges whose MTH make up PATH(leaf_index, D[size]), from the leaf up (RFC 9162 2.1.3.1)."""
    if not 0 <= leaf_index < size:
        raise ValueError(f"leaf {leaf_index} is not in a tree of {size}")
    out: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if leaf_index - start < k:
            out.append((start + k, end))
            end = start + k
        else:
            out.append((start, start + k))
            start += k
    out.reverse()
    return out


def consistency_ranges(old: int, new: int) -> list[Range]:
    """The ranges whose MTH make up PROOF(old, D[new]) (RFC 9162 2.1.4.1); empty when old
    is 0 or equals new."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} to {new}")
    if old in (0, new):
        return []
    out: list[Range] = []
    start, end, complete = 0, new, True
    while old != end:
        k = _split(end - start)
        if old - start <= k:
            out.append((start + k, end))
            end = start + k
        else:
            out.append((start, start + k))
            start, complete = start + k, False
    if not complete:
        out.append((start, end))
    out.reverse()
    return out


def ranges_nodes(ranges: Iterable[Range]) -> list[Node]:
    """Every stored node the ranges need, each once."""
    return list(dict.fromkeys(node for start, end in ranges for node in range_nodes(start, end)))


def range_hash(start: int, end: int, nodes: Mapping[Node, bytes]) -> bytes:
    return fold([nodes[node] for node in range_nodes(start, end)])


def parents_on_append(leaf_index: int) -> list[Node]:
    """The left siblings a new leaf completes subtrees with, lowest first: each (level, i - 1)
    while the leaf's ancestor at that level is a right child."""
    siblings: list[Node] = []
    level, index = 0, leaf_index
    while index % 2 == 1:
        siblings.append((level, index - 1))
        level, index = level + 1, index >> 1
    return siblings


def nodes_on_append(leaf_index: int, leaf: bytes, siblings: Mapping[Node, bytes]) -> list[tuple[Node, bytes]]:
    """The nodes a new leaf adds: itself, then each subtree it completes."""
    out = [((0, leaf_index), leaf)]
    level, index, value = 0, leaf_index, leaf
    while index % 2 == 1:
        value = node_hash(siblings[(level, index - 1)], value)
        level, index = level + 1, index >> 1
        out.append(((level, index), value))
    return out


class Frontier:
    """A tree built leaf by leaf in O(log n) memory: the roots of its complete subtrees."""

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[tuple[int, bytes]] = []  # (level, hash), largest first

    @classmethod
    def resume(cls, size: int, read: Callable[[list[Node]], Mapping[Node, bytes]]) -> Frontier:
        """The frontier of a stored tree of `size` leaves, from its complete subtrees."""
        frontier = cls()
        nodes = range_nodes(0, size)
        stored = read(nodes)
        frontier.size = size
        frontier._stack = [(level, stored[(level, index)]) for level, index in nodes]
        return frontier

    def push(self, leaf: bytes) -> list[tuple[Node, bytes]]:
        """Add a leaf; return the nodes it adds (as `nodes_on_append`)."""
        added = [((0, self.size), leaf)]
        level, value, index = 0, leaf, self.size
        while self._stack and self._stack[-1][0] == level:
            value = node_hash(self._stack.pop()[1], value)
            level, index = level + 1, index >> 1
            added.append(((level, index), value))
        self._stack.append((level, value))
        self.size += 1
        return added

    def root(self) -> bytes:
        return fold([value for _level, value in self._stack])


def verify_inclusion(leaf_index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 2.1.3.2."""
    if leaf_index >= size:
        return False
    fn, sn, value = leaf_index, size - 1, leaf
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
    """RFC 9162 2.1.4.2 (a size-0 tree is consistent with any; equal sizes need equal roots)."""
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
