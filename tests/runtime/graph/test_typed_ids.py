"""Type-local ids of a typed partition (partition/typed_ids.py, pure) and the per-type views of DistGraph
(graph/typed_views.py): a view read by type-local ids returns the flat tensor's rows of the stored ids,
in process and through 2 shard-server processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import kvstore, partition
from graphtrain.runtime.graph import DistGraph, standalone_client
from graphtrain.runtime.partition import typed_ids as ti
from tests.runtime.conftest import TOKEN, servers
from tests.runtime.graph.test_typed_sampling import typed_graph

# 2 parts, 3 types: part 0 holds ids 0..9 (type 0: 0-3, type 1: none, type 2: 4-9), part 1 ids 10..16
# (type 0: 10, type 1: 11-13, type 2: 14-16)
TYPE_BOUNDS = np.array([[0, 4, 4, 10], [10, 11, 14, 17]])
NODE_BOUNDS = np.array([0, 10, 17])


def test_node_offsets_count_each_type_by_part() -> None:
    assert ti.node_offsets(TYPE_BOUNDS).tolist() == [[0, 4, 5], [0, 0, 3], [0, 6, 9]]
    assert ti.type_counts(TYPE_BOUNDS).tolist() == [5, 3, 9]


@pytest.mark.parametrize(
    "ntype, local, stored",
    [
        (0, [0, 3, 4], [0, 3, 10]),
        (1, [0, 2], [11, 13]),  # a type absent from part 0
        (2, [5, 6, 8, 0], [9, 14, 16, 4]),
        (2, [], []),
    ],
)
def test_type_local_ids_map_to_stored_ids_and_back(ntype: int, local: list, stored: list) -> None:
    got = ti.nodes_to_global(TYPE_BOUNDS, ntype, np.array(local, dtype=np.int64))
    assert got.tolist() == stored
    types, back = ti.global_to_nodes(TYPE_BOUNDS, NODE_BOUNDS, got)
    assert types.tolist() == [ntype] * len(local) and back.tolist() == local


def test_every_stored_id_is_one_type_local_id() -> None:
    types, local = ti.global_to_nodes(TYPE_BOUNDS, NODE_BOUNDS, np.arange(17))
    for t, count in enumerate(ti.type_counts(TYPE_BOUNDS)):
        assert sorted(local[types == t].tolist()) == list(range(count))
        assert np.array_equal(
            ti.nodes_to_global(TYPE_BOUNDS, t, np.arange(count)), np.flatnonzero(types == t)
        )


@pytest.mark.parametrize("bad", [-1, 5])
def test_an_id_outside_the_type_is_refused_naming_it(bad: int) -> None:
    with pytest.raises(IndexError, match=f"node type 0: id {bad} is outside \\[0, 5\\)"):
        ti.nodes_to_global(TYPE_BOUNDS, 0, np.array([0, bad]))


def test_edge_ids_of_a_type_run_in_global_order_across_parts() -> None:
    etypes = [np.array([1, 0, 1, 1]), np.array([0, 0, 1])]  # part 1's edges start at 4
    assert ti.edge_ids_of_type(etypes, np.array([0, 4, 7]), 1).tolist() == [0, 2, 3, 6]
    assert ti.edge_ids_of_type(etypes, np.array([0, 4, 7]), 0).tolist() == [1, 4, 5]
    assert ti.edge_ids_of_type(etypes, np.array([0, 4, 7]), 2).tolist() == []


@pytest.mark.parametrize(
    "ntypes, bounds, rows",
    [
        ([1], [0, 0, 3], [-1] * 11 + [0, 1, 2] + [-1] * 3),  # one type: rows are its type-local ids
        ([0, 2], [0, 10, 14], list(range(10)) + [10, -1, -1, -1, 11, 12, 13]),
        ([2, 0], [0, 10, 14], list(range(10)) + [10, -1, -1, -1, 11, 12, 13]),  # order: type id
    ],
)
def test_a_table_over_node_types_has_a_row_per_node_of_them_by_part(ntypes, bounds, rows) -> None:
    assert ti.rows_bounds(TYPE_BOUNDS, ntypes).tolist() == bounds
    assert ti.rows_of(TYPE_BOUNDS, NODE_BOUNDS, ntypes, np.arange(17)).tolist() == rows


def test_one_type_table_rows_are_type_local_ids() -> None:
    types, local = ti.global_to_nodes(TYPE_BOUNDS, NODE_BOUNDS, np.arange(17))
    rows = ti.rows_of(TYPE_BOUNDS, NODE_BOUNDS, [2], np.arange(17))
    assert np.array_equal(rows[types == 2], local[types == 2])


# ------------------------------------------------------------------------------------- DistGraph views


@pytest.fixture(scope="module")
def typed_partition(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g = typed_graph(n_users=120, n_items=40)
    return partition.write(g, partition.partition_graph(g, 2), tmp_path_factory.mktemp("typed") / "part")


def check_views(graph: DistGraph) -> None:
    """Every type's view reads, by type-local id, the flat tensor's rows of the stored ids."""
    all_types = graph.node_types(np.arange(graph.num_nodes))
    for t, name in enumerate(graph.ntype_names):
        view = graph.nodes[name]
        stored = np.flatnonzero(all_types == t)
        assert len(view) == len(stored)
        local = np.random.default_rng(t).permutation(len(view))
        assert np.array_equal(view.to_global(local), stored[local])
        for key in ("feat", "label"):
            assert view.data[key].shape == (len(view), *graph.ndata[key].shape[1:])
            assert np.array_equal(view.data[key][local].numpy(), graph.ndata[key][stored[local]].numpy())
    counted = 0
    for cet in graph.canonical_etypes:
        view = graph.edges[cet]
        assert graph.edges[cet[1]].count == view.count  # each relation names one type here
        counted += len(view)
        local = np.arange(len(view))[::-1]
        flat = graph.edata["efeat"][view.to_global(local)]
        assert np.array_equal(view.data["efeat"][local].numpy(), flat.numpy())
    assert counted == graph.num_edges


def test_views_read_the_flat_rows_in_process(typed_partition: Path) -> None:
    graph = DistGraph(typed_partition, standalone_client(typed_partition))
    check_views(graph)
    with pytest.raises(KeyError, match="no node type 'shop' \\(node types: user, item\\)"):
        graph.nodes["shop"]
    with pytest.raises(KeyError, match="no edge type has relation 'sold'"):
        graph.edges["sold"]
    with pytest.raises(IndexError, match="outside"):
        graph.nodes["item"].data["feat"][np.array([40])]


def test_an_untyped_graph_has_flat_data_and_no_types(tmp_path: Path) -> None:
    from graphtrain.runtime.data.graph import Graph

    rng = np.random.default_rng(0)
    g = Graph.from_edges(
        "flat", 30, rng.integers(0, 30, 90), rng.integers(0, 30, 90), feat=rng.random((30, 3), np.float32)
    )
    cfg = partition.write(g, partition.partition_graph(g, 2), tmp_path / "part")
    graph = DistGraph(cfg, standalone_client(cfg))
    assert graph.ndata["feat"][np.arange(30)].shape == (30, 3)
    with pytest.raises(KeyError, match="node types: none"):
        graph.nodes["user"]


@pytest.mark.timeout(120)
def test_views_read_the_flat_rows_through_two_shard_servers(typed_partition: Path, ckroot: Path) -> None:
    with servers(2, ckroot, "--partition", str(typed_partition)) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        try:
            check_views(DistGraph(typed_partition, client))
        finally:
            client.close()


# ------------------------------------------------------------------------ a table over node types

DATA = {
    "node_bounds": NODE_BOUNDS.tolist(),
    "type_bounds": TYPE_BOUNDS.tolist(),
    "ntype_names": ["user", "shop", "item"],
}


def test_node_rows_of_a_table_over_every_node_are_the_node_ids() -> None:
    rows = ti.NodeRows.of(DATA, "node", None)
    assert rows.types is None and rows.num_rows == 17 and rows.bounds.tolist() == [0, 10, 17]
    assert rows.rows(np.array([3, 16])).tolist() == [3, 16]


def test_node_rows_over_types_are_split_like_their_nodes() -> None:
    rows = ti.NodeRows.of(DATA, "emb", ["item", "shop"])
    assert rows.types == (2, 1) and rows.num_rows == 12 and rows.bounds.tolist() == [0, 6, 12]
    assert rows.rows(np.array([0, 4, 11, 14])).tolist() == [-1, 0, 6, 9]


@pytest.mark.parametrize(
    "data, types, message",
    [
        (
            {"node_bounds": [0, 17]},
            ["user"],
            "embeddings\\[emb\\].nodeTypes: the partition has no node types",
        ),
        (
            DATA,
            ["buyer"],
            "embeddings\\[emb\\].nodeTypes: no node type 'buyer' \\(node types: user, shop, item\\)",
        ),
        (
            {**DATA, "type_bounds": [[0, 4, 4, 10], [10, 11, 11, 17]]},
            ["shop"],
            "embeddings\\[emb\\].nodeTypes: the graph has no node of type shop",
        ),
    ],
)
def test_node_rows_refuse_a_partition_without_the_types(data: dict, types: list, message: str) -> None:
    from graphtrain.runtime.errors import GraphtrainError

    with pytest.raises(GraphtrainError, match=message):
        ti.NodeRows.of(data, "emb", types)


def test_node_input_gives_other_types_zeros_and_gradients_only_to_the_types_rows() -> None:
    import torch

    from graphtrain.runtime.train.inputs import node_input

    weight = torch.arange(12 * 2, dtype=torch.float32).reshape(12, 2).requires_grad_()
    rows = ti.NodeRows.of(DATA, "emb", ["item", "shop"])
    nodes = np.array([0, 4, 11, 4, 10])
    out = node_input(lambda ids: weight[ids], rows, nodes, torch.device("cpu"))
    assert out.tolist() == [[0, 0], weight[0].tolist(), weight[6].tolist(), weight[0].tolist(), [0, 0]]
    out.sum().backward()
    assert weight.grad is not None
    assert weight.grad[:, 0].tolist() == [2, 0, 0, 0, 0, 0, 1] + [0] * 5
    every = node_input(
        lambda ids: ids[:, None].float(), ti.NodeRows.of(DATA, "n", None), nodes, torch.device("cpu")
    )
    assert every[:, 0].tolist() == nodes.tolist()
