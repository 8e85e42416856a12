"""Sampling on the GPU (device_sampler.py): the host tests' checks with the graph on cuda:0, against the
host sampler (every neighbour: edge for edge) and the graph itself (a draw: real in-neighbours, seeded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.graph import DistGraph, NeighborLoader, node_split, sample_blocks
from graphtrain.runtime.graph import device_sampler as ds
from graphtrain.runtime.graph.loader import Block, MiniBatch
from tests.runtime.graph import test_device_sampler_typed as typed
from tests.runtime.graph.test_device_sampler import dist_graph  # noqa: F401 - the fixture
from tests.runtime.graph.test_sampling import in_neighbours

GPU = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def on_gpu(dist_graph: DistGraph) -> ds.DeviceGraph:  # noqa: F811
    graph = ds.device_graph("auto", GPU, dist_graph.client, dist_graph.num_nodes)
    assert graph is not None and graph.indices.is_cuda  # auto samples on a GPU that maps the graph
    return graph


@pytest.mark.parametrize("fanouts", [[-1, -1], [4, 2], [1, 1], [10, 25]])
def test_gpu_blocks_are_the_host_samplers_edge_for_edge(dist_graph, on_gpu, fanouts) -> None:  # noqa: F811
    """The CUDA core draws what the CPU core draws (sample_math.h), per node and request seed."""
    seeds = np.arange(0, 600, 7)
    host = sample_blocks(dist_graph, seeds, fanouts, seed=11)
    mine = ds.sample_blocks_on(on_gpu, seeds, fanouts, seed=11)
    assert np.array_equal(mine.input_nodes, host.input_nodes)
    for b, h in zip(mine.blocks, host.blocks, strict=True):
        assert b.mean.is_cuda and b.mean_t.is_cuda and b.src.is_cuda
        assert torch.equal(b.src.cpu(), h.src) and torch.equal(b.dst.cpu(), h.dst)
        assert torch.equal(b.mean.to_dense().cpu(), h.mean.to_dense())
        assert torch.equal(b.mean_t.to_dense().cpu(), h.mean_t.to_dense())


def test_gpu_draws_are_real_in_neighbours_and_seeded(dist_graph, on_gpu) -> None:  # noqa: F811
    truth = in_neighbours(dist_graph)
    seeds = np.random.default_rng(0).choice(dist_graph.num_nodes, 200, replace=False)
    first = ds.sample_blocks_on(on_gpu, seeds, [3, 2], seed=5)
    again = ds.sample_blocks_on(on_gpu, seeds, [3, 2], seed=5)
    assert np.array_equal(first.input_nodes, again.input_nodes)
    for b, c in zip(first.blocks, again.blocks, strict=True):
        assert torch.equal(b.mean.to_dense(), c.mean.to_dense())
    src, counts = on_gpu.sample(torch.from_numpy(seeds).to(GPU), 2, 1)
    offset = 0
    for s, c in zip(seeds.tolist(), counts.tolist(), strict=True):
        mine = truth.get(s, [])
        got = src[offset : offset + c].tolist()
        offset += c
        assert c == min(2, len(mine)) and all(got.count(x) <= mine.count(x) for x in set(got))


def test_batches_made_ahead_on_a_side_stream_are_the_inline_ones(dist_graph, on_gpu) -> None:  # noqa: F811
    """prefetch on a GPU trainer: the loader thread samples on its own stream (handover.py); the batches
    the training thread receives are the ones it would have made itself, and usable at once on its stream."""
    ids = node_split(dist_graph.config, "train", 0, 1)

    def sampler(seeds, fanouts, seed):
        return ds.sample_blocks_on(on_gpu, seeds, fanouts, seed)

    def run(prefetch: int) -> list:
        loader = NeighborLoader(
            dist_graph, ids, [3, 2], 64, seed=0, sampler=sampler, prefetch=prefetch, device=GPU
        )
        out = []
        for mb in loader.batches(0):
            h = torch.ones(mb.blocks[0].num_src, 4, device=GPU)  # on the training stream, no host wait
            out.append((mb.input_nodes.tolist(), torch.sparse.mm(mb.blocks[0].mean, h).cpu()))
        return out

    inline, ahead = run(0), run(3)
    assert [n for n, _ in ahead] == [n for n, _ in inline]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(ahead, inline, strict=True))


def test_the_cuda_sampler_refuses_a_seed_outside_the_graph(on_gpu) -> None:
    seeds = torch.tensor([3, on_gpu.num_nodes + 5], device=GPU)
    with pytest.raises(SparseInputError, match=r"seeds\[1\] = \d+ is outside the graph's nodes"):
        on_gpu.sample(seeds, 2, 0)
    src, counts = on_gpu.sample(torch.tensor([3], device=GPU), 2, 0)  # the core is fine afterwards
    assert int(counts.sum()) == len(src)


def test_a_hub_with_more_edges_than_a_warp_draws_distinct_sources() -> None:
    """Node 0 has 1,000 in-neighbours: fan-outs past the warp's 32 lanes and up to the whole list."""
    indptr = torch.tensor([0, 1000] + [1000] * 1000, device=GPU)
    indices = torch.arange(1, 1001, device=GPU)
    graph = ds.DeviceGraph(indptr, indices)
    host = ds.DeviceGraph(indptr.cpu(), indices.cpu())
    for fanout in (1, 31, 33, 999, 1000, -1):
        src, counts = graph.sample(torch.tensor([0, 5], device=GPU), fanout, 7)
        want = host.sample(torch.tensor([0, 5]), fanout, 7)
        assert torch.equal(src.cpu(), want[0]) and torch.equal(counts.cpu(), want[1])
        assert len(set(src.tolist())) == len(src) == (1000 if fanout < 0 else fanout)


@pytest.fixture(scope="module")
def typed_graph(tmp_path_factory) -> DistGraph:
    return typed.three_parts(tmp_path_factory)


@pytest.mark.parametrize("fanouts", typed.FANOUTS, ids=["one", "all", "per-type", "none-then-two"])
def test_gpu_typed_blocks_are_the_host_samplers_edge_for_edge(typed_graph, fanouts) -> None:
    """Issue 44's GPU figure: the CUDA core's typed draw (gt_cuda_sample_edges_*) gives the host
    sampler's blocks, with each edge's type, id and features, for one fan-out and one per edge type."""
    graph = ds.device_graph(
        "auto", GPU, typed_graph.client, typed_graph.num_nodes, True, typed_graph.edata["efeat"]
    )
    assert graph is not None and graph.typed and graph.etype.is_cuda and graph.efeat.is_cuda
    seeds = np.arange(0, 400, 3)
    for seed in (0, 11):
        mine = ds.sample_blocks_on(graph, seeds, fanouts, seed)
        assert all(b.etype.is_cuda and b.efeat.is_cuda for b in mine.blocks)
        on_host = copy_to_host(mine)
        typed.same_blocks(on_host, sample_blocks(typed_graph, seeds, fanouts, seed))


def copy_to_host(mb: MiniBatch) -> MiniBatch:
    def host(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.cpu()

    blocks = [
        Block(b.num_src, b.num_dst, host(b.src), host(b.dst), host(b.mean), host(b.mean_t), host(b.etype),
              host(b.eid).numpy(), host(b.efeat), host(b.order))
        for b in mb.blocks
    ]  # fmt: skip
    return MiniBatch(seeds=mb.seeds, input_nodes=mb.input_nodes, blocks=blocks)


def test_a_hub_with_many_relations_draws_each_relations_share() -> None:
    """Node 0 has 1,000 in-edges in 3 runs of types 0, 1, 2 (500, 300, 200): per-type fan-outs past a
    warp and up to whole runs, drawn as the CPU core draws them."""
    etype = torch.repeat_interleave(torch.tensor([0, 1, 2]), torch.tensor([500, 300, 200]))
    indptr = torch.tensor([0, 1000] + [1000] * 1000)
    indices = torch.arange(1, 1001)
    host = ds.DeviceGraph(indptr, indices, etype, torch.arange(1000))
    gpu = ds.DeviceGraph(indptr.to(GPU), indices.to(GPU), etype.to(GPU), torch.arange(1000, device=GPU))
    for fan in ([1, 33, 0], [499, 300, -1], [-1, -1, -1], [0, 0, 0]):
        per_type = np.array(fan, dtype=np.int64)
        pos, counts = gpu.sample_edges(torch.tensor([0, 5], device=GPU), per_type, 7)
        want = host.sample_edges(torch.tensor([0, 5]), per_type, 7)
        assert torch.equal(pos.cpu(), want[0]) and torch.equal(counts.cpu(), want[1])
        assert len(set(pos.tolist())) == len(pos)
