"""Feature bags (model.featureBag, issue 31 item 3): each node's nonzero sparse feature columns read from
the partition files, as the (values, offsets) a bag lookup takes; the bag input they make; the feature
names a partition keeps for exports; canonical sparse features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from graphtrain.runtime import partition
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.data.nodefiles import read_features
from graphtrain.runtime.data.transform import project_graph_features
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.graph import FeatureBags
from graphtrain.runtime.optim import SparseEmbedding
from graphtrain.runtime.optim.embedding import uniform_init
from graphtrain.runtime.train.inputs import FixedRows, bag_input
from tests.conftest import planted_graph


@pytest.fixture(scope="module")
def worded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, partition.PartitionConfig]:
    """A 3-partition graph whose sparse features are named words; some nodes have none."""
    g = planted_graph(n=500, k=3, seed=2)
    feat = g.feat.tolil()
    feat[::7] = 0  # every 7th node: an empty bag
    g.feat = feat.tocsr()
    g.feat.eliminate_zeros()
    g.feature_names = np.array([f"w{j}" for j in range(g.feat.shape[1])])
    config = partition.write(g, partition.partition_graph(g, 3), tmp_path_factory.mktemp("part") / "p")
    return g, partition.load_config(config)


def test_bags_are_each_nodes_columns_in_new_ids(worded: tuple[Graph, partition.PartitionConfig]) -> None:
    g, cfg = worded
    bags = FeatureBags(cfg)
    assert (bags.num_nodes, bags.num_columns) == (500, 64)
    new_to_orig = partition.load_maps(cfg)["node_map"]
    ids = np.random.default_rng(0).integers(0, 500, 300)  # repeats, every partition, in any order
    values, offsets = bags(ids)
    assert values.dtype == offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(values)
    for i, node in enumerate(ids.tolist()):
        row = g.feat[new_to_orig[node]]
        assert values[offsets[i] : offsets[i + 1]].tolist() == row.indices.tolist()
    empty = np.flatnonzero(np.diff(g.feat.indptr) == 0)
    v, o = bags(partition.load_maps(cfg)["node_map_inverse"][empty])
    assert len(v) == 0 and np.array_equal(o, np.zeros(len(empty) + 1))
    v, o = bags(np.empty(0, np.int64))
    assert len(v) == 0 and o.tolist() == [0]


def test_bags_refuse_unknown_nodes_and_dense_data(worded: tuple[Graph, partition.PartitionConfig]) -> None:
    _, cfg = worded
    with pytest.raises(ValueError, match="node 500 is outside"):
        FeatureBags(cfg)(np.array([0, 500]))
    with pytest.raises(DataError, match="no sparse node data 'label'"):
        partition.load_sparse_rows(cfg, 0, "label")
    with pytest.raises(DataError, match="partition 3 does not exist"):
        partition.load_sparse_rows(cfg, 3)


@pytest.mark.parametrize("combiner", ["mean", "sum"])
def test_bag_input_combines_each_nodes_rows(
    worded: tuple[Graph, partition.PartitionConfig], combiner: str
) -> None:
    """Per word (one lookup of each distinct word) and per occurrence (collective.layers.bag), what a
    trainer learns with and what predict reads (FixedRows) agree with the bag written out by hand, an
    empty bag giving zeros; so do the gradients each word gets."""
    g, cfg = worded
    bags = FeatureBags(cfg)
    cpu = torch.device("cpu")
    nodes = np.arange(0, 500, 3)
    tables = [SparseEmbedding(64, 4, "word", init=uniform_init(seed=3)) for _ in range(2)]
    rows = tables[0].weight.detach().clone()
    per_word = bag_input(tables[0], bags, nodes, combiner, cpu)
    per_occurrence = bag_input(tables[1], bags, nodes, combiner, cpu, per_word=False)
    fixed = bag_input(FixedRows(rows), bags, nodes, combiner, cpu)
    new_to_orig = partition.load_maps(cfg)["node_map"]
    for i, node in enumerate(nodes.tolist()):
        cols = g.feat[new_to_orig[node]].indices
        want = rows[cols].sum(0) if len(cols) else torch.zeros(4)
        if combiner == "mean" and len(cols):
            want = want / len(cols)
        for got in (per_word, per_occurrence, fixed):
            assert torch.allclose(got[i], want, atol=1e-6)
    weights = torch.linspace(0, 1, per_word.numel()).view_as(per_word)
    grads = []
    for table, out in zip(tables, (per_word, per_occurrence), strict=True):
        (out * weights).sum().backward()
        ids, grad = table.pending()
        grads.append(torch.zeros(64, 4).index_add_(0, ids, grad))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)
    assert len(tables[0].pending()[0]) == len(np.unique(bags(nodes)[0]))  # each word once


def test_a_batch_without_words_gives_zeros(worded: tuple[Graph, partition.PartitionConfig]) -> None:
    g, cfg = worded
    bags = FeatureBags(cfg)
    empty = partition.load_maps(cfg)["node_map_inverse"][np.flatnonzero(np.diff(g.feat.indptr) == 0)]
    out = bag_input(SparseEmbedding(64, 4, "word"), bags, empty, "mean", torch.device("cpu"))
    assert out.shape == (len(empty), 4) and not out.any()


def test_the_partition_keeps_feature_names(worded: tuple[Graph, partition.PartitionConfig]) -> None:
    g, cfg = worded
    assert cfg.data["has_feature_names"]
    assert partition.load_names(cfg)["feature_names"].tolist() == g.feature_names.tolist()
    assert "feature_names" not in partition.load_maps(cfg)  # no id map
    assert partition.reassemble(cfg).feature_names.tolist() == g.feature_names.tolist()


def test_feature_names_go_with_their_columns() -> None:
    g = planted_graph(n=100, k=2)
    with pytest.raises(DataError, match="feature_names must name each feature column once"):
        Graph.from_edges("g", 100, *g.edges(), feat=g.feat, feature_names=np.array(["a", "b"]))
    g.feature_names = np.array([f"w{j}" for j in range(64)])
    assert project_graph_features(g, 8).feature_names is None  # projected columns are no words


def test_sparse_feature_files_are_read_canonical(tmp_path: Path) -> None:
    """A repeated column is summed and an explicit zero dropped: a bag holds each nonzero column once."""
    raw = sp.csr_matrix(
        (np.array([1.0, 2.0, 0.0, 1.0], np.float32), np.array([2, 2, 1, 0]), np.array([0, 3, 4])),
        shape=(2, 3),
    )
    sp.save_npz(tmp_path / "f.npz", raw, compressed=False)
    feat = read_features(tmp_path / "f.npz").values
    assert feat.indices.tolist() == [2, 0] and feat.data.tolist() == [3.0, 1.0]
