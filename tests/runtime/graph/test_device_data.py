"""Node data held whole on the trainer's device (device_data.py), on the host's tensors here: the whole
tables equal the shards' rows, a batch's device gather equals the host fetch, and the node data goes
to a GPU only within its share of the free memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import partition
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph import device_data as dd
from graphtrain.runtime.graph import device_sampler as ds
from graphtrain.runtime.graph.dist_graph import standalone_client
from tests.conftest import planted_graph

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> DistGraph:
    g = planted_graph(n=700, k=3, seed=9)
    g.feat = np.random.default_rng(1).standard_normal((g.num_nodes, 6)).astype(np.float32)
    result = partition.partition_graph(g, 3, "metis", ["nodes"], 0.1, 0, None)
    config = partition.write(g, result, tmp_path_factory.mktemp("part") / "p")
    return DistGraph(config, standalone_client(config))


def test_the_whole_tables_are_the_shards_rows(graph: DistGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dd, "COPY_ROWS", 256)  # several pulls, the last one short
    tensors = {"feat": graph.ndata["feat"], "label": graph.ndata["label"], "absent": None}
    data = dd.device_node_data(tensors, graph.num_nodes, CPU, None)
    assert set(data) == {"feat", "label"}
    every = np.arange(graph.num_nodes)
    assert torch.equal(data["feat"], graph.ndata["feat"][every])
    assert torch.equal(data["label"], graph.ndata["label"][every])
    assert data["feat"].dtype == graph.ndata["feat"].dtype and data["label"].shape == (graph.num_nodes,)
    assert dd.data_bytes(data) == graph.num_nodes * (6 * 4 + dd.row_bytes(graph.ndata["label"]))


def test_a_batch_gathered_on_the_device_is_the_host_fetch(graph: DistGraph) -> None:
    on_device = ds.device_graph("device", CPU, graph.client, graph.num_nodes)
    assert on_device is not None
    data = dd.device_node_data(
        {"feat": graph.ndata["feat"], "label": graph.ndata["label"]}, graph.num_nodes, CPU, None
    )
    seeds = np.arange(3, 690, 11)
    mb = ds.sample_blocks_on(on_device, seeds, [4, 3], seed=5)
    assert mb.input_device is not None and mb.input_device.tolist() == mb.input_nodes.tolist()
    assert mb.input_device[: len(seeds)].tolist() == seeds.tolist()  # where the labels are read
    assert torch.equal(data["feat"].index_select(0, mb.input_device), graph.ndata["feat"][mb.input_nodes])
    y = data["label"].index_select(0, mb.input_device[: len(seeds)])
    assert torch.equal(y, graph.ndata["label"][seeds])


@pytest.mark.parametrize(
    ("nbytes", "room", "expect"),
    [(1, None, True), (25, 100, True), (26, 100, False), (0, 0, True)],
)
def test_node_data_goes_to_a_gpu_within_its_share(nbytes: int, room: int | None, expect: bool) -> None:
    assert dd.data_on_device(nbytes, room) is expect


def test_no_room_leaves_batches_fetching_their_rows(graph: DistGraph) -> None:
    feat = graph.ndata["feat"]
    assert dd.device_node_data({"feat": feat}, graph.num_nodes, CPU, room=graph.num_nodes * 6 * 4) == {}
    assert dd.device_node_data({"feat": None}, graph.num_nodes, CPU, None) == {}
