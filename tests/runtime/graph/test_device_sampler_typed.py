"""Sampling a typed graph on the trainer's device (device_sampler.py), exercised on the host's tensors: the
joined graph's edge types, ids and features, and blocks equal to the host sampler's edge for edge, with one
fan-out and with one per edge type (tests/gpu/test_device_sampler.py runs the same on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import partition
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.graph import DistGraph, sample_blocks, standalone_client
from graphtrain.runtime.graph import device_sampler as ds
from graphtrain.runtime.graph.loader import MiniBatch
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native.cuda import Desc
from tests.runtime.graph.test_typed_sampling import typed_graph

CPU = torch.device("cpu")
# one fan-out per layer; one per edge type (rated, follows, bought), with "all" and "none" among them
FANOUTS = [
    [4, 2],
    [-1, -1],
    [np.array([3, 1, 2]), np.array([-1, 0, 1])],
    [np.array([0, 0, 0]), np.array([2, 2, 2])],
]


def three_parts(tmp_path_factory: pytest.TempPathFactory) -> DistGraph:
    """test_typed_sampling's shop graph (3 edge types, edge features) in 3 parts, standalone."""
    g = typed_graph()
    config = partition.write(g, partition.partition_graph(g, 3), tmp_path_factory.mktemp("typed") / "part")
    return DistGraph(config, standalone_client(config))


@pytest.fixture(scope="module")
def dist_graph(tmp_path_factory: pytest.TempPathFactory) -> DistGraph:
    return three_parts(tmp_path_factory)


@pytest.fixture(scope="module")
def on_device(dist_graph: DistGraph) -> ds.DeviceGraph:
    graph = ds.device_graph(
        "device", CPU, dist_graph.client, dist_graph.num_nodes, True, dist_graph.edata["efeat"]
    )
    assert graph is not None and graph.typed and graph.efeat is not None
    return graph


def same_blocks(mine: MiniBatch, host: MiniBatch) -> None:
    assert np.array_equal(mine.input_nodes, host.input_nodes)
    for b, h in zip(mine.blocks, host.blocks, strict=True):
        assert (b.num_src, b.num_dst) == (h.num_src, h.num_dst)
        assert torch.equal(b.src, h.src) and torch.equal(b.dst, h.dst)
        assert torch.equal(b.etype, h.etype) and np.array_equal(np.asarray(b.eid), h.eid)
        assert torch.equal(b.efeat, h.efeat)
        assert torch.equal(b.mean.to_dense(), h.mean.to_dense())
        assert torch.equal(b.mean_t.to_dense(), h.mean_t.to_dense()) and torch.equal(b.order, h.order)


def test_the_joined_graph_keeps_each_edges_type_id_and_features(dist_graph, on_device) -> None:
    """Edge e of the joined CSR is the partition's edge eids[e]: its source, type and feature row."""
    cfg = dist_graph.config
    for p in range(cfg.num_parts):
        part = partition.load_part(cfg, p, mmap=False)
        lo, e0 = part.node_range[0], part.edge_range[0]
        for local in range(0, part.node_range[1] - lo, 17):
            a, b = int(on_device.indptr[lo + local]), int(on_device.indptr[lo + local + 1])
            pa, pb = int(part.indptr[local]), int(part.indptr[local + 1])
            assert on_device.indices[a:b].tolist() == part.indices[pa:pb].tolist()
            assert on_device.etype[a:b].tolist() == part.etype[pa:pb].tolist()
            assert on_device.eids[a:b].tolist() == list(range(e0 + pa, e0 + pb))
            assert np.array_equal(on_device.efeat[a:b].numpy(), part.edata["efeat"][pa:pb])


@pytest.mark.parametrize("fanouts", FANOUTS, ids=["one", "all", "per-type", "none-then-two"])
def test_typed_blocks_are_the_host_samplers_edge_for_edge(dist_graph, on_device, fanouts) -> None:
    """The same request seed per layer, per-node (and per-relation) streams and picks (sample_math.h's
    edges_draw): the joined graph draws what the shards draw, with each edge's type, id and features."""
    seeds = np.arange(0, 400, 3)
    for seed in (0, 11):
        same_blocks(
            ds.sample_blocks_on(on_device, seeds, fanouts, seed),
            sample_blocks(dist_graph, seeds, fanouts, seed),
        )


def test_per_type_fanouts_take_at_most_their_number_of_each_relation(on_device) -> None:
    seeds = torch.arange(0, 400)
    fan = np.array([3, 1, 0])
    pos, counts = on_device.sample_edges(seeds, fan, 5)
    assert int(counts.sum()) == len(pos) and len(set(pos.tolist())) == len(pos)
    offset = 0
    for s, c in zip(seeds.tolist(), counts.tolist(), strict=True):
        a, b = int(on_device.indptr[s]), int(on_device.indptr[s + 1])
        mine = pos[offset : offset + c]
        offset += c
        assert all(a <= int(q) < b for q in mine)  # the node's own in-edges
        types = on_device.etype[mine]
        row = on_device.etype[a:b]
        for t in range(3):
            assert int((types == t).sum()) == min(int(fan[t]), int((row == t).sum()))


def test_the_cuda_cores_typed_call_refuses_what_it_cannot_sample() -> None:
    """The checks before the CUDA core's typed call (pure: no GPU needed)."""
    gpu = torch.device("cuda", 0)

    def d(shape: tuple[int, ...], dtype: torch.dtype = torch.int64, device: torch.device = gpu) -> Desc:
        return Desc(device, dtype, shape, True)

    ok = (d((11,)), d((40,)), d((40,)), d((5,)), d((3,)))
    cuda.check_sample_edges(*ok)
    cuda.check_sample_edges(d((11,)), d((40,)), None, d((5,)), None)  # one fan-out needs no types
    with pytest.raises(SparseInputError, match="etype must have shape"):
        cuda.check_sample_edges(d((11,)), d((40,)), d((39,)), d((5,)), d((3,)))
    with pytest.raises(SparseInputError, match="etype must be torch.int64"):
        cuda.check_sample_edges(d((11,)), d((40,)), d((40,), torch.int32), d((5,)), d((3,)))
    with pytest.raises(SparseInputError, match="need the graph's edge types"):
        cuda.check_sample_edges(d((11,)), d((40,)), None, d((5,)), d((3,)))
    with pytest.raises(SparseInputError, match="type_fanouts is on cpu"):
        cuda.check_sample_edges(d((11,)), d((40,)), d((40,)), d((5,)), d((3,), device=CPU))
    with pytest.raises(SparseInputError, match="type_fanouts must be 1-D"):
        cuda.check_sample_edges(d((11,)), d((40,)), d((40,)), d((5,)), d((3, 1)))


def test_a_typed_graph_on_the_device_counts_its_edge_arrays_in_its_size(dist_graph) -> None:
    from graphtrain.runtime.graph.device_sampler import graph_bytes, local_parts

    parts = local_parts(dist_graph.client)
    edges = sum(len(p.indices) for p in parts)
    nodes = sum(len(p.indptr) for p in parts)
    assert graph_bytes(parts) == 8 * nodes + 8 * edges  # untyped: the CSR alone
    assert graph_bytes(parts, typed=True) == 8 * nodes + 24 * edges  # indices, types and ids
    assert graph_bytes(parts, typed=True, edge_dim=2) == 8 * nodes + 32 * edges


def test_what_a_typed_device_graph_cannot_sample_is_refused_naming_it(dist_graph, on_device) -> None:
    """Per-type fan-outs listing no type (the servers' client refuses them too); a typed graph whose
    mapped parts lost their edge types (auto samples on the host, device says why); a damaged CSR."""
    from dataclasses import replace

    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.graph.device_sampler import local_parts

    with pytest.raises(ValueError, match="type_fanouts must list 1 to 4096 fan-outs"):
        on_device.sample_edges(torch.arange(3), np.array([], dtype=np.int64), 0)

    class Untyped:  # the same parts, their edge types gone
        num_shards = dist_graph.client.num_shards

        class transport:  # noqa: N801 - stands for the client's transport
            @staticmethod
            def local_graph(shard: int):
                return replace(local_parts(dist_graph.client)[shard], etype=None)

    n = dist_graph.num_nodes
    assert ds.device_graph("auto", CPU, Untyped(), n, typed=True) is None
    with pytest.raises(
        GraphtrainError, match="the graph is typed and a shard's mapped graph carries no edge"
    ):
        ds.device_graph("device", CPU, Untyped(), n, typed=True)
    parts = local_parts(dist_graph.client)
    with pytest.raises(ValueError, match="the graph is typed but some of its parts carry no edge types"):
        ds.DeviceGraph.of_parts([*parts[:-1], replace(parts[-1], etype=None)], n, CPU, typed=True)
    broken = replace(parts[0], indptr=parts[0].indptr.copy())
    broken.indptr[1] = broken.indptr[2] + 1
    with pytest.raises(ValueError, match="row pointer decreases"):
        ds.DeviceGraph.of_parts([broken, *parts[1:]], n, CPU)


def test_a_typed_graph_without_edges_samples_empty_blocks() -> None:
    none = torch.zeros(0, dtype=torch.int64)
    graph = ds.DeviceGraph(torch.zeros(5, dtype=torch.int64), none, none, none)
    for fanout in (3, np.array([2, -1])):
        pos, counts = graph.sample_edges(torch.tensor([0, 3]), fanout, 1)
        assert len(pos) == 0 and counts.tolist() == [0, 0]
    mb = ds.sample_blocks_on(graph, np.array([0, 3]), [np.array([1, 1]), 2], seed=2)
    assert [b.num_src for b in mb.blocks] == [2, 2] and all(len(b.src) == 0 for b in mb.blocks)
