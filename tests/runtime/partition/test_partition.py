"""Partitioning: relabeling, balance, counted statistics, the native balancer and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graphtrain.runtime import partition
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import MemoryEstimateError, PartitionError
from graphtrain.runtime.partition import adjacency, assign, constraints, relabel
from tests.conftest import planted_graph


def brute_force_cut(g: Graph, parts: np.ndarray) -> tuple[int, int]:
    src, dst = g.edges()
    pairs = {(min(a, b), max(a, b)) for a, b in zip(src.tolist(), dst.tolist(), strict=True) if a != b}
    return sum(parts[a] != parts[b] for a, b in pairs), len(pairs)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_metis_balances_every_constraint(planted: Graph, k: int) -> None:
    r = partition.partition_graph(planted, k)
    for name, value in r.stats.balance.items():
        assert value <= 1.05 + 1e-9, (name, value)
    rnd = partition.partition_graph(planted, k, algorithm="random")
    assert r.stats.edge_cut_fraction <= rnd.stats.edge_cut_fraction / 2


def test_statistics_are_counted(planted: Graph) -> None:
    r = partition.partition_graph(planted, 4)
    cut, total = brute_force_cut(planted, r.parts)
    assert (r.stats.cut_edges, r.stats.num_undirected_edges) == (cut, total)
    assert r.stats.nodes_per_part == np.bincount(r.parts, minlength=4).tolist()
    # stored edges = in-edges of each partition's nodes
    _, dst = planted.edges()
    assert r.stats.edges_per_part == np.bincount(r.parts[dst], minlength=4).tolist()
    # halo = distinct remote nodes adjacent (either direction) to the partition
    src, dst = planted.edges()
    for p in range(4):
        remote = {int(b) for a, b in zip(src, dst, strict=True) if r.parts[a] == p and r.parts[b] != p}
        remote |= {int(a) for a, b in zip(src, dst, strict=True) if r.parts[b] == p and r.parts[a] != p}
        expected = np.sort(r.relabeling.node_map_inverse[sorted(remote)])
        assert np.array_equal(r.halos[p], expected)
        assert r.stats.halo_per_part[p] == len(remote)


def test_relabeling_gives_contiguous_ranges(planted: Graph) -> None:
    r = partition.partition_graph(planted, 4)
    rl = r.relabeling
    assert np.array_equal(np.sort(rl.node_map), np.arange(planted.num_nodes))
    assert np.array_equal(rl.node_map[rl.node_map_inverse], np.arange(planted.num_nodes))
    for p in range(4):
        ids = rl.node_map[rl.node_bounds[p] : rl.node_bounds[p + 1]]
        assert np.all(r.parts[ids] == p)
        assert np.all(np.diff(ids) > 0), "original order is kept inside a partition"
        edges = slice(rl.edge_bounds[p], rl.edge_bounds[p + 1])
        assert np.all(relabel.owner_of(rl.node_bounds, rl.dst[edges]) == p)
    assert np.array_equal(np.sort(rl.edge_map), np.arange(planted.num_edges))


def test_random_assignment_is_balanced_and_seeded() -> None:
    parts = assign.random_assign(1001, 4, seed=1)
    counts = np.bincount(parts)
    assert counts.max() - counts.min() <= 1
    assert np.array_equal(parts, assign.random_assign(1001, 4, seed=1))
    assert not np.array_equal(parts, assign.random_assign(1001, 4, seed=2))


def test_random_partition_is_independent_of_the_split(planted: Graph) -> None:
    r = partition.partition_graph(planted, 4, algorithm="random")
    assert r.stats.balance["val"] < 1.2  # the split and the partition use different random streams


def test_one_part_and_one_node_per_part() -> None:
    g = planted_graph(n=60, k=2, avg_degree=4)
    one = partition.partition_graph(g, 1)
    assert one.stats.cut_edges == 0 and one.relabeling.node_bounds.tolist() == [0, 60]
    each = partition.partition_graph(g, 60, algorithm="random", balance=["nodes"])
    assert each.stats.nodes_per_part == [1] * 60


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        ({"num_parts": 0}, PartitionError, "between 1 and the node count"),
        ({"num_parts": 2001}, PartitionError, "between 1 and the node count 2000"),
        ({"num_parts": 2, "algorithm": "spectral"}, PartitionError, "unknown algorithm"),
        ({"num_parts": 2, "balance": ["nodes", "colour"]}, PartitionError, "colour"),
        ({"num_parts": 2, "max_imbalance": 0}, PartitionError, "max_imbalance"),
        ({"num_parts": 2, "memory_limit": 1024}, MemoryEstimateError, "above the memory limit"),
    ],
)
def test_bad_partition_requests(planted: Graph, kwargs: dict, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle):
        partition.partition_graph(planted, **kwargs)


def test_constraints_without_data_are_skipped() -> None:
    g = Graph.from_edges("g", 4, [0, 1, 2], [1, 2, 3])
    cons = constraints.build(g, ["nodes", "train", "degree", "nodes"])
    assert cons.names == ["nodes", "degree"]
    assert "train" in cons.skipped
    assert cons.weights[:, 1].tolist() == [0, 1, 1, 1]  # in-degree: the edges each node's partition stores


def test_undirected_adjacency_drops_loops_and_duplicates() -> None:
    src = np.array([0, 0, 1, 2, 2] + [3] * 300)
    dst = np.array([1, 1, 0, 2, 3] + [4] * 300)  # 300 duplicates must not wrap around a small int type
    adj = adjacency.undirected(Graph.from_edges("g", 5, src, dst))
    assert adj.toarray().tolist() == [
        [0, 1, 0, 0, 0],
        [1, 0, 0, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 1, 0, 1],
        [0, 0, 0, 1, 0],
    ]


def test_leaf_contraction_keeps_weights_and_neighbours() -> None:
    # path 0-1-2-3 plus leaf 4 on 1, and an isolated pair 5-6
    g = Graph.from_edges("g", 7, [0, 1, 2, 4, 5], [1, 2, 3, 1, 6])
    adj = adjacency.undirected(g)
    w = np.stack([np.ones(7, np.int64), np.arange(7, dtype=np.int64)], axis=1)
    core = adjacency.contract_leaves(adj, w)
    owner = core.owner
    assert owner[0] == owner[1] == owner[4] and owner[3] == owner[2] and owner[5] == owner[6]
    assert core.weights.sum(axis=0).tolist() == w.sum(axis=0).tolist()
    assert core.adj.shape[0] == 3 and core.adj.nnz == 2  # 1-2 remains; the pair is one vertex


def test_native_refinement_respects_caps_and_never_raises_the_cut(planted: Graph) -> None:
    cons = constraints.build(planted, ["nodes", "degree"])
    core = adjacency.contract_leaves(adjacency.undirected(planted), cons.weights)
    start = assign.random_assign(core.adj.shape[0], 4, seed=0)
    loose = assign.caps(core.weights, 4, 0.5)

    def cut(where: np.ndarray) -> int:
        upper = sp.triu(core.adj, k=1, format="coo")
        return int(np.count_nonzero(where[upper.row] != where[upper.col]))

    refined, _, moves = assign.refine(core, start, 4, loose, seed=0)
    assert moves > 0 and cut(refined) < cut(start)
    for c in range(2):
        assert np.bincount(refined, weights=core.weights[:, c], minlength=4).max() <= loose[c]
    again, _, _ = assign.refine(core, start, 4, loose, seed=0)
    assert np.array_equal(refined, again)
    tight = assign.caps(core.weights, 4, 0.05)
    balanced, balance_moves, _ = assign.refine(core, np.zeros_like(start), 4, tight, seed=0)
    assert balance_moves > 0
    for c in range(2):
        assert np.bincount(balanced, weights=core.weights[:, c], minlength=4).max() <= tight[c]


def test_native_wrapper_refuses_wrong_dtypes(planted: Graph) -> None:
    from graphtrain.runtime.native import ptr

    with pytest.raises(TypeError, match="where"):
        ptr(np.zeros(3, np.int64), np.int32, "where")
    with pytest.raises(TypeError, match="indices"):
        ptr(np.zeros((3, 2), np.int64)[:, 0], np.int64, "indices")
