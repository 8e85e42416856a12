"""Sampling on the trainer's device (device_sampler.py), exercised on the host's tensors: the same torch
ops run on a GPU (tests/gpu/test_device_sampler.py). Checked against the host sampler and brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import partition
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph import DistGraph, NeighborLoader, handover, node_split, sample_blocks
from graphtrain.runtime.graph import device_sampler as ds
from graphtrain.runtime.graph.dist_graph import standalone_client
from graphtrain.runtime.graph.loader import mean_matrices, relabel
from graphtrain.runtime.kvstore.tables.graphpart import GraphPart
from tests.conftest import planted_graph
from tests.runtime.graph.test_sampling import in_neighbours

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def dist_graph(tmp_path_factory) -> DistGraph:
    g = planted_graph(n=600, k=3, seed=5)
    g.feat = None
    result = partition.partition_graph(g, 3, "metis", ["nodes"], 0.1, 0, None)
    config = partition.write(g, result, tmp_path_factory.mktemp("part") / "p")
    return DistGraph(config, standalone_client(config))


@pytest.fixture(scope="module")
def on_device(dist_graph: DistGraph) -> ds.DeviceGraph:
    graph = ds.device_graph("device", CPU, dist_graph.client, dist_graph.num_nodes)
    assert graph is not None
    return graph


def test_the_joined_csr_holds_every_in_edge_of_every_node(dist_graph: DistGraph, on_device) -> None:
    truth = in_neighbours(dist_graph)
    assert on_device.num_nodes == dist_graph.num_nodes
    for v in range(dist_graph.num_nodes):
        row = on_device.indices[on_device.indptr[v] : on_device.indptr[v + 1]].tolist()
        assert sorted(row) == sorted(truth.get(v, [])), v


def test_parts_that_do_not_cover_the_nodes_are_refused() -> None:
    part = GraphPart(0, 2, np.array([0, 1, 2]), np.array([1, 0]))
    gap = GraphPart(3, 4, np.array([0, 0]), np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match=r"\[0, 2\), \[3, 4\) do not cover its 4 nodes"):
        ds.DeviceGraph.of_parts([part, gap], 4, CPU)


def test_samples_are_real_in_neighbours_without_replacement_and_seeded(dist_graph, on_device) -> None:
    truth = in_neighbours(dist_graph)
    seeds = torch.from_numpy(np.random.default_rng(0).choice(dist_graph.num_nodes, 200, replace=False))
    for fanout in (1, 3, -1):

        def draw(seed: int, fanout: int = fanout):
            return on_device.sample(seeds, fanout, seed)

        src, counts = draw(1)
        assert int(counts.sum()) == len(src)
        offset = 0
        for s, c in zip(seeds.tolist(), counts.tolist(), strict=True):
            mine = truth.get(s, [])
            got = src[offset : offset + c].tolist()
            offset += c
            assert c == (len(mine) if fanout == -1 else min(fanout, len(mine)))
            assert all(got.count(x) <= mine.count(x) for x in set(got))
        assert torch.equal(src, draw(1)[0])  # seeded by the batch
        if fanout == 1:
            assert not torch.equal(src, draw(2)[0])


def test_every_neighbour_is_drawn_evenly() -> None:
    """Node 0 has in-neighbours 1..8, fanout 2: over 4,000 draws each is taken about 1/4 of the time."""
    graph = ds.DeviceGraph(torch.tensor([0, 8] + [8] * 8), torch.arange(1, 9))
    hits = torch.zeros(9)
    for seed in range(4000):
        src, counts = graph.sample(torch.tensor([0]), 2, seed)
        assert counts.tolist() == [2] and src[0] != src[1]
        hits[src] += 1
    assert torch.allclose(hits[1:] / 4000, torch.full((8,), 0.25), atol=0.03)


def test_relabel_and_mean_matrices_match_the_host_ones() -> None:
    rng = np.random.default_rng(3)
    frontier = rng.choice(1000, 50, replace=False)
    counts = rng.integers(0, 6, 50)
    src = rng.integers(0, 1000, int(counts.sum()))
    nodes, local = relabel(frontier, src)
    t_nodes, t_local = ds.relabel(torch.from_numpy(frontier), torch.from_numpy(src), 1000)
    assert t_nodes.tolist() == nodes.tolist() and t_local.tolist() == local.tolist()
    a, a_t, order = mean_matrices(counts, local, len(nodes))
    dst, t_a, t_a_t, t_order = ds.mean_matrices(torch.from_numpy(counts), t_local, len(nodes))
    assert dst.tolist() == np.repeat(np.arange(50), counts).tolist()
    assert torch.equal(t_a.to_dense(), a.to_dense()) and torch.equal(t_a_t.to_dense(), a_t.to_dense())
    assert torch.equal(t_order, order)  # the edges by source, which attention's backward walks


@pytest.mark.parametrize("fanouts", [[-1, -1], [4, 2], [1, 1]])
def test_blocks_are_the_host_samplers_edge_for_edge(dist_graph, on_device, fanouts) -> None:
    """The same request seed per layer, per-node streams and picks (sample_math.h): the joined graph
    draws what the shards draw for their own seeds."""
    seeds = np.arange(0, 600, 7)
    host = sample_blocks(dist_graph, seeds, fanouts, seed=11)
    mine = ds.sample_blocks_on(on_device, seeds, fanouts, seed=11)
    assert np.array_equal(mine.input_nodes, host.input_nodes)
    for b, h in zip(mine.blocks, host.blocks, strict=True):
        assert (b.num_src, b.num_dst) == (h.num_src, h.num_dst)
        assert torch.equal(b.src, h.src) and torch.equal(b.dst, h.dst)
        assert torch.equal(b.mean.to_dense(), h.mean.to_dense())
        assert torch.equal(b.mean_t.to_dense(), h.mean_t.to_dense())
        assert torch.equal(b.order, h.order)


def test_sampled_blocks_follow_dgl_conventions(on_device) -> None:
    seeds = np.arange(0, 600, 7)
    mb = ds.sample_blocks_on(on_device, seeds, [4, 2], seed=3)
    assert mb.blocks[-1].num_dst == len(seeds) and mb.blocks[1].num_src == mb.blocks[0].num_dst
    assert mb.blocks[0].num_src == len(mb.input_nodes) and np.array_equal(mb.input_nodes[: len(seeds)], seeds)
    for b in mb.blocks:
        dense = b.mean.to_dense()
        has = torch.bincount(b.dst, minlength=b.num_dst) > 0
        assert torch.allclose(dense.sum(1)[has], torch.ones(int(has.sum())))
        assert torch.equal(b.mean_t.to_dense(), dense.T)
    again = ds.sample_blocks_on(on_device, seeds, [4, 2], seed=3)
    assert np.array_equal(again.input_nodes, mb.input_nodes)
    with pytest.raises(ValueError, match="distinct"):
        ds.sample_blocks_on(on_device, np.array([1, 1]), [2])


def test_the_loader_takes_the_device_sampler(dist_graph, on_device) -> None:
    ids = node_split(dist_graph.config, "train", 0, 1)
    sampler = lambda seeds, fanouts, seed: ds.sample_blocks_on(on_device, seeds, fanouts, seed)  # noqa: E731
    loader = NeighborLoader(dist_graph, ids, [3, 2], 64, seed=0, sampler=sampler)
    seen = np.concatenate([mb.seeds for mb in loader])
    assert sorted(seen.tolist()) == sorted(ids.tolist())


@pytest.mark.parametrize(
    ("setting", "device", "mapped", "nbytes", "room", "expect"),
    [
        ("host", "cuda", True, 1, 100, False),
        ("auto", "cuda", True, 25, 100, True),
        ("auto", "cuda", True, 26, 100, False),  # more than a quarter of the free memory: host
        ("auto", "cuda", False, 1, 100, False),  # a shard on another host
        ("auto", "cpu", True, 1, None, False),  # a CPU trainer samples on the host unless told
        ("device", "cpu", True, 1, None, True),
        ("device", "cuda", True, 25, 100, True),
    ],
)
def test_where_a_trainer_samples(setting, device, mapped, nbytes, room, expect) -> None:
    assert ds.sample_on_device(setting, torch.device(device), mapped, nbytes, room) is expect


def test_a_gpu_whose_cuda_core_cannot_run_samples_on_the_host_unless_told() -> None:
    gpu = torch.device("cuda", 0)
    assert ds.sample_on_device("auto", gpu, True, 1, 100, core="no driver") is False
    with pytest.raises(GraphtrainError, match="the CUDA core cannot sample on cuda:0: no driver"):
        ds.sample_on_device("device", gpu, True, 1, 100, core="no driver")
    assert ds.core_reason(torch.device("cpu")) == ""
    assert ds.core_reason(gpu)  # this machine has no GPU: the core says why


def test_device_sampling_that_cannot_be_had_is_refused_naming_why() -> None:
    with pytest.raises(GraphtrainError, match="does not map every shard's graph"):
        ds.sample_on_device("device", torch.device("cuda"), False, 1, 100)
    with pytest.raises(GraphtrainError, match="the graph's 1,000 bytes are more than 25% of cuda's 100"):
        ds.sample_on_device("device", torch.device("cuda"), True, 1000, 100)


def test_a_client_without_mapped_graphs_keeps_host_sampling() -> None:
    class Remote:
        num_shards = 2

        class transport:  # noqa: N801 - stands for a ZmqTransport to servers on another host
            @staticmethod
            def local_graph(shard: int) -> None:
                return None

    assert ds.device_graph("auto", torch.device("cuda"), Remote(), 10) is None
    assert ds.device_graph("host", CPU, Remote(), 10) is None


def test_a_batch_hands_over_every_tensor_holding_its_memory(on_device) -> None:
    """A batch made ahead on a GPU is handed to the training stream tensor by tensor (handover.py): every
    array of its blocks (a CSR matrix's three) and of what fetch added, and nothing else."""
    mb = ds.sample_blocks_on(on_device, np.arange(0, 600, 7), [4, 2], seed=3)
    mb.data = {"y": torch.zeros(3), "x": None}
    held = list(handover.tensors_of(mb))
    # per block: src, dst, crow/col/values of A and of A^T, and the order by source; then y; then the
    # input nodes there
    assert len(held) == 2 * (2 + 3 + 3 + 1) + 1 + 1 and all(t.layout == torch.strided for t in held)
    assert any(t is mb.data["y"] for t in held) and any(t is mb.input_device for t in held)
    cpu = torch.device("cpu")
    assert handover.side_stream(cpu) is None and handover.side_stream(None) is None
    assert handover.made(None) is None
    with handover.on(None):
        handover.receive(mb, None, cpu)  # nothing to wait for on the host


def test_ahead_on_the_loader_thread_makes_the_inline_batches(dist_graph, on_device) -> None:
    ids = node_split(dist_graph.config, "train", 0, 1)

    def sampler(seeds, fanouts, seed):
        return ds.sample_blocks_on(on_device, seeds, fanouts, seed)

    def run(prefetch: int) -> list:
        loader = NeighborLoader(dist_graph, ids, [3, 2], 64, seed=0, sampler=sampler, prefetch=prefetch)
        return [(mb.input_nodes.tolist(), mb.blocks[0].mean.to_dense()) for mb in loader.batches(0)]

    inline, ahead = run(0), run(2)
    assert [n for n, _ in ahead] == [n for n, _ in inline]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(ahead, inline, strict=True))
