"""Sampling a typed graph: each sampled edge's type and id are the partition's, a fan-out per edge type
takes min(fan-out, the node's edges of that type) of each relation, one number draws what untyped
sampling draws, and the shard servers (TCP and shared memory), the in-process shards and the numpy
fallback agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import kvstore, partition
from graphtrain.runtime.data.graph import Graph, random_masks
from graphtrain.runtime.graph import DistGraph, sample_blocks, standalone_client
from graphtrain.runtime.graph.fanouts import layer_fanouts
from graphtrain.runtime.kvstore.client.transport import Call
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from tests.runtime.conftest import TOKEN, servers

TYPES = np.array(["user", "item"])
CETS = np.array([["item", "rated", "user"], ["user", "follows", "user"], ["user", "bought", "item"]])


def typed_graph(n_users: int = 300, n_items: int = 100, seed: int = 0) -> Graph:
    """Users 0..n_users-1, items after them; three edge types, several edges per user and type."""
    rng = np.random.default_rng(seed)
    users, items = np.arange(n_users), np.arange(n_users, n_users + n_items)
    rated = (rng.choice(items, 6 * n_users), np.repeat(users, 6))
    follows = (rng.choice(users, 4 * n_users), np.repeat(users, 4))
    bought = (rng.choice(users, 3 * n_items), np.repeat(items, 3))
    src = np.concatenate([rated[0], follows[0], bought[0]])
    dst = np.concatenate([rated[1], follows[1], bought[1]])
    etype = np.repeat([0, 1, 2], [len(rated[0]), len(follows[0]), len(bought[0])])
    n = n_users + n_items
    return Graph.from_edges(
        "shop",
        n,
        src,
        dst,
        etype=etype,
        efeat=rng.random((len(src), 2)).astype(np.float32),
        feat=rng.random((n, 4)).astype(np.float32),
        label=np.where(np.arange(n) < n_users, rng.integers(0, 2, n), -1),
        masks=random_masks(n, 0.6, 0.2, seed),
        ntype=(np.arange(n) >= n_users).astype(np.int64),
        ntype_names=TYPES,
        canonical_etypes=CETS,
        num_classes=2,
    )


@pytest.fixture(scope="module")
def typed_partition(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    g = typed_graph()
    out = tmp_path_factory.mktemp("typed") / "part"
    return g, partition.write(g, partition.partition_graph(g, 2), out)


def _edges_of(cfg_path: Path) -> dict[int, tuple[int, int, int, np.ndarray]]:
    """Every edge of the partition by its global id: (destination, source, type, features)."""
    cfg = partition.load_config(cfg_path)
    out = {}
    for p in range(cfg.num_parts):
        part = partition.load_part(cfg, p, mmap=False)
        lo = part.node_range[0]
        dst = np.repeat(np.arange(lo, part.node_range[1]), np.diff(part.indptr))
        for i in range(len(part.indices)):
            out[part.edge_range[0] + i] = (
                int(dst[i]),
                int(part.indices[i]),
                int(part.etype[i]),
                part.edata["efeat"][i],
            )
    return out


def test_the_partition_keeps_each_type_a_range_and_each_nodes_relations_runs(typed_partition) -> None:
    g, cfg_path = typed_partition
    cfg = partition.load_config(cfg_path)
    maps = partition.load_maps(cfg)
    bounds = np.asarray(cfg.data["type_bounds"])
    for p in range(2):
        types = g.ntype[maps["node_map"][bounds[p, 0] : bounds[p, -1]]]
        assert np.all(np.diff(types) >= 0)  # users, then items
        assert (types == 0).sum() == bounds[p, 1] - bounds[p, 0]
        part = partition.load_part(cfg, p, mmap=False)
        for v in range(len(part.indptr) - 1):
            row = part.etype[part.indptr[v] : part.indptr[v + 1]]
            assert np.all(np.diff(row) >= 0)
    graph = DistGraph(cfg_path, standalone_client(cfg_path))
    ids = np.arange(g.num_nodes)
    assert np.array_equal(graph.node_types(ids), g.ntype[maps["node_map"]])


def check_sample(got, seeds: np.ndarray, edges: dict, per_type: np.ndarray | None, fanout: int) -> None:
    offsets = np.concatenate([[0], np.cumsum(got.counts)])
    for i, v in enumerate(seeds):
        mine = [e for e, (d, *_rest) in edges.items() if d == v]
        a, b = offsets[i], offsets[i + 1]
        for k in range(a, b):
            d, s, t, _ = edges[int(got.eid[k])]
            assert (d, s, t) == (v, got.src[k], got.etype[k])
        assert len(set(got.eid[a:b].tolist())) == b - a  # without replacement
        if per_type is None:
            assert b - a == min(len(mine), fanout) if fanout >= 0 else len(mine)
            continue
        for t in range(len(per_type)):
            have = sum(1 for e in mine if edges[e][2] == t)
            want = have if per_type[t] < 0 else min(have, per_type[t])
            assert int((got.etype[a:b] == t).sum()) == want


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_in_process_shards_sample_real_edges_per_type(typed_partition, backend: str, monkeypatch) -> None:
    g, cfg_path = typed_partition
    monkeypatch.setenv("GRAPHTRAIN_OPTIM_BACKEND", backend)
    graph = DistGraph(cfg_path, standalone_client(cfg_path))
    edges = _edges_of(cfg_path)
    seeds = np.random.default_rng(1).permutation(g.num_nodes)[:60]
    for per_type, fanout in ((None, 5), (None, -1), (np.array([2, 0, -1]), -1), (np.array([1, 3, 1]), -1)):
        got = graph.sample_edges(seeds, fanout, 7, per_type)
        check_sample(got, seeds, edges, per_type, fanout)


def test_one_fanout_draws_what_untyped_sampling_draws(typed_partition) -> None:
    g, cfg_path = typed_partition
    graph = DistGraph(cfg_path, standalone_client(cfg_path))
    seeds = np.arange(0, g.num_nodes, 3)
    typed = graph.sample_edges(seeds, 4, 11)
    src, counts = graph.sample_neighbors(seeds, 4, 11)
    assert np.array_equal(typed.src, src) and np.array_equal(typed.counts, counts)


def test_blocks_carry_types_and_features_and_fanouts_resolve_by_name(typed_partition) -> None:
    g, cfg_path = typed_partition
    graph = DistGraph(cfg_path, standalone_client(cfg_path))
    fanouts = layer_fanouts([5, 5], {"rated": [2, 1], "user:follows:user": [0, 0]}, graph.canonical_etypes)
    assert [f.tolist() for f in fanouts] == [[2, 0, 5], [1, 0, 5]]
    mb = sample_blocks(graph, np.arange(0, 300, 5), fanouts, seed=3)
    edges = _edges_of(cfg_path)
    for b in mb.blocks:
        assert b.etype is not None and b.efeat is not None and b.eid is not None
        assert not (b.etype == 1).any()  # follows: 0 of them
        for k in range(len(b.eid)):
            np.testing.assert_array_equal(b.efeat[k].numpy(), edges[int(b.eid[k])][3])


@pytest.mark.timeout(180)
def test_shard_servers_answer_typed_samples_over_tcp_and_shared_memory(typed_partition, ckroot: Path) -> None:
    g, cfg_path = typed_partition
    cfg = partition.load_config(cfg_path)
    bounds = cfg.node_bounds
    seeds = np.random.default_rng(2).permutation(g.num_nodes)[:80]
    per_type = np.array([2, 1, -1])
    local = standalone_client(cfg_path)
    want = local.sample_edges(seeds, -1, bounds, 5, per_type)
    with servers(2, ckroot, "--partition", str(cfg_path), "--shm") as srv:
        addresses = [s.address for s in srv]
        remote = kvstore.connect(addresses, TOKEN)
        mapped = kvstore.connect(addresses, TOKEN, shm=True)
        assert isinstance(mapped.transport.local_graph(0), GraphPart)
        for client in (remote, mapped):
            got = client.sample_edges(seeds, -1, bounds, 5, per_type)
            for field in ("src", "counts", "etype", "eid"):
                assert np.array_equal(getattr(got, field), getattr(want, field)), field
        feats = remote.pull("edata.efeat", want.eid, cfg.edge_bounds, (2,), np.float32)
        edges = _edges_of(cfg_path)
        np.testing.assert_array_equal(feats, np.stack([edges[int(e)][3] for e in want.eid]))
        with pytest.raises(Exception, match="type_fanouts must list 1 to 4096"):
            remote.sample_edges(seeds, -1, bounds, 5, np.array([1] * 5000))
        with pytest.raises(Exception, match="type_fanouts' must hold integers"):  # the server's own check
            remote.transport.call_many(
                [Call(0, "sample", None, [seeds[:3]], {"fanout": -1, "type_fanouts": [1, -7]})]
            )
        remote.close()
        mapped.close()
