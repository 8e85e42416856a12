"""Fennel on typed graphs (runtime/partition/typebalance.py): every node type within its own cap after
the stream, the vertices that lose least moved, a balanced type untouched; and the pipeline's fennel on
a typed graph reporting per-type balance within the tolerance."""

from __future__ import annotations

import numpy as np

from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.partition import typebalance
from graphtrain.runtime.partition.pipeline import partition_graph


def test_caps_are_each_types_share_with_the_tolerance_never_below_a_fair_share() -> None:
    assert typebalance.type_caps(np.array([100, 10, 3]), 4, 0.05).tolist() == [26, 3, 1]


def test_the_excess_leaves_least_loss_first_to_the_part_holding_its_edges() -> None:
    # type 0: 6 vertices all in part 0 (cap 3 with 2 parts): three must go; vertices 3, 4, 5 have their
    # edges in part 1, 0-2 in part 0. Type 1 (vertices 6, 7) is balanced and stays.
    parts = np.array([0, 0, 0, 0, 0, 0, 0, 1], dtype=np.int32)
    ntype = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    counts = np.array([[3, 0], [3, 0], [2, 1], [0, 2], [1, 3], [0, 1], [1, 0], [0, 1]], dtype=np.int32)
    moved = typebalance.rebalance(counts, parts, ntype, typebalance.type_caps(np.array([6, 2]), 2, 0.0))
    assert moved == 3
    assert parts.tolist() == [0, 0, 0, 1, 1, 1, 0, 1]


def typed_planted(n_per_type: int = 400, seed: int = 0) -> Graph:
    """Two communities; the node types skewed across them (type 0 mostly in the first, type 1 in the
    second), so a cut-only partition leaves each type imbalanced."""
    rng = np.random.default_rng(seed)
    n = 2 * n_per_type
    ntype = np.r_[np.zeros(n_per_type, np.int64), np.ones(n_per_type, np.int64)]
    community = np.where(rng.random(n) < np.where(ntype == 0, 0.8, 0.2), 0, 1)
    src = rng.integers(0, n, 12 * n)
    same = community[src]
    pool = [np.flatnonzero(community == c) for c in (0, 1)]
    dst = np.where(
        rng.random(len(src)) < 0.95,
        np.array([pool[c][rng.integers(0, len(pool[c]))] for c in same]),
        rng.integers(0, n, len(src)),
    )
    rel = ntype[src] * 2 + ntype[dst]
    return Graph.from_edges(
        "typed-planted",
        n,
        src,
        dst,
        rel,
        ntype=ntype,
        ntype_names=np.array(["a", "b"]),
        canonical_etypes=np.array([["a", "aa", "a"], ["a", "ab", "b"], ["b", "ba", "a"], ["b", "bb", "b"]]),
    )


def test_fennel_on_a_typed_graph_balances_every_type_and_keeps_most_of_the_cut() -> None:
    g = typed_planted()
    typed = partition_graph(g, 2, "fennel", ["nodes"], 0.05, 0)
    assert typed.info.strategy == "fennel+types"
    per_type = {k: v for k, v in typed.stats.balance.items() if k.startswith("nodes:")}
    assert set(per_type) == {"nodes:a", "nodes:b"}
    assert max(per_type.values()) <= 1.05 + 1e-9, per_type
    # the same graph without types: Fennel alone, one cap for all nodes
    untyped = partition_graph(
        Graph.from_edges("planted", g.num_nodes, *g.edges()), 2, "fennel", ["nodes"], 0.05, 0
    )
    assert typed.stats.edge_cut_fraction < 0.5  # far from random's half
    assert typed.stats.edge_cut_fraction <= untyped.stats.edge_cut_fraction + 0.35
