"""The Merkle tree's pure functions against RFC 9162's definitions, computed the slow way (A4)."""

from __future__ import annotations

import hashlib

import pytest

from aimon_admin.audit import merkle

LEAVES = [merkle.leaf_hash(f"leaf {i}".encode()) for i in range(40)]


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 2.1.1, as written."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.node_hash(mth(leaves[:k]), mth(leaves[k:]))


def path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 2.1.3.1."""
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if m < k:
        return [*path(m, leaves[:k]), mth(leaves[k:])]
    return [*path(m - k, leaves[k:]), mth(leaves[:k])]


def subproof(m: int, leaves: list[bytes], complete: bool) -> list[bytes]:
    """RFC 9162 2.1.4.1."""
    if m == len(leaves):
        return [] if complete else [mth(leaves)]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if m <= k:
        return [*subproof(m, leaves[:k], complete), mth(leaves[k:])]
    return [*subproof(m - k, leaves[k:], False), mth(leaves[:k])]


def stored(size: int) -> dict[merkle.Node, bytes]:
    frontier = merkle.Frontier()
    nodes: dict[merkle.Node, bytes] = {}
    for leaf in LEAVES[:size]:
        nodes.update(frontier.push(leaf))
    return nodes


@pytest.mark.parametrize("size", range(0, 41))
def test_root_from_stored_nodes_is_mth(size: int) -> None:  # A4
    frontier = merkle.Frontier()
    for leaf in LEAVES[:size]:
        frontier.push(leaf)
    assert frontier.root() == mth(LEAVES[:size])
    assert merkle.range_hash(0, size, stored(size)) == mth(LEAVES[:size])


def test_append_adds_the_nodes_the_frontier_adds() -> None:  # A4
    frontier = merkle.Frontier()
    nodes: dict[merkle.Node, bytes] = {}
    for index, leaf in enumerate(LEAVES):
        siblings = {node: nodes[node] for node in merkle.parents_on_append(index)}
        added = merkle.nodes_on_append(index, leaf, siblings)
        assert added == frontier.push(leaf)
        nodes.update(added)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 9, 16, 17, 31, 40])
def test_inclusion_proofs_are_rfc_paths_and_verify(size: int) -> None:  # A4
    nodes, root = stored(size), mth(LEAVES[:size])
    for m in range(size):
        proof = [merkle.range_hash(s, e, nodes) for s, e in merkle.inclusion_ranges(m, size)]
        assert proof == path(m, LEAVES[:size])
        assert merkle.verify_inclusion(m, size, LEAVES[m], proof, root)
        assert not merkle.verify_inclusion(m, size, LEAVES[(m + 1) % 40], proof, root)
        if proof:
            assert not merkle.verify_inclusion(m, size, LEAVES[m], proof[:-1], root)


@pytest.mark.parametrize("new", [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 32, 33, 40])
def test_consistency_proofs_are_rfc_proofs_and_verify(new: int) -> None:  # A4
    nodes, new_root = stored(new), mth(LEAVES[:new])
    for old in range(1, new + 1):
        proof = [merkle.range_hash(s, e, nodes) for s, e in merkle.consistency_ranges(old, new)]
        assert proof == (subproof(old, LEAVES[:new], True) if old < new else [])
        old_root = mth(LEAVES[:old])
        assert merkle.verify_consistency(old, new, old_root, new_root, proof)
        other = mth(LEAVES[1 : old + 1])
        assert not merkle.verify_consistency(old, new, other, new_root, proof)
        if old < new:
            assert not merkle.verify_consistency(old, new, old_root, mth(LEAVES[1 : new + 1]), proof)


def test_hashes_are_rfc_9162s() -> None:  # A4: leaf 0x00 || data, node 0x01 || left || right
    assert merkle.leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    left, right = LEAVES[0], LEAVES[1]
    assert merkle.node_hash(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
    assert merkle.EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
