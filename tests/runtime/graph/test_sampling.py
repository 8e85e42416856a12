"""Neighbour sampling, blocks and splits on a real partition held by in-process shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import partition
from graphtrain.runtime.graph import DistGraph, NeighborLoader, edge_split, node_split, sample_blocks
from graphtrain.runtime.graph.dist_graph import standalone_client
from graphtrain.runtime.graph.loader import relabel
from graphtrain.runtime.partition import load_config, load_maps, reassemble
from tests.conftest import planted_graph


@pytest.fixture(scope="module")
def dist_graph(tmp_path_factory) -> DistGraph:
    g = planted_graph(n=600, k=3, seed=5)
    g.feat = None  # sparse features are not served
    result = partition.partition_graph(g, 3, "metis", ["nodes"], 0.1, 0, None)
    config = partition.write(g, result, tmp_path_factory.mktemp("part") / "p")
    return DistGraph(config, standalone_client(config))


def in_neighbours(graph: DistGraph) -> dict[int, list[int]]:
    """Brute force from the reassembled original graph, in new ids."""
    g = reassemble(graph.config)
    new = load_maps(graph.config)["node_map_inverse"]
    src = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    out: dict[int, list[int]] = {}
    for s, d in zip(new[src], new[g.indices], strict=True):
        out.setdefault(int(d), []).append(int(s))
    return out


def test_sampling_returns_real_in_neighbours_up_to_the_fanout(dist_graph: DistGraph) -> None:
    truth = in_neighbours(dist_graph)
    seeds = np.random.default_rng(0).choice(dist_graph.num_nodes, 200, replace=False)
    for fanout in (1, 3, -1):
        src, counts = dist_graph.sample_neighbors(seeds, fanout, seed=1)
        assert counts.sum() == len(src)
        offset = 0
        for s, c in zip(seeds, counts, strict=True):
            mine = truth.get(int(s), [])
            got = src[offset : offset + c].tolist()
            offset += c
            assert c == (len(mine) if fanout == -1 else min(fanout, len(mine)))
            # without replacement: a sampled multiset is a sub-multiset of the true in-neighbours
            assert all(got.count(x) <= mine.count(x) for x in set(got))
        again, _ = dist_graph.sample_neighbors(seeds, fanout, seed=1)
        assert np.array_equal(src, again)  # seeded


def test_blocks_follow_dgl_conventions(dist_graph: DistGraph) -> None:
    seeds = np.arange(0, 600, 7)
    mb = sample_blocks(dist_graph, seeds, [4, 2], seed=3)
    assert [b.num_dst for b in mb.blocks][-1] == len(seeds)
    assert mb.blocks[1].num_src == mb.blocks[0].num_dst  # layers chain
    assert mb.blocks[0].num_src == len(mb.input_nodes)
    assert np.array_equal(mb.input_nodes[: len(seeds)], seeds)  # dst nodes come first
    for b in mb.blocks:
        assert int(b.src.max()) < b.num_src and int(b.dst.max()) < b.num_dst
        dense = b.mean.to_dense()
        counts = torch.bincount(b.dst, minlength=b.num_dst)
        assert torch.allclose(dense.sum(1)[counts > 0], torch.ones(int((counts > 0).sum())))
        assert torch.equal(b.mean_t.to_dense(), dense.T)


def test_relabel_is_first_occurrence_order() -> None:
    nodes, local = relabel(np.array([5, 2]), np.array([7, 2, 9, 7, 5]))
    assert nodes.tolist() == [5, 2, 7, 9]
    assert local.tolist() == [2, 1, 3, 2, 0]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_loader_covers_every_seed_once_per_epoch(dist_graph: DistGraph, prefetch: int) -> None:
    ids = node_split(dist_graph.config, "train", 0, 1)
    loader = NeighborLoader(dist_graph, ids, [3, 3], 64, seed=0, prefetch=prefetch)
    seen = np.concatenate([mb.seeds for mb in loader])
    assert np.array_equal(np.sort(seen), np.sort(ids))


def test_prefetching_loader_makes_the_inline_batches(dist_graph: DistGraph) -> None:
    ids = node_split(dist_graph.config, "train", 0, 1)
    fetch = lambda mb: mb.data.update(x=dist_graph.ndata["label"][mb.input_nodes])  # noqa: E731
    inline, ahead = (
        list(NeighborLoader(dist_graph, ids, [3, 3], 64, seed=1, prefetch=p, fetch=fetch)) for p in (0, 3)
    )
    assert len(inline) == len(ahead) > 1
    for a, b in zip(inline, ahead, strict=True):
        assert np.array_equal(a.input_nodes, b.input_nodes)
        assert torch.equal(a.data["x"], b.data["x"])
        assert torch.equal(a.blocks[0].src, b.blocks[0].src)


def test_splits_are_equal_disjoint_and_partition_local(dist_graph: DistGraph) -> None:
    cfg = dist_graph.config
    parts = [node_split(cfg, "train", r, 3) for r in range(3)]
    assert len({len(p) for p in parts}) == 1
    assert len(np.unique(np.concatenate(parts))) == sum(map(len, parts))
    owners = [np.bincount(dist_graph.partition_of(p), minlength=3).argmax() for p in parts]
    assert sorted(owners) == [0, 1, 2]  # each trainer mostly on its own partition
    triples = [edge_split(cfg, r, 2) for r in range(2)]
    assert len(triples[0]) == len(triples[1]) == cfg.data["num_edges"] // 2
    with pytest.raises(ValueError, match="rank 2"):
        node_split(cfg, "train", 2, 2)


def test_standalone_client_checks_partition_count(dist_graph: DistGraph, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="3 partitions but 2 shards"):
        DistGraph(load_config(dist_graph.config.path), standalone_client_of(2))


def standalone_client_of(n: int):
    from graphtrain.runtime import kvstore

    return kvstore.standalone(n)
